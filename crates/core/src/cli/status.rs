//! `gputune status`: every GPU's identity, constraints and one snapshot, as text or JSON.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use crate::device::resolve_gpu;
use crate::device::worker::{DeviceWorker, call_timeout_from_env};
use crate::folders::Folders;
use crate::service::client::{SocketChoice, connect_daemon};
use crate::tuning::in_force::ControlsInForce;
use gputune_formats::card::{Constraints, DeviceError, GpuIdentity, Telemetry};
use gputune_formats::protocol::{Request, Response};
use gputune_formats::reports::status::{
    GpuEntry, GpuFailure, GpuStatus, STATUS_REPORT_FORMAT, SessionStatus, StatusReport,
};
use gputune_formats::tuning::GpuTuning;
use gputune_formats::tuning::SettingsInForce;

mod text;

use text::write_text;

/// A GPU from its parts (its processes in `telemetry.processes`).
fn gpu_status_from_parts(
    identity: GpuIdentity,
    constraints: Constraints,
    telemetry: Option<Telemetry>,
    not_read: Vec<String>,
) -> GpuStatus {
    let has_readings = telemetry.is_some();
    let telemetry = telemetry.unwrap_or_default();
    let fan_speed_pct = telemetry
        .fans
        .as_ref()
        .map(|fans| fans.iter().map(|fan| fan.speed_pct).collect());
    let fan_speed_rpm = telemetry
        .fans
        .as_ref()
        .map(|fans| fans.iter().map(|fan| fan.speed_rpm).collect());
    GpuStatus {
        clock_offsets_supported: constraints.clock_offsets_supported(),
        identity,
        constraints,
        telemetry,
        fan_speed_pct,
        fan_speed_rpm,
        sessions: Vec::new(),
        has_readings,
        not_read,
        settings_in_force: None,
        last_critical: None,
        temperature_hold: None,
    }
}

/// Reads GPU `index` part by part on the worker, each part with its own deadline: who it is,
/// its limits, its readings, its processes. A part the driver does not answer in time is said
/// in `not_read` (its fields read as unknown), and the parts after it are not asked for (the
/// driver is hung or very slow), so `status` prints what it has instead of nothing.
fn read_gpu_within(
    worker: &mut DeviceWorker,
    index: u32,
    timeout: Duration,
    say_slow: &mut dyn FnMut(),
) -> Result<GpuStatus, DeviceError> {
    let what = format!("reading GPU {index}");
    let identity = worker.call_noticing(&what, timeout, SLOW_AFTER, say_slow, move |backend| {
        backend.identity(index)
    })?;
    let mut not_read = Vec::new();
    let mut part = |name: &str, result: Result<(), DeviceError>| -> Result<bool, DeviceError> {
        match result {
            Ok(()) => Ok(true),
            Err(DeviceError::Timeout { waited_s, .. }) => {
                not_read.push(format!(
                    "{name} (the driver did not answer within {waited_s} s; nothing after it was asked)"
                ));
                Ok(false)
            }
            Err(error) => Err(error),
        }
    };
    let mut constraints = Constraints::default();
    let mut telemetry = None;
    let read_constraints =
        worker.call_noticing(&what, timeout, SLOW_AFTER, say_slow, move |backend| {
            backend.constraints(index)
        });
    if part("limits", read_constraints.map(|read| constraints = read))? {
        let read_telemetry =
            worker.call_noticing(&what, timeout, SLOW_AFTER, say_slow, move |backend| {
                backend.telemetry(index)
            });
        if part(
            "readings",
            read_telemetry.map(|read| telemetry = Some(read)),
        )? {
            let read_processes =
                worker.call_noticing(&what, timeout, SLOW_AFTER, say_slow, move |backend| {
                    backend.processes(index)
                });
            part(
                "processes",
                read_processes.map(|read| {
                    if let Some(telemetry) = &mut telemetry {
                        telemetry.processes = read;
                    }
                }),
            )?;
        }
    }
    Ok(gpu_status_from_parts(
        identity,
        constraints,
        telemetry,
        not_read,
    ))
}

/// Who set what the cards run, besides the card itself: the daemon's sessions and the locks
/// it set (none without a daemon), and the folders where this user's gputune records the
/// clock locks it sets when no daemon runs (NVML cannot read them back).
pub struct SetBy<'a> {
    pub daemon: &'a HashMap<String, GpuTuning>,
    pub folders: &'a Folders,
}

/// How long a GPU may take to answer before `status` says it is waiting.
const SLOW_AFTER: Duration = Duration::from_secs(2);

/// Prints the status of every GPU (or the one `gpu_query` names). A GPU that fails to read is
/// reported and makes the command fail, after the others are printed. Every GPU is read on
/// the worker with a deadline (a few driver-call deadlines: one read is a few dozen calls), and
/// a slow one is said on `messages` rather than waited for in silence.
pub fn run(
    worker: &mut DeviceWorker,
    simulated_because: Option<&str>,
    gpu_query: Option<&str>,
    json: bool,
    set_by: &SetBy,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let timeout = call_timeout_from_env() * 3;
    let query = gpu_query.map(str::to_string);
    let indices: Vec<u32> = worker.call("listing the GPUs", timeout, move |backend| {
        Ok(match query {
            Some(query) => vec![resolve_gpu(backend, &query)?],
            None => (0..backend.gpu_count()?).collect(),
        })
    })?;
    let backend_kind = worker.kind();
    let mut entries = Vec::new();
    let mut first_error = None;
    for index in indices {
        let mut said_slow = false;
        let mut say_slow = || {
            if !std::mem::replace(&mut said_slow, true) {
                let _ = writeln!(
                    messages,
                    "gputune: GPU {index} is answering slowly (the driver is busy or hung); waiting up to {} s for each part.",
                    timeout.as_secs()
                );
            }
        };
        let read = read_gpu_within(worker, index, timeout, &mut say_slow);
        match read {
            Ok(mut status) => {
                if !status.not_read.is_empty() {
                    first_error.get_or_insert(DeviceError::Timeout {
                        what: format!("reading all of GPU {index} (see \"Not read\")"),
                        waited_s: timeout.as_secs(),
                    });
                }
                let tuning = set_by.daemon.get(&status.identity.uuid);
                status.sessions = tuning
                    .into_iter()
                    .flat_map(|tuning| &tuning.holders)
                    .map(|holder| SessionStatus {
                        energy_used_mj: holder.energy_used_mj(status.telemetry.energy_total_mj),
                        holder: holder.clone(),
                    })
                    .collect();
                status.last_critical = tuning.and_then(|tuning| tuning.last_critical.clone());
                status.temperature_hold = tuning.and_then(|tuning| tuning.temperature_hold.clone());
                // The daemon knows the locks it set; without one, what this user's gputune
                // recorded, with what the card reads back.
                status.settings_in_force = match tuning {
                    Some(tuning) => Some(tuning.in_force.clone()),
                    None if status.has_readings => {
                        let uuid = status.identity.uuid.clone();
                        worker
                            .call("reading the settings", timeout, move |backend| {
                                backend.current_settings(index)
                            })
                            .ok()
                            .map(|current| {
                                let recorded = crate::tuning::engine::recorded_locks(
                                    set_by.folders,
                                    backend_kind,
                                    &uuid,
                                )
                                .unwrap_or_default();
                                // A lock the clocks read now contradict is not said as fact.
                                let locks = crate::tuning::lock_evidence::borne_out(
                                    recorded,
                                    &status.telemetry,
                                );
                                SettingsInForce::from_card(&current, locks)
                            })
                    }
                    None => None,
                };
                entries.push(GpuEntry::Read(Box::new(status)));
            }
            Err(error) => {
                entries.push(GpuEntry::Failed(GpuFailure {
                    index,
                    error: error.to_string(),
                }));
                first_error.get_or_insert(error);
            }
        }
    }
    if json {
        let report = StatusReport {
            format_version: STATUS_REPORT_FORMAT,
            backend: worker.kind().as_str().to_string(),
            simulated_because: simulated_because.map(str::to_string),
            gpus: entries,
        };
        crate::text::write_json_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        write_text(out, worker.kind().as_str(), simulated_because, &entries)?;
    }
    match first_error {
        Some(error) => Err(error.into()),
        None => Ok(()),
    }
}

/// Every GPU's tuning as the daemon says (settings in force, the sessions holding its
/// controls), by UUID (and, on standard error, a box check the machine went down in); empty when no daemon answers there (without one, no other program's
/// sessions are known to this one).
pub fn daemon_tunings(socket: &SocketChoice) -> HashMap<String, GpuTuning> {
    let Some(path) = socket.daemon_path() else {
        return HashMap::new();
    };
    let Ok(mut client) = connect_daemon(&path, "gputune status") else {
        return HashMap::new();
    };
    // A box check the machine went down in, as the daemon found it at its start.
    for notice in &client.welcome().notices {
        if notice
            .to_string()
            .starts_with(crate::tuning::engine::WENT_DOWN)
        {
            eprintln!("gputune: {}: {notice}", notice.level_word());
        }
    }
    match client.request(Request::Snapshot) {
        Ok(Response::Snapshot(snapshot)) => snapshot
            .tunings
            .into_iter()
            .map(|tuning| (tuning.gpu_uuid.clone(), tuning))
            .collect(),
        _ => HashMap::new(),
    }
}
