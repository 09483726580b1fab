//! `gputune run --profile NAME -- COMMAND ARGS...`: a profile in force for the length of one
//! command. The profile is a session of the engine (the daemon's, or this process's): it is
//! applied, its fan curve followed, and everything is put back when the command ends — or when
//! this process dies (`kill -9` included), by the daemon when the connection drops, else by
//! the next start of gputune from the journal. The command runs as the user, never as root
//! unless asked, under a guard that ends every process it starts when it ends or gputune dies
//! (`measure_job::tree`). At the end: duration, energy, average power and peak temperature.

use crate::profiles::profile::ProfileOnCard;
use crate::stability::record::RecordedCheck;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use crate::cli::as_user::{InvokingUser, invoking_user, run_as as run_as_user};
use crate::cli::connect::{
    TuningOptions, choose_gpu, connect_for_changes, refusal, snapshot, unexpected,
};
use crate::jobs::cost::{COST_HINT, Price, cost_line, user_price};
use crate::measure_job::tree::{JobGroup, TrackedJob};
use crate::profiles::store::ProfileStore;
use crate::service::client::TuningClient;
use crate::telemetry::csv::{TelemetryCsvWriter, open_for_append};
use crate::tuning::engine::report_lines;
use gputune_formats::card::Telemetry;
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::tuning::{
    EngineEvent, GpuChange, GpuFanCurve, SessionId, SessionPurpose, SessionReport, SessionRequest,
};

/// How often gputune looks whether the command has ended.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// In a terminal, a Ctrl-C reaches the command directly; gputune waits this long for it to end
/// by itself before sending SIGTERM, so a training script's own Ctrl-C handling can finish.
pub(crate) const TERMINAL_GRACE: Duration = Duration::from_secs(3);
/// How often readings arrive for the log and the statistics.
const SAMPLE_INTERVAL_MS: u64 = 1_000;
/// The exit status when the command cannot be started, as a shell gives it.
pub const EXIT_NOT_STARTED: i32 = 127;

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
    /// Under sudo, run the command as root too (by default it runs as the user who ran sudo).
    #[arg(long)]
    pub keep_root: bool,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Runs `gputune run`; returns the exit status gputune should end with (the command's).
pub fn run_command(args: &RunArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    // Who the command runs as is settled before anything is applied: a sudo environment that
    // names no real user refuses the run here, with the card untouched.
    let run_as = invoking_user(args.keep_root).map_err(anyhow::Error::msg)?;
    let store = ProfileStore::open(&options.folders)?;
    let stored = store.load(&args.profile)?;
    let mut messages = std::io::stderr();
    let mut client = connect_for_changes(options, &mut messages)?;
    let gpus = snapshot(&mut client)?.gpus;
    let index = choose_gpu(&gpus, args.gpu.as_deref(), Some(&stored.profile.card.uuid))?;
    let gpu = &gpus[index as usize];
    let application = stored.profile.for_card(&gpu.identity, &gpu.constraints);
    for notice in &application.notices {
        let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
    }
    let mut log = match &args.log {
        Some(path) => {
            let (file, needs_header) = open_for_append(path)?;
            Some(TelemetryCsvWriter::new(file, needs_header).with_destination_name(path))
        }
        None => None,
    };
    let stop = crate::cli::signals::install_stop_signal(2)?;
    let uuid = gpu.identity.uuid.clone();
    let request = SessionRequest {
        purpose: SessionPurpose::Run,
        changes: if application.settings.is_empty() {
            Vec::new()
        } else {
            vec![GpuChange {
                gpu_uuid: uuid.clone(),
                settings: application.settings.clone(),
            }]
        },
        fan_curves: application
            .fan_curve
            .clone()
            .map(|curve| {
                vec![GpuFanCurve {
                    gpu_uuid: uuid.clone(),
                    curve,
                }]
            })
            .unwrap_or_default(),
        job_pid: None,
        job: None,
    };
    if request.changes.is_empty() && request.fan_curves.is_empty() {
        let _ = writeln!(
            messages,
            "gputune: the profile \"{}\" changes nothing on GPU {index}; the command runs as it is.",
            stored.profile.name
        );
    }
    let session = if request.changes.is_empty() && request.fan_curves.is_empty() {
        None
    } else {
        match client
            .request(Request::StartSession { session: request })
            .map_err(refusal)?
        {
            Response::SessionStarted(started) => Some(started.session),
            other => return Err(unexpected(&other)),
        }
    };
    let _ = writeln!(
        messages,
        "gputune: applied the profile \"{}\"{} to GPU {index} ({}){}{}; restored when the command ends.",
        stored.profile.name,
        // A profile never checked on this card: its notice said so above.
        stored
            .profile
            .last_check
            .as_ref()
            .filter(|record| record.counts_on(&gpu.identity.uuid))
            .map(|record| format!(" ({})", record.describe()))
            .unwrap_or_default(),
        gpu.identity.name,
        if application.settings.is_empty() {
            String::new()
        } else {
            format!(": {}", crate::tuning::describe_all(&application.settings))
        },
        if application.fan_curve.is_some() {
            ", following its fan curve"
        } else {
            ""
        }
    );
    client
        .request(Request::Subscribe {
            interval_ms: SAMPLE_INTERVAL_MS,
        })
        .map_err(refusal)?;

    let mut watcher = Watcher {
        index,
        identity: gpu.identity.clone(),
        log: log.take(),
        log_failed: false,
        samples: Vec::new(),
        ended_by_engine: None,
    };
    // A reading at each end, so the log and the energy span the whole command.
    watcher.wait_for_reading(&mut client, &mut messages);
    let started = Instant::now();
    let started_ms = crate::clock::wall_clock_ms();
    let status = match spawn(args, run_as.as_ref(), &mut messages) {
        Some(child) => {
            if let Some(session) = session {
                name_the_job(&mut client, session, child.pid(), &mut messages);
            }
            Some(supervise(
                child,
                &mut client,
                &mut watcher,
                &stop,
                &mut messages,
            )?)
        }
        None => None,
    };
    let duration_s = started.elapsed().as_secs_f64();
    watcher.wait_for_reading(&mut client, &mut messages);
    if let Some(writer) = watcher.log.as_mut()
        && let Err(error) = writer.flush()
    {
        let _ = writeln!(messages, "gputune: {error}");
    }
    let report = match (session, watcher.ended_by_engine.take()) {
        (_, Some(report)) => Some(report),
        (Some(session), None) => match client.request(Request::EndSession {
            session,
            keep: false,
        }) {
            Ok(Response::SessionEnded { report }) => Some(report),
            Ok(other) => return Err(unexpected(&other)),
            Err(error) => {
                let _ = writeln!(
                    messages,
                    "gputune: the connection to the tuning service was lost ({error}), so the session could not be ended from here: whether the card was put back cannot be known here. A daemon that still runs puts it back as the connection closes; one that died puts it back from its journal when it starts again. `gputune status` shows what the card runs now."
                );
                None
            }
        },
        (None, None) => None,
    };
    let mut complete = true;
    if let Some(report) = &report {
        complete = report.is_complete();
        for line in report_lines(report) {
            let _ = writeln!(messages, "gputune: {line}");
        }
    }
    // Every figure over the command's own window: the engine's session began before the
    // first reading and ends after the last, so its statistics cover another span.
    let _ = writeln!(
        messages,
        "gputune: {}",
        run_line(&watcher.samples, started_ms, duration_s)
    );
    // At the user's own price, else the daemon's.
    let price = user_price(options.folders.config_dir.as_deref(), &mut messages).or_else(|| {
        client.welcome().job_price.clone().map(|config| Price {
            config,
            from: "the daemon's price".to_string(),
        })
    });
    if let Some(sentence) = cost_sentence(&watcher.samples, started_ms, duration_s, price.as_ref())
    {
        let _ = writeln!(messages, "gputune: {sentence}");
    }
    let exit_code = match status {
        Some(status) => {
            let _ = writeln!(
                messages,
                "gputune: the command {}.",
                describe_status(status)
            );
            exit_code_of(status)
        }
        None => EXIT_NOT_STARTED,
    };
    if !complete {
        let _ = writeln!(
            messages,
            "gputune: not every setting could be put back; the journal is kept, so the next start of gputune (or the daemon) tries again."
        );
        if exit_code == 0 {
            return Ok(1);
        }
    }
    Ok(exit_code)
}

/// "Duration 2.10 s, energy 0.1834 Wh, average power 314 W, peak temperature 71 °C.": every
/// figure over the command's window (from `started_ms`, `duration_s` long), so the energy is
/// the average power times the duration. The energy counter is read between two readings
/// by straight lines; without a counter, or readings that do not span the window, the power
/// of the readings there is and the line says the energy is estimated.
pub(crate) fn run_line(samples: &[Telemetry], started_ms: u64, duration_s: f64) -> String {
    let duration_s = duration_s.max(0.0);
    let (average_power_w, exact) = average_power_w(samples, started_ms, duration_s);
    let energy = average_power_w.map_or_else(
        || "n/a".to_string(),
        |watts| {
            let wh = watts * duration_s / 3600.0;
            let digits = if wh < 0.1 { 4 } else { 3 };
            format!(
                "{wh:.digits$} Wh{}",
                if exact { "" } else { " (estimated)" }
            )
        },
    );
    let power = average_power_w.map_or_else(|| "n/a".to_string(), |watts| format!("{watts:.0} W"));
    let temperature = samples
        .iter()
        .filter_map(|sample| sample.temperature_c)
        .max()
        .map_or_else(|| "n/a".to_string(), |celsius| format!("{celsius} °C"));
    let duration = if duration_s < 10.0 {
        format!("{duration_s:.2} s")
    } else {
        format!("{duration_s:.1} s")
    };
    format!(
        "Duration {duration}, energy {energy}, average power {power}, peak temperature {temperature}."
    )
}

/// The average power over the command's window, and whether it is the energy counter's over
/// the whole window (else the readings' mean power: estimated).
fn average_power_w(samples: &[Telemetry], started_ms: u64, duration_s: f64) -> (Option<f64>, bool) {
    let ended_ms = started_ms.saturating_add((duration_s * 1000.0).round() as u64);
    match window_power_w(samples, started_ms, ended_ms) {
        Some((watts, exact)) => (Some(watts), exact),
        None => {
            let draws: Vec<f64> = samples
                .iter()
                .filter_map(|sample| sample.power_draw_mw)
                .map(|milliwatts| f64::from(milliwatts) / 1000.0)
                .collect();
            let mean = (!draws.is_empty()).then(|| draws.iter().sum::<f64>() / draws.len() as f64);
            (mean, false)
        }
    }
}

/// "0.0021 kWh, €0.0007, 0.8 g CO₂ at your ~/.config/gputune/cost.toml.": the command's
/// energy (as `run_line` counts it) at `price`; without a price, how to set one; `None`
/// without a power reading.
pub(crate) fn cost_sentence(
    samples: &[Telemetry],
    started_ms: u64,
    duration_s: f64,
    price: Option<&Price>,
) -> Option<String> {
    let duration_s = duration_s.max(0.0);
    let (Some(watts), exact) = average_power_w(samples, started_ms, duration_s) else {
        return None;
    };
    let energy_j = watts * duration_s;
    let estimated = if exact { "" } else { " (estimated)" };
    Some(match price {
        Some(price) => format!(
            "{}{estimated} at {}.",
            cost_line(energy_j, Some(&price.job_cost(energy_j))),
            price.from
        ),
        None => format!(
            "{}{estimated}; no price is set: {COST_HINT}.",
            cost_line(energy_j, None)
        ),
    })
}

/// The average power over `[started_ms, ended_ms]` from the energy counter (millijoules per
/// millisecond are watts), and whether readings spanned the whole window; `None` without a
/// counter that rose over at least two readings (a driver reload resets it).
fn window_power_w(samples: &[Telemetry], started_ms: u64, ended_ms: u64) -> Option<(f64, bool)> {
    let mut points: Vec<(u64, u64)> = samples
        .iter()
        .filter_map(|sample| Some((sample.sampled_at_ms, sample.energy_total_mj?)))
        .collect();
    points.sort_unstable();
    points.dedup_by_key(|point| point.0);
    if points.windows(2).any(|pair| pair[1].1 < pair[0].1) {
        return None;
    }
    let (first, last) = (*points.first()?, *points.last()?);
    if last.0 <= first.0 {
        return None;
    }
    let exact = first.0 <= started_ms && ended_ms <= last.0;
    let from_ms = started_ms.clamp(first.0, last.0);
    let to_ms = ended_ms.clamp(first.0, last.0);
    if to_ms <= from_ms {
        // A window of no length, or outside the readings: the readings' own average.
        let watts = (last.1 - first.1) as f64 / (last.0 - first.0) as f64;
        return Some((watts, exact && started_ms == ended_ms));
    }
    let watts =
        (energy_at_mj(&points, to_ms) - energy_at_mj(&points, from_ms)) / (to_ms - from_ms) as f64;
    Some((watts, exact))
}

/// The counter at `at_ms`, on the straight line between the readings around it (`points`
/// sorted by time, `at_ms` within them).
fn energy_at_mj(points: &[(u64, u64)], at_ms: u64) -> f64 {
    let after = points.partition_point(|point| point.0 < at_ms);
    match (
        after.checked_sub(1).and_then(|before| points.get(before)),
        points.get(after),
    ) {
        (Some(&(t0, e0)), Some(&(t1, e1))) if t1 > t0 => {
            e0 as f64 + (e1 as f64 - e0 as f64) * (at_ms - t0) as f64 / (t1 - t0) as f64
        }
        (_, Some(&(_, energy))) | (Some(&(_, energy)), None) => energy as f64,
        (None, None) => 0.0,
    }
}

/// What the run sees while the command runs: readings for the log and the statistics, and a
/// session the engine ended by itself.
struct Watcher {
    index: u32,
    identity: gputune_formats::card::GpuIdentity,
    log: Option<TelemetryCsvWriter<std::fs::File>>,
    log_failed: bool,
    samples: Vec<Telemetry>,
    ended_by_engine: Option<SessionReport>,
}

impl Watcher {
    fn take_event(&mut self, event: Event, messages: &mut dyn Write) {
        match event {
            Event::Samples { readings } => {
                let Some(Ok(reading)) = readings.get(self.index as usize) else {
                    return;
                };
                self.samples.push(reading.clone());
                if let Some(writer) = self.log.as_mut()
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
            Event::Engine { event } => match *event {
                EngineEvent::SessionEnded { report, .. } => {
                    let _ = writeln!(
                        messages,
                        "gputune: the engine ended the session: {}",
                        report.message
                    );
                    self.ended_by_engine = Some(report);
                }
                // After the engine ended the session, its notice about this card tells the
                // same story (an Xid) a third time: the session's report says it.
                EngineEvent::Notice { gpu_index, notice }
                    if gpu_index.is_none_or(|gpu| gpu == self.index)
                        && !(self.ended_by_engine.is_some() && gpu_index.is_some()) =>
                {
                    let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
                }
                _ => {}
            },
        }
    }

    /// Takes whatever arrived, then waits (two sampling intervals at most) for one reading
    /// newer than those.
    fn wait_for_reading(&mut self, client: &mut TuningClient, messages: &mut dyn Write) {
        while let Ok(Some(event)) = client.next_event(Duration::ZERO) {
            self.take_event(event, messages);
        }
        let taken = self.samples.len();
        let deadline = Instant::now() + Duration::from_millis(SAMPLE_INTERVAL_MS * 2);
        while self.samples.len() == taken && Instant::now() < deadline {
            match client.next_event(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(event)) => self.take_event(event, messages),
                Ok(None) | Err(_) => break,
            }
        }
    }
}

/// Tells the service which process is the session's job, so every client of a daemon (the
/// window) marks it among the GPU's processes. Not worth stopping the command for when it fails.
fn name_the_job(client: &mut TuningClient, session: SessionId, pid: u32, messages: &mut dyn Write) {
    if let Err(error) = client.request(Request::SessionJob { session, pid }) {
        // A session the engine ended already (an Xid at the start) has no job to mark; the
        // engine's own message says why it ended.
        if error
            .refusal()
            .is_some_and(|refusal| refusal.kind == gputune_formats::tuning::TuneErrorKind::NotFound)
        {
            return;
        }
        let _ = writeln!(
            messages,
            "gputune: the command (pid {pid}) is not marked as this run's job: {error}"
        );
    }
}

/// Starts the command (as the invoking user under sudo); `None` when it cannot start.
fn spawn(
    args: &RunArgs,
    run_as: Option<&InvokingUser>,
    messages: &mut dyn Write,
) -> Option<TrackedJob> {
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    start_command(command, run_as, messages)
}

/// Starts a user's command — as `run_as` when given (the user who ran sudo, from
/// [`invoking_user`]) — and says why when it cannot start (`None`). `gputune run` and
/// `gputune sweep` start theirs here, in gputune's process group (a Ctrl-C in the terminal
/// reaches it), its whole tree tracked.
pub(crate) fn start_command(
    mut command: Command,
    run_as: Option<&InvokingUser>,
    messages: &mut dyn Write,
) -> Option<TrackedJob> {
    if let Some(user) = run_as {
        run_as_user(&mut command, user);
        let _ = writeln!(
            messages,
            "gputune: the command runs as {}, not as root (add --keep-root to keep root).",
            crate::text::printable(&user.name)
        );
    }
    let program = crate::text::printable(&command.get_program().to_string_lossy());
    match TrackedJob::spawn(command, JobGroup::Gputunes) {
        Ok(child) => Some(child),
        Err(error) => {
            let _ = writeln!(
                messages,
                "gputune: {program} could not be started ({error})."
            );
            None
        }
    }
}

/// Waits for the command while taking readings and forwarding signals.
fn supervise(
    mut child: TrackedJob,
    client: &mut TuningClient,
    watcher: &mut Watcher,
    stop: &Receiver<()>,
    messages: &mut dyn Write,
) -> anyhow::Result<ExitStatus> {
    let mut signals = 0u32;
    let mut forward_at: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(error) => {
                let _ = writeln!(
                    messages,
                    "gputune: the command cannot be waited on ({error})."
                );
                return Ok(child.end_tree()?);
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
                    let _ = child.end_tree();
                    forward_at = None;
                }
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
        }
        if forward_at.is_some_and(|at| Instant::now() >= at) {
            forward_at = None;
            terminate(&mut child);
        }
        match client.next_event(POLL_INTERVAL) {
            Ok(Some(event)) => watcher.take_event(event, messages),
            Ok(None) => {}
            Err(error) => {
                // The daemon went away: it put the card back as it stopped. The command goes on.
                if watcher.ended_by_engine.is_none() {
                    let _ = writeln!(messages, "gputune: {error}");
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
    }
}

/// Asks the command to end with SIGTERM (what it started is killed when it has ended).
pub(crate) fn terminate(child: &mut TrackedJob) {
    child.signal(nix::sys::signal::Signal::SIGTERM);
}

/// Whether gputune runs in the foreground of a terminal, where a Ctrl-C reaches the command
/// too.
pub(crate) fn in_terminal_foreground() -> bool {
    let Ok(terminal) = std::fs::File::open("/dev/tty") else {
        return false;
    };
    match nix::unistd::tcgetpgrp(&terminal) {
        Ok(foreground) => foreground == nix::unistd::getpgrp(),
        Err(_) => false,
    }
}

/// The command's exit code, or 128 + the signal that ended it, as a shell reports it.
pub(crate) fn exit_code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return code;
    }
    status.signal().map_or(1, |signal| 128 + signal)
}

pub(crate) use crate::text::describe_status;

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at_ms: u64, energy_mj: u64, power_w: u32) -> Telemetry {
        Telemetry {
            sampled_at_ms: at_ms,
            energy_total_mj: Some(energy_mj),
            power_draw_mw: Some(power_w * 1000),
            temperature_c: Some(60),
            ..Telemetry::default()
        }
    }

    #[test]
    fn the_cost_sentence_says_kwh_cost_and_co2_at_whose_price_or_how_to_set_one() {
        // 3,600 W for an hour by the counter: 3.6 kWh.
        let samples = [
            reading(0, 0, 3_600),
            reading(3_600_000, 12_960_000_000, 3_600),
        ];
        let price = Price {
            config: gputune_formats::jobs::CostConfig {
                price_per_kwh: Some(0.25),
                currency: Some("€".to_string()),
                co2_grams_per_kwh: Some(350.0),
            },
            from: "your /home/alice/.config/gputune/cost.toml".to_string(),
        };
        assert_eq!(
            cost_sentence(&samples, 0, 3_600.0, Some(&price)).as_deref(),
            Some("3.60 kWh, €0.90, 1.3 kg CO₂ at your /home/alice/.config/gputune/cost.toml.")
        );
        let without = cost_sentence(&samples, 0, 3_600.0, None).unwrap_or_default();
        assert!(
            without.starts_with("3.60 kWh; no price is set: set a price in cost.toml"),
            "{without}"
        );
        assert_eq!(cost_sentence(&[], 0, 1.0, Some(&price)), None);
    }

    #[test]
    fn a_short_command_between_two_readings_gets_their_power_times_its_own_duration() {
        // 300 W between the readings (300 J over 1 s); the command runs 0.1 s inside them.
        let samples = [
            reading(10_000, 1_000_000, 280),
            reading(11_000, 1_300_000, 320),
        ];
        let line = run_line(&samples, 10_400, 0.1);
        assert_eq!(
            line,
            "Duration 0.10 s, energy 0.0083 Wh, average power 300 W, peak temperature 60 °C."
        );
        // A longer one spanning three readings at different powers: the counter decides.
        let samples = [
            reading(0, 0, 100),
            reading(1_000, 100_000, 100),
            reading(2_000, 400_000, 300),
        ];
        // 0.5 s at 100 W, then 1 s at 300 W: 350 J over 1.5 s, 233 W.
        let line = run_line(&samples, 500, 1.5);
        assert!(
            line.starts_with("Duration 1.50 s, energy 0.0972 Wh, average power 233 W"),
            "{line}"
        );
    }

    #[test]
    fn readings_that_miss_part_of_the_window_or_no_counter_say_the_energy_is_estimated() {
        let samples = [reading(1_000, 0, 200), reading(2_000, 200_000, 200)];
        let line = run_line(&samples, 1_500, 2.0);
        assert!(
            line.starts_with("Duration 2.00 s, energy 0.111 Wh (estimated), average power 200 W"),
            "{line}"
        );
        let mut without_counter = samples.clone();
        for sample in &mut without_counter {
            sample.energy_total_mj = None;
        }
        assert!(
            run_line(&without_counter, 1_000, 1.0).contains("energy 0.0556 Wh (estimated)"),
            "{}",
            run_line(&without_counter, 1_000, 1.0)
        );
        // A counter that went backwards (driver reload) is not trusted.
        let reloaded = [reading(0, 500_000, 250), reading(1_000, 1_000, 250)];
        assert!(run_line(&reloaded, 0, 1.0).contains("average power 250 W"));
        assert_eq!(
            run_line(&[], 0, 1.0),
            "Duration 1.00 s, energy n/a, average power n/a, peak temperature n/a."
        );
    }
}
