//! `gputune run --profile NAME -- COMMAND ARGS...`: applies a profile for the length of one
//! command, follows the profile's fan curve while it runs, then puts the card back and says
//! what the run cost (duration, energy, average power, peak temperature).
//!
//! The journal (`tuning::journal`) is written before anything is applied, so the settings go
//! back however the run ends: the command exits or fails (its exit code is passed through),
//! SIGINT / SIGTERM / SIGHUP (forwarded to the command as SIGTERM, then restore), a panic (the
//! `RevertGuard`), or `kill -9` (the next start of gputune restores from the journal).

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

use crate::cli::apply::{GpuChanges, apply_changes};
use crate::cli::profile::{choose_gpu, prepare};
use crate::device::{
    Backend, BackendOptions, Constraints, DeviceError, GpuIdentity, Setting, Telemetry,
    open_backend,
};
use crate::profiles::store::ProfileStore;
use crate::telemetry::csv::{TelemetryCsvWriter, open_for_append};
use crate::tuning::control::Controller;
use crate::tuning::journal::{
    Journal, JournalEntry, JournalError, RestoreReport, journal_path, restore_settings_for,
};
use crate::tuning::trial::RevertGuard;

/// Time between samples (fan curve, log, statistics).
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// How often gputune looks whether the command has ended.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// In a terminal, a Ctrl-C reaches the command directly; gputune waits this long for it to end
/// by itself before sending SIGTERM, so a training script's own Ctrl-C handling can finish.
const TERMINAL_GRACE: Duration = Duration::from_secs(3);
/// The exit status when the command cannot be started, as a shell gives it.
pub const EXIT_NOT_STARTED: i32 = 127;
/// The exit status when a signal arrived before the command was started (as for Ctrl-C).
pub const EXIT_STOPPED_BEFORE_START: i32 = 130;

/// `gputune run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The profile to apply while the command runs.
    #[arg(long, value_name = "NAME")]
    pub profile: String,
    /// The GPU: an index or a UUID (default: the profile's own card, else the only GPU).
    #[arg(long, value_name = "UUID|INDEX")]
    pub gpu: Option<String>,
    /// Append the GPU's readings, once a second, to this CSV file (`gputune log`'s format).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// What the run measured on the GPU, from the first sample to the last.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunStats {
    pub duration_s: f64,
    /// From the energy counter's difference; `None` without a counter.
    pub energy_wh: Option<f64>,
    /// Energy over time when there is a counter, else the mean of the power readings.
    pub average_power_w: Option<f64>,
    pub peak_temperature_c: Option<u32>,
    pub samples: usize,
}

impl RunStats {
    /// Summarizes the samples of a run that lasted `duration_s`.
    pub fn from_samples(samples: &[Telemetry], duration_s: f64) -> RunStats {
        let with_energy: Vec<(u64, u64)> = samples
            .iter()
            .filter_map(|sample| {
                sample
                    .energy_total_mj
                    .map(|energy| (sample.sampled_at_ms, energy))
            })
            .collect();
        let counted = match (with_energy.first(), with_energy.last()) {
            (Some(first), Some(last)) if last.1 >= first.1 => {
                let joules = (last.1 - first.1) as f64 / 1000.0;
                let seconds = last.0.saturating_sub(first.0) as f64 / 1000.0;
                Some((joules, seconds))
            }
            _ => None,
        };
        let power_readings: Vec<f64> = samples
            .iter()
            .filter_map(|sample| sample.power_draw_mw)
            .map(|milliwatts| f64::from(milliwatts) / 1000.0)
            .collect();
        let mean_power = (!power_readings.is_empty())
            .then(|| power_readings.iter().sum::<f64>() / power_readings.len() as f64);
        RunStats {
            duration_s,
            energy_wh: counted.map(|(joules, _)| joules / 3600.0),
            average_power_w: match counted {
                Some((joules, seconds)) if seconds > 0.0 => Some(joules / seconds),
                _ => mean_power,
            },
            peak_temperature_c: samples
                .iter()
                .filter_map(|sample| sample.temperature_c)
                .max(),
            samples: samples.len(),
        }
    }

    /// "Duration 12.3 s, energy 1.234 Wh, average power 361 W, peak temperature 71 °C."
    pub fn line(&self) -> String {
        let energy = self
            .energy_wh
            .map_or_else(|| "n/a".to_string(), |wh| format!("{wh:.3} Wh"));
        let power = self
            .average_power_w
            .map_or_else(|| "n/a".to_string(), |watts| format!("{watts:.0} W"));
        let temperature = self
            .peak_temperature_c
            .map_or_else(|| "n/a".to_string(), |celsius| format!("{celsius} °C"));
        format!(
            "Duration {:.1} s, energy {energy}, average power {power}, peak temperature {temperature}.",
            self.duration_s
        )
    }
}

/// Runs `gputune run`; returns the exit status gputune should end with (the command's).
pub fn run_command(args: &RunArgs, options: &BackendOptions) -> anyhow::Result<i32> {
    let store = ProfileStore::open_default()?;
    let stored = store.load(&args.profile)?;
    let mut opened = open_backend(options)?;
    if let Some(reason) = opened.fallback_reason.as_deref() {
        bail!(
            "There is no NVIDIA GPU to change ({reason}); add --backend sim to run with the simulated GPU."
        );
    }
    let backend = opened.backend.as_mut();
    let index = choose_gpu(
        backend,
        args.gpu.as_deref(),
        Some(&stored.profile.card.uuid),
    )?;
    let prepared = prepare(backend, index, &stored.profile)?;
    let mut messages = std::io::stderr();
    for notice in &prepared.application.notices {
        let _ = writeln!(messages, "gputune: notice: {notice}");
    }
    let path = journal_path().ok_or(JournalError::NoStateFolder)?;
    if let Some(pending) = Journal::read(&path)? {
        if let Some(owner) = pending
            .owner
            .filter(|_| pending.owner_is_another_running_process())
        {
            bail!(
                "Another gputune trial or run is in progress (process {}); wait for it to end first.",
                owner.pid
            );
        }
        return Err(JournalError::Pending { path }.into());
    }
    let log = match &args.log {
        Some(log_path) => {
            let (file, needs_header) = open_for_append(log_path)?;
            Some(TelemetryCsvWriter::new(file, needs_header).with_destination_name(log_path))
        }
        None => None,
    };
    let stop = install_stop_signal()?;

    // What the run changes: the profile's settings, and the fans when a curve drives them.
    let mut changes: Vec<Setting> = prepared
        .validated
        .iter()
        .map(|setting| *setting.setting())
        .collect();
    if prepared.application.fan_curve.is_some() {
        changes.extend(
            (0..prepared.constraints.fan_count).map(|fan_index| Setting::FanSpeed {
                fan_index,
                speed_pct: 0,
            }),
        );
    }
    let current = backend.current_settings(index)?;
    let journal = Journal::new(
        backend.kind(),
        vec![JournalEntry {
            uuid: prepared.identity.uuid.clone(),
            index,
            restore: restore_settings_for(&current, &changes),
        }],
    );
    journal
        .write(&path)
        .map_err(|error| anyhow!("{error} Nothing was changed."))?;

    let run = RunSetup {
        index,
        identity: prepared.identity.clone(),
        constraints: prepared.constraints.clone(),
        gpu_changes: GpuChanges {
            identity: prepared.identity.clone(),
            constraints: prepared.constraints.clone(),
            settings: prepared.validated.clone(),
        },
        fan_curve: prepared.application.fan_curve.clone(),
        command: args.command.clone(),
        profile_name: stored.profile.name.clone(),
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // The guard lives inside the unwind boundary: a panic drops it, and dropping restores.
        let mut guard = RevertGuard::new(backend, path.clone(), journal.clone());
        let result = supervise(
            &mut guard,
            &run,
            &current,
            &journal,
            &stop,
            log,
            &mut messages,
        );
        let report = guard.revert();
        (result, report)
    }));
    let (result, report) = match outcome {
        Ok(both) => both,
        Err(_) => bail!(
            "gputune stopped on an internal error during the run; the settings were put back from the journal {}.",
            path.display()
        ),
    };
    let report: RestoreReport = report?;
    for line in report.lines("Restored") {
        let _ = writeln!(messages, "gputune: {line}");
    }
    let ended = result?;
    let _ = writeln!(messages, "gputune: {}", ended.stats.line());
    if !report.is_complete() {
        let _ = writeln!(
            messages,
            "gputune: not every setting could be put back; the journal {} is kept, so the next start of gputune tries again.",
            report.journal_path.display()
        );
        if ended.exit_code == 0 {
            return Ok(1);
        }
    }
    Ok(ended.exit_code)
}

/// What `supervise` needs besides the backend.
struct RunSetup {
    index: u32,
    identity: GpuIdentity,
    constraints: Constraints,
    gpu_changes: GpuChanges,
    fan_curve: Option<crate::tuning::fan_curve::FanCurve>,
    command: Vec<OsString>,
    profile_name: String,
}

/// How the command ended.
struct RunEnded {
    exit_code: i32,
    stats: RunStats,
}

/// Applies, runs the command while sampling and driving the fans, and returns when it has
/// ended. Restoring is the caller's (through the guard), however this returns.
fn supervise(
    guard: &mut RevertGuard<'_>,
    run: &RunSetup,
    current: &crate::device::CurrentSettings,
    journal: &Journal,
    stop: &Receiver<()>,
    mut log: Option<TelemetryCsvWriter<std::fs::File>>,
    messages: &mut dyn Write,
) -> anyhow::Result<RunEnded> {
    if let Err(failure) = apply_changes(guard.backend(), std::slice::from_ref(&run.gpu_changes)) {
        // Undo only what was written: the rest never changed.
        let applied: Vec<Setting> = failure
            .applied
            .iter()
            .map(|(_, setting)| *setting)
            .collect();
        let only_applied = Journal {
            gpus: journal
                .gpus
                .iter()
                .map(|entry| JournalEntry {
                    restore: restore_settings_for(current, &applied),
                    ..entry.clone()
                })
                .collect(),
            ..journal.clone()
        };
        guard.set_journal(only_applied)?;
        bail!("{} The command was not started.", failure.message());
    }
    let applied = crate::tuning::journal::describe_all(
        &run.gpu_changes
            .settings
            .iter()
            .map(|setting| *setting.setting())
            .collect::<Vec<_>>(),
    );
    let _ = writeln!(
        messages,
        "gputune: applied the profile \"{}\" to GPU {} ({}){}{}; restored when the command ends.",
        run.profile_name,
        run.index,
        run.identity.name,
        if applied.is_empty() {
            String::new()
        } else {
            format!(": {applied}")
        },
        if run.fan_curve.is_some() {
            ", following its fan curve"
        } else {
            ""
        }
    );

    // The controller knows only this GPU; the others get no curve.
    let mut all_constraints = vec![Constraints::default(); run.index as usize + 1];
    all_constraints[run.index as usize] = run.constraints.clone();
    let mut controller = Controller::new(all_constraints);
    if let Some(curve) = &run.fan_curve
        && let Err(error) =
            controller.set_fan_curve(guard.backend(), run.index, Some(curve.clone()))
    {
        let _ = writeln!(messages, "gputune: the fan curve is not followed: {error}");
    }

    let mut sampler = Sampler {
        index: run.index,
        identity: run.identity.clone(),
        samples: Vec::new(),
        log_failed: false,
        fan_errors_reported: false,
    };
    sampler.sample(guard.backend(), &mut controller, &mut log, messages);

    let program = &run.command[0];
    if stop.try_recv().is_ok() {
        // Stopped while the profile was being applied: the command is not started at all.
        let _ = writeln!(messages, "gputune: stopped before the command started.");
        return Ok(RunEnded {
            exit_code: EXIT_STOPPED_BEFORE_START,
            stats: RunStats::from_samples(&sampler.samples, 0.0),
        });
    }
    let started = Instant::now();
    let mut child = match Command::new(program)
        .args(&run.command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            let _ = writeln!(
                messages,
                "gputune: {} could not be started ({error}).",
                program.to_string_lossy()
            );
            return Ok(RunEnded {
                exit_code: EXIT_NOT_STARTED,
                stats: RunStats::from_samples(&sampler.samples, 0.0),
            });
        }
    };

    let mut next_sample = started + SAMPLE_INTERVAL;
    let mut signals = 0u32;
    let mut forward_at: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(error) => {
                let _ = writeln!(
                    messages,
                    "gputune: the command cannot be waited on ({error})."
                );
                let _ = child.kill();
                break child.wait()?;
            }
        }
        match stop.try_recv() {
            Ok(()) => {
                signals += 1;
                if signals == 1 {
                    let grace = if in_terminal_foreground() {
                        TERMINAL_GRACE
                    } else {
                        Duration::ZERO
                    };
                    let _ = writeln!(
                        messages,
                        "gputune: stopping the command; the settings are restored when it has ended."
                    );
                    forward_at = Some(Instant::now() + grace);
                } else {
                    let _ = writeln!(messages, "gputune: killing the command.");
                    let _ = child.kill();
                    forward_at = None;
                }
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
        }
        if forward_at.is_some_and(|at| Instant::now() >= at) {
            forward_at = None;
            terminate(&mut child);
        }
        let now = Instant::now();
        if now >= next_sample {
            sampler.sample(guard.backend(), &mut controller, &mut log, messages);
            while next_sample <= now {
                next_sample += SAMPLE_INTERVAL;
            }
        }
        std::thread::sleep(
            POLL_INTERVAL.min(next_sample.saturating_duration_since(Instant::now())),
        );
    };
    let duration_s = started.elapsed().as_secs_f64();
    // The last reading closes the energy count at the command's end.
    sampler.sample(guard.backend(), &mut controller, &mut log, messages);
    if let Some(writer) = log.as_mut()
        && let Err(error) = writer.flush()
    {
        let _ = writeln!(messages, "gputune: {error}");
    }
    let exit_code = exit_code_of(status);
    let _ = writeln!(
        messages,
        "gputune: the command {}.",
        describe_status(status)
    );
    Ok(RunEnded {
        exit_code,
        stats: RunStats::from_samples(&sampler.samples, duration_s),
    })
}

/// Takes the samples of a run: statistics, the fan curve and the log.
struct Sampler {
    index: u32,
    identity: GpuIdentity,
    samples: Vec<Telemetry>,
    log_failed: bool,
    fan_errors_reported: bool,
}

impl Sampler {
    fn sample(
        &mut self,
        backend: &mut dyn Backend,
        controller: &mut Controller,
        log: &mut Option<TelemetryCsvWriter<std::fs::File>>,
        messages: &mut dyn Write,
    ) {
        let reading = backend.telemetry(self.index);
        if let Ok(reading) = &reading {
            self.samples.push(reading.clone());
            if let Some(writer) = log.as_mut()
                && !self.log_failed
            {
                let written = writer
                    .write_row(&self.identity, reading)
                    .and_then(|()| writer.flush());
                if let Err(error) = written {
                    // The command matters more than the log: say so once and go on.
                    let _ = writeln!(messages, "gputune: logging stopped: {error}");
                    self.log_failed = true;
                }
            }
        }
        let mut all: Vec<Result<Telemetry, DeviceError>> = (0..self.index)
            .map(|_| {
                Err(DeviceError::Other {
                    what: "not sampled".to_string(),
                    detail: String::new(),
                })
            })
            .collect();
        all.push(reading);
        for (gpu_index, error) in controller.drive_fans(backend, &all) {
            if !self.fan_errors_reported {
                let _ = writeln!(
                    messages,
                    "gputune: GPU {gpu_index}: the fan curve could not set the fans: {error}"
                );
                self.fan_errors_reported = true;
            }
        }
    }
}

/// Asks the command to end with SIGTERM (through the `kill` program, as the standard library
/// only sends SIGKILL); SIGKILL when that cannot be run.
fn terminate(child: &mut Child) {
    let sent = Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !sent {
        let _ = child.kill();
    }
}

/// Whether gputune runs in the foreground of a terminal, where a Ctrl-C reaches the command
/// too (from /proc/self/stat: its process group is the terminal's foreground group).
fn in_terminal_foreground() -> bool {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return false;
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    // After the name: state, ppid, pgrp, session, tty_nr, tpgid.
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    match (fields.get(2), fields.get(4), fields.get(5)) {
        (Some(pgrp), Some(tty), Some(tpgid)) => *tty != "0" && pgrp == tpgid,
        _ => false,
    }
}

/// The command's exit code, or 128 + the signal that ended it, as a shell reports it.
fn exit_code_of(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    1
}

fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was ended by signal {signal}");
        }
    }
    "ended".to_string()
}

/// A channel that receives one message per SIGINT / SIGTERM / SIGHUP. The first asks the
/// command to end, the second kills it; a third exits at once with 130, leaving the journal
/// for the next start of gputune.
fn install_stop_signal() -> anyhow::Result<Receiver<()>> {
    let (sender, receiver) = mpsc::channel();
    let signals_received = AtomicU32::new(0);
    ctrlc::set_handler(move || {
        if signals_received.fetch_add(1, Ordering::SeqCst) >= 2 {
            eprintln!("gputune: stopped at once; the next start of gputune restores the settings.");
            std::process::exit(130);
        }
        let _ = sender.send(());
    })
    .map_err(|error| anyhow!("Could not install the Ctrl-C handler ({error})."))?;
    Ok(receiver)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: u64, power_w: u32, temperature_c: u32, energy_j: u64) -> Telemetry {
        Telemetry {
            sampled_at_ms: 1_000_000 + at_s * 1000,
            power_draw_mw: Some(power_w * 1000),
            temperature_c: Some(temperature_c),
            energy_total_mj: Some(energy_j * 1000),
            ..Telemetry::default()
        }
    }

    #[test]
    fn energy_comes_from_the_counter_difference() {
        let samples = [
            sample(0, 300, 60, 10_000),
            sample(1, 400, 72, 10_360),
            sample(2, 350, 65, 10_720),
        ];
        let stats = RunStats::from_samples(&samples, 2.0);
        assert_eq!(stats.energy_wh, Some(720.0 / 3600.0));
        assert_eq!(stats.average_power_w, Some(360.0));
        assert_eq!(stats.peak_temperature_c, Some(72));
        assert_eq!(
            stats.line(),
            "Duration 2.0 s, energy 0.200 Wh, average power 360 W, peak temperature 72 °C."
        );
    }

    #[test]
    fn without_a_counter_power_is_the_mean_and_energy_is_unknown() {
        let mut samples = [sample(0, 300, 60, 0), sample(1, 400, 70, 0)];
        for sample in &mut samples {
            sample.energy_total_mj = None;
        }
        let stats = RunStats::from_samples(&samples, 1.0);
        assert_eq!(stats.energy_wh, None);
        assert_eq!(stats.average_power_w, Some(350.0));
        assert!(stats.line().contains("energy n/a"), "{}", stats.line());
        assert_eq!(RunStats::from_samples(&[], 0.0).average_power_w, None);
    }
}
