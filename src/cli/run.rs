//! `gputune run --profile NAME -- COMMAND ARGS...`: a profile in force for the length of one
//! command. The profile is a session of the engine (the daemon's, or this process's): it is
//! applied, its fan curve followed, and everything is put back when the command ends — or when
//! this process dies (`kill -9` included), by the daemon when the connection drops, else by
//! the next start of gputune from the journal. The command runs as the user, never as root
//! unless asked. At the end: duration, energy, average power and peak temperature.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use crate::cli::connect::{
    TuningOptions, choose_gpu, connect_for_changes, refusal, snapshot, unexpected,
};
use crate::device::Telemetry;
use crate::profiles::store::ProfileStore;
use crate::service::client::TuningClient;
use crate::service::protocol::{Event, Request, Response};
use crate::telemetry::csv::{TelemetryCsvWriter, open_for_append};
use crate::tuning::engine::{
    EngineEvent, GpuChange, SessionId, SessionPurpose, SessionReport, SessionRequest, report_lines,
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
    let store = ProfileStore::open_default()?;
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
            .map(|curve| vec![(uuid.clone(), curve)])
            .unwrap_or_default(),
        job_pid: None,
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
        "gputune: applied the profile \"{}\" to GPU {index} ({}){}{}; restored when the command ends.",
        stored.profile.name,
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
    let status = match spawn(args, &mut messages) {
        Some(child) => {
            if let Some(session) = session {
                name_the_job(&mut client, session, child.id(), &mut messages);
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
                    "gputune: the session could not be ended ({error}); the daemon puts the card back when the connection closes."
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
    let stats = report
        .as_ref()
        .and_then(|report| report.stats.iter().find(|(gpu, _)| *gpu == index))
        .map(|(_, stats)| stats.clone())
        .unwrap_or_else(|| crate::tuning::stats::TrialStats::from_samples(&watcher.samples));
    let _ = writeln!(messages, "gputune: {}", stats.run_line(duration_s));
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

/// What the run sees while the command runs: readings for the log and the statistics, and a
/// session the engine ended by itself.
struct Watcher {
    index: u32,
    identity: crate::device::GpuIdentity,
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
                EngineEvent::Notice { gpu_index, notice }
                    if gpu_index.is_none_or(|gpu| gpu == self.index) =>
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
        let _ = writeln!(
            messages,
            "gputune: the command (pid {pid}) is not marked as this run's job: {error}"
        );
    }
}

/// Starts the command (as the invoking user under sudo); `None` when it cannot start.
fn spawn(args: &RunArgs, messages: &mut dyn Write) -> Option<Child> {
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    start_command(command, args.keep_root, messages)
}

/// Starts a user's command — under sudo as the user who ran sudo unless `keep_root` — and
/// says why when it cannot start (`None`). `gputune run` and `gputune sweep` start theirs here.
pub(crate) fn start_command(
    mut command: Command,
    keep_root: bool,
    messages: &mut dyn Write,
) -> Option<Child> {
    if !keep_root {
        match super::as_user::drop_to_invoking_user(&mut command) {
            Ok(Some(user)) => {
                let _ = writeln!(
                    messages,
                    "gputune: the command runs as {user}, not as root (add --keep-root to keep root)."
                );
            }
            Ok(None) => {}
            Err(error) => {
                let _ = writeln!(messages, "gputune: {error}");
                return None;
            }
        }
    }
    match command.spawn() {
        Ok(child) => Some(child),
        Err(error) => {
            let _ = writeln!(
                messages,
                "gputune: {} could not be started ({error}).",
                crate::text::printable(&command.get_program().to_string_lossy())
            );
            None
        }
    }
}

/// Waits for the command while taking readings and forwarding signals.
fn supervise(
    mut child: Child,
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
                let _ = child.kill();
                return Ok(child.wait()?);
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

/// Asks the command to end with SIGTERM.
pub(crate) fn terminate(child: &mut Child) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_err() {
        let _ = child.kill();
    }
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

pub(crate) fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(signal) => format!("was ended by signal {signal}"),
        None => "ended".to_string(),
    }
}
