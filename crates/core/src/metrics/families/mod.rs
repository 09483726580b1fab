//! Which metrics gputune exports, from one service [`Snapshot`]: dcgm-exporter's default
//! names, types, units and labels where one exists (so dashboards built for it keep working),
//! and gputune's own under `gputune_` (power limits, fans, throttle reasons one by one, what
//! the tuning engine holds). docs/metrics.md lists them.

mod dcgm;
mod own;
#[cfg(test)]
mod tests;

use super::exposition::{Exposition, Family, Kind, Value, label_pairs};
use gputune_formats::card::{BackendKind, Telemetry};
use gputune_formats::protocol::Snapshot;
use gputune_formats::tuning::JobInfo;
use gputune_formats::tuning::{GpuInfo, GpuTuning};

/// What every scrape says besides the GPUs.
#[derive(Debug, Clone)]
pub struct Context {
    /// dcgm-exporter's `Hostname` label.
    pub hostname: String,
    pub version: String,
    pub backend: BackendKind,
    /// True when the daemon serves the metrics (or the exporter is its client).
    pub daemon: bool,
}

/// One GPU as the families see it: once, or once per scheduler's job holding it (each with
/// that job's labels, as dcgm-exporter repeats a GPU's series for each job its mapping names).
struct Gpu<'a> {
    info: &'a GpuInfo,
    tuning: Option<&'a GpuTuning>,
    /// The latest reading, when it read and is fresh.
    reading: Option<&'a Telemetry>,
    /// The scheduler's job these series are labelled with.
    job: Option<&'a JobInfo>,
    /// dcgm-exporter's labels, escaped: `gpu="0",UUID="GPU-…",…`, for `DCGM_` families.
    dcgm_labels: String,
    /// The same in Prometheus's snake_case: `gpu="0",gpu_uuid="GPU-…",…`, for gputune's own.
    labels: String,
}

/// Extra labels and values of one family for one GPU.
#[derive(Default)]
struct Samples {
    list: Vec<(Vec<(&'static str, String)>, Value)>,
}

impl Samples {
    fn one(&mut self, value: Option<Value>) {
        self.labelled(Vec::new(), value);
    }

    fn labelled(&mut self, labels: Vec<(&'static str, String)>, value: Option<Value>) {
        if let Some(value) = value {
            self.list.push((labels, value));
        }
    }
}

type Collect = fn(&Gpu, &mut Samples);

const fn gauge(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Gauge,
        help,
    }
}

fn read(gpu: &Gpu, field: fn(&Telemetry) -> Option<u32>) -> Option<Value> {
    gpu.reading.and_then(field).map(Value::from)
}

/// The body of one scrape: every family over every GPU. `readings_fresh` false leaves every
/// reading out (the sampler stopped answering), keeping what the engine knows.
pub fn render(snapshot: &Snapshot, context: &Context, readings_fresh: bool) -> String {
    let mut gpus: Vec<Gpu> = Vec::with_capacity(snapshot.gpus.len());
    for (position, info) in snapshot.gpus.iter().enumerate() {
        let index = info.identity.index;
        let reading = match snapshot.latest.get(position) {
            Some(Some(Ok(reading))) if readings_fresh => Some(reading),
            _ => None,
        };
        let tuning = snapshot.tunings.iter().find(|t| t.gpu_index == index);
        let dcgm_labels = dcgm_labels(info, &context.hostname);
        let labels = own_labels(info, &context.hostname);
        let jobs = jobs_holding(tuning);
        if jobs.is_empty() {
            gpus.push(Gpu {
                info,
                tuning,
                reading,
                job: None,
                dcgm_labels,
                labels,
            });
            continue;
        }
        for job in jobs {
            let job_labels = job_labels(job);
            gpus.push(Gpu {
                info,
                tuning,
                reading,
                job: Some(job),
                dcgm_labels: format!("{dcgm_labels},{job_labels}"),
                labels: format!("{labels},{job_labels}"),
            });
        }
    }
    let mut body = Exposition::with_capacity(2_048 + 4_096 * gpus.len());
    let mut samples = Samples::default();
    for (family, collect) in dcgm::FAMILIES.iter().chain(own::FAMILIES) {
        let dcgm = family.name.starts_with("DCGM_");
        for gpu in &gpus {
            let labels = if dcgm { &gpu.dcgm_labels } else { &gpu.labels };
            samples.list.clear();
            collect(gpu, &mut samples);
            for (extra, value) in &samples.list {
                let extra: Vec<(&str, &str)> = extra
                    .iter()
                    .map(|(name, value)| (*name, value.as_str()))
                    .collect();
                body.sample(family, labels, &extra, *value);
            }
        }
    }
    let daemon = if context.daemon { "true" } else { "false" };
    let info = [
        ("version", context.version.as_str()),
        ("backend", context.backend.as_str()),
        ("daemon", daemon),
    ];
    body.sample(&own::EXPORTER_INFO, "", &info, Value::Integer(1));
    body.into_text()
}

/// The scheduler's jobs holding controls of a GPU, each once (the steps of one job share its
/// session), in the order they came.
fn jobs_holding(tuning: Option<&GpuTuning>) -> Vec<&JobInfo> {
    let mut jobs: Vec<&JobInfo> = Vec::new();
    let holders = tuning.into_iter().flat_map(|tuning| tuning.holders.iter());
    for job in holders.filter_map(|holder| holder.job.as_ref()) {
        if !jobs.iter().any(|seen| same_job(seen, job)) {
            jobs.push(job);
        }
    }
    jobs
}

fn same_job(one: &JobInfo, other: &JobInfo) -> bool {
    one.scheduler == other.scheduler && one.job_id == other.job_id
}

/// A job's labels on every series of the GPUs it holds: dcgm-exporter's HPC job mapping
/// names the job `hpc_job`; its user, `hpc_user`, as the mapping's "job user" files do.
fn job_labels(job: &JobInfo) -> String {
    label_pairs(&[
        ("hpc_job", job.job_id.as_str()),
        ("hpc_user", job.user.as_str()),
    ])
}

/// dcgm-exporter's labels, in its order: `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`,
/// `Hostname`, and the driver version its default set adds as a label.
fn dcgm_labels(info: &GpuInfo, hostname: &str) -> String {
    gpu_labels(
        info,
        hostname,
        ["UUID", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"],
    )
}

/// gputune's own families follow Prometheus's naming (snake_case), as dcgm-exporter spells
/// these labels on its own NVLink metrics: `gpu_uuid`, `model_name`, `hostname`.
fn own_labels(info: &GpuInfo, hostname: &str) -> String {
    gpu_labels(
        info,
        hostname,
        ["gpu_uuid", "model_name", "hostname", "driver_version"],
    )
}

/// `gpu`, the UUID, `pci_bus_id`, `device` (`nvidiaN`), the model, the host and the driver
/// version, with `names` for the UUID, model, host and driver.
fn gpu_labels(info: &GpuInfo, hostname: &str, names: [&str; 4]) -> String {
    let [uuid, model, host, driver] = names;
    let identity = &info.identity;
    let index = identity.index.to_string();
    let device = format!("nvidia{}", identity.index);
    let mut pairs = vec![
        ("gpu", index.as_str()),
        (uuid, identity.uuid.as_str()),
        ("pci_bus_id", identity.pci_bus_id.as_str()),
        ("device", device.as_str()),
        (model, identity.name.as_str()),
        (host, hostname),
    ];
    if let Some(version) = &identity.driver_version {
        pairs.push((driver, version.as_str()));
    }
    label_pairs(&pairs)
}
