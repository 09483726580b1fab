//! `gputune status`: every GPU's identity, constraints and one snapshot, as text or JSON.

use crate::tuning::in_force::ControlsInForce;
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::device::resolve_gpu;
use crate::device::worker::{DeviceWorker, call_timeout_from_env};
use crate::folders::Folders;
use crate::service::client::{SocketChoice, connect_daemon};
use gputune_formats::protocol::{Request, Response};
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};
use gputune_formats::tuning::{CriticalNote, GpuTuning, Holder};
use gputune_formats::units::{energy, gib, mib_text, or_na, watts};
use gputune_formats::{
    card::{Constraints, DeviceError, GpuIdentity, GpuProcess, Telemetry},
    throttle::ThrottleReasons,
};

/// One GPU as `status --json` prints it: identity, constraints and telemetry side by side,
/// plus `fan_speed_pct` / `fan_speed_rpm` as flat lists like nvidia-smi's fields.
#[derive(Debug, Serialize)]
pub struct GpuStatus {
    #[serde(flatten)]
    pub identity: GpuIdentity,
    #[serde(flatten)]
    pub constraints: Constraints,
    #[serde(flatten)]
    pub telemetry: Telemetry,
    pub fan_speed_pct: Option<Vec<Option<u32>>>,
    pub fan_speed_rpm: Option<Vec<Option<u32>>>,
    pub clock_offsets_supported: bool,
    /// The gputune sessions holding controls of the GPU (a `run`, a sweep, a trial, the
    /// window's fan curve), each with the controls it holds, as the daemon says; empty without
    /// one, or without a daemon to ask.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<SessionStatus>,
    /// Parts the driver did not answer in time ("readings (the driver did not answer within
    /// 30 s)"); their fields read as unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_read: Vec<String>,
    /// Whether the readings (and processes) were read: not when the driver timed out first.
    #[serde(skip)]
    pub has_readings: bool,
    /// What the card runs: power limit, clock locks (as the daemon or this user's gputune
    /// recorded them: NVML cannot read them back), offsets, fan modes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings_in_force: Option<SettingsInForce>,
    /// The card's last critical error (Xid) and what the daemon put back for it, as the daemon
    /// says (the sentence its clients were told then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_critical: Option<CriticalNote>,
}

/// A session holding a GPU, for `status`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionStatus {
    #[serde(flatten)]
    pub holder: Holder,
    /// Energy the GPU used since the session began (from its counter in this reading).
    pub energy_used_mj: Option<u64>,
}

/// A GPU that could not be read, in JSON next to the ones that could.
#[derive(Debug, Serialize)]
struct GpuFailure {
    index: u32,
    error: String,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum GpuEntry {
    Read(Box<GpuStatus>),
    Failed(GpuFailure),
}

#[derive(Debug, Serialize)]
struct StatusReport<'a> {
    backend: &'a str,
    /// Why the simulator stands in for NVML, when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    simulated_because: Option<&'a str>,
    gpus: Vec<GpuEntry>,
}

impl GpuStatus {
    /// A GPU from its parts (its processes in `telemetry.processes`).
    fn from_parts(
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
        }
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
    Ok(GpuStatus::from_parts(
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
            backend: worker.kind().as_str(),
            simulated_because,
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

fn write_text(
    out: &mut dyn Write,
    backend: &str,
    simulated_because: Option<&str>,
    entries: &[GpuEntry],
) -> std::io::Result<()> {
    match (backend, simulated_because) {
        ("sim", Some(reason)) => writeln!(out, "Simulated GPU (NVML unavailable: {reason})")?,
        ("sim", None) => writeln!(out, "Simulated GPU")?,
        _ => {}
    }
    for entry in entries {
        match entry {
            GpuEntry::Read(status) => write_gpu_text(out, status)?,
            GpuEntry::Failed(failure) => writeln!(out, "GPU {}: {}", failure.index, failure.error)?,
        }
    }
    Ok(())
}

fn write_gpu_text(out: &mut dyn Write, status: &GpuStatus) -> std::io::Result<()> {
    let identity = &status.identity;
    let limits = &status.constraints;
    let reading = &status.telemetry;
    writeln!(
        out,
        "GPU {}  {}  {}  {}",
        identity.index,
        crate::text::printable(&identity.name),
        crate::text::printable(&identity.uuid),
        crate::text::printable(&identity.pci_bus_id)
    )?;
    if !status.not_read.is_empty() {
        writeln!(out, "  Not read     {}", status.not_read.join("; "))?;
    }
    if !status.has_readings {
        return Ok(());
    }
    let power_range = match (limits.power_limit_min_mw, limits.power_limit_max_mw) {
        (Some(min), Some(max)) => format!(", range {}-{}", watts(min), watts(max)),
        _ => String::new(),
    };
    writeln!(
        out,
        "  Power        {} of {} limit (default {}{power_range})",
        or_na(reading.power_draw_mw, watts),
        or_na(reading.power_limit_mw, watts),
        or_na(limits.power_limit_default_mw, watts),
    )?;
    writeln!(
        out,
        "  Temperature  {}",
        or_na(reading.temperature_c, |c| format!("{c} °C"))
    )?;
    let fans = match &reading.fans {
        None => "n/a (no fans reported)".to_string(),
        Some(fans) => fans
            .iter()
            .map(|fan| {
                format!(
                    "{} ({})",
                    or_na(fan.speed_pct, |pct| format!("{pct} %")),
                    or_na(fan.speed_rpm, |rpm| format!("{rpm} RPM"))
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    };
    writeln!(out, "  Fans         {fans}")?;
    let mhz = |value: Option<u32>| or_na(value, |mhz| format!("{mhz} MHz"));
    writeln!(
        out,
        "  Clocks       graphics {}, SM {}, memory {}",
        mhz(reading.gpu_clock_mhz),
        mhz(reading.sm_clock_mhz),
        mhz(reading.memory_clock_mhz)
    )?;
    let pct = |value: Option<u32>| or_na(value, |pct| format!("{pct} %"));
    writeln!(
        out,
        "  Utilization  GPU {}, memory {}",
        pct(reading.utilization_gpu_pct),
        pct(reading.utilization_memory_pct)
    )?;
    writeln!(
        out,
        "  VRAM         {} of {}",
        or_na(reading.memory_used_bytes, gib),
        gib(identity.memory_total_bytes)
    )?;
    writeln!(
        out,
        "  P-state      {}",
        or_na(reading.performance_state, |p| format!("P{p}"))
    )?;
    writeln!(
        out,
        "  Throttle     {}",
        ThrottleReasons::summary(reading.throttle_reasons)
    )?;
    let link = |generation: Option<u32>, width: Option<u32>| {
        format!(
            "Gen {} x{}",
            or_na(generation, |g| g.to_string()),
            or_na(width, |w| w.to_string())
        )
    };
    writeln!(
        out,
        "  PCIe         {} (max {})",
        link(reading.pcie_link_gen, reading.pcie_link_width),
        link(reading.pcie_link_gen_max, reading.pcie_link_width_max)
    )?;
    writeln!(
        out,
        "  Energy       {} since the driver loaded",
        or_na(reading.energy_total_mj, energy)
    )?;
    // Only cards with ECC on say it (datacenter cards); a GeForce card's line would be noise.
    if let Some(ecc) = reading.ecc {
        writeln!(
            out,
            "  ECC errors   {} corrected, {} uncorrected since the driver loaded",
            ecc.corrected_volatile, ecc.uncorrected_volatile
        )?;
    }
    if let Some(in_force) = &status.settings_in_force {
        writeln!(out, "  Settings     {}", settings_text(in_force))?;
        if let Some(offsets) = pstate_offsets_text(in_force) {
            writeln!(out, "  Offsets      {offsets}")?;
        }
    }
    if let Some(critical) = &status.last_critical {
        writeln!(
            out,
            "  Crash        {}: {}",
            gputune_formats::units::local_time(critical.at_ms, "%-d %b %H:%M:%S"),
            critical.sentence
        )?;
    }
    let job_pid = status
        .sessions
        .iter()
        .find_map(|session| session.holder.job_pid);
    for session in &status.sessions {
        let purpose = session.holder.purpose.as_str();
        // A check at the card's own settings holds no control: it is there to be seen.
        let holding = if session.holder.controls.is_empty() {
            "holding no control".to_string()
        } else {
            format!("holding the {}", session.holder.controls_text())
        };
        writeln!(
            out,
            "  Session      {purpose} {holding} by {}, since {}{}",
            crate::text::printable(&session.holder.by),
            gputune_formats::units::local_time(session.holder.since_ms, "%H:%M:%S"),
            session
                .energy_used_mj
                .map_or(String::new(), |used| format!(", {} used", energy(used)))
        )?;
    }
    write_processes_text(out, reading.processes.as_deref(), job_pid)
}

/// Every P-state's offsets, "GPU P0 +150, P2 +150, P8 +0 MHz; memory P0 +0, P2 +0, P8 +0 MHz
/// (training runs in P2)"; "unknown" for offsets not reported per P-state; `None` without
/// offsets.
fn pstate_offsets_text(in_force: &SettingsInForce) -> Option<String> {
    let list = |offsets: &[gputune_formats::card::PstateOffset]| {
        offsets
            .iter()
            .map(|offset| format!("P{} {:+}", offset.pstate, offset.offset_mhz))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !in_force.gpu_clock_offsets.is_empty() {
        parts.push(format!("GPU {} MHz", list(&in_force.gpu_clock_offsets)));
    }
    if !in_force.memory_clock_offsets.is_empty() {
        parts.push(format!(
            "memory {} MHz",
            list(&in_force.memory_clock_offsets)
        ));
    }
    if parts.is_empty() {
        // An offset without P-states: an older daemon's answer, or a driver that says none.
        let any_offset =
            in_force.gpu_clock_offset_mhz.is_some() || in_force.memory_clock_offset_mhz.is_some();
        return any_offset.then(|| "per P-state: unknown (not reported)".to_string());
    }
    let computes_in_p2 = in_force
        .gpu_clock_offsets
        .iter()
        .chain(&in_force.memory_clock_offsets)
        .any(|offset| offset.pstate == 2);
    let note = if computes_in_p2 {
        " (training runs in P2)"
    } else {
        ""
    };
    Some(format!("{}{note}", parts.join("; ")))
}

/// What the card runs, for the text: the summary, and what cannot be known about clock locks.
fn settings_text(in_force: &SettingsInForce) -> String {
    let mut text = in_force.summary();
    let unknown: Vec<&str> = [
        ("GPU", in_force.gpu_clock_lock),
        ("memory", in_force.memory_clock_lock),
    ]
    .into_iter()
    .filter(|(_, lock)| *lock == ClockLockInForce::Unknown)
    .map(|(clock, _)| clock)
    .collect();
    if !unknown.is_empty() {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str(&format!(
            "{} clock lock{} not set by gputune this boot (NVML cannot read one set otherwise)",
            unknown.join(" and "),
            if unknown.len() > 1 { "s" } else { "" }
        ));
    }
    text
}

/// Every GPU's tuning as the daemon says (settings in force, the sessions holding its
/// controls), by UUID; empty when no daemon answers there (without one, no other program's
/// sessions are known to this one).
pub fn daemon_tunings(socket: &SocketChoice) -> HashMap<String, GpuTuning> {
    let Some(path) = socket.daemon_path() else {
        return HashMap::new();
    };
    let Ok(mut client) = connect_daemon(&path, "gputune status") else {
        return HashMap::new();
    };
    match client.request(Request::Snapshot) {
        Ok(Response::Snapshot(snapshot)) => snapshot
            .tunings
            .into_iter()
            .map(|tuning| (tuning.gpu_uuid.clone(), tuning))
            .collect(),
        _ => HashMap::new(),
    }
}

/// One line per process: pid, user, VRAM, kind and command.
fn write_processes_text(
    out: &mut dyn Write,
    processes: Option<&[GpuProcess]>,
    job_pid: Option<u32>,
) -> std::io::Result<()> {
    let processes = match processes {
        None => return writeln!(out, "  Processes    n/a (this GPU does not list them)"),
        Some([]) => return writeln!(out, "  Processes    none"),
        Some(processes) => processes,
    };
    for (number, process) in processes.iter().enumerate() {
        writeln!(
            out,
            "  {:<13}pid {:<8} {:<12} {:>10}  {:<3}  {}{}",
            if number == 0 { "Processes" } else { "" },
            process.pid,
            process.user_text(),
            or_na(process.used_memory_bytes, mib_text),
            process.kind.short(),
            process.command_text(),
            if Some(process.pid) == job_pid {
                "  (the session's job)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}
