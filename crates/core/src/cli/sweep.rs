//! `gputune sweep [OPTIONS] -- COMMAND ARGS...`: runs the training command once and, while it
//! runs, steps the card through power limits (and clock caps, undervolt-style offsets),
//! measuring the job's own throughput and energy per unit of work at each; then recommends a
//! setting, saves it as a profile when asked, and puts the card back. Without a command it
//! attaches to a job already running and reads its progress from `--progress-file`.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cli::as_user::{InvokingUser, invoking_user};
use crate::cli::connect::{TuningOptions, choose_gpu, connect_for_changes, refusal, snapshot};
use crate::cli::run::{
    EXIT_NOT_STARTED, TERMINAL_GRACE, describe_status, exit_code_of, in_terminal_foreground,
    start_command, terminate,
};
use crate::measure_job::tree::TrackedJob;
use crate::profiles::store::ProfileStore;
use crate::service::client::TuningClient;
use crate::service::protocol::{Event, Request};
use crate::sweep::base::sweep_steps_with_base;
use crate::sweep::feed::{Echo, FeedMessage, follow_file, read_stream};
use crate::sweep::objective::{DEFAULT_MAX_SLOWDOWN_PCT, Objective};
use crate::sweep::progress::ProgressParser;
use crate::sweep::report::{recommended_profile, table, write_csv};
use crate::sweep::runner::{Sweep, SweepClock, SweepEnd, SweepOutcome, SweepTiming, SweepUpdate};
use crate::sweep::steps::{SweepSpec, SweepStep, parse_list};
use crate::tuning::engine::{EngineEvent, GpuInfo, held_elsewhere};
use crate::tuning::in_force::Hold;

/// How often the loop looks at the job, its progress and the service.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// `gputune sweep`.
#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// The GPU: an index or a UUID (default: the only GPU).
    #[arg(long, value_name = "UUID|INDEX")]
    pub gpu: Option<String>,
    /// Power limits to try, % of the card's default, in order [default: 100,90,80,70,60, or
    /// 100 alone with --clock-caps].
    #[arg(long, value_name = "LIST")]
    pub power_limits: Option<String>,
    /// Highest GPU clocks to try at each power limit, MHz (e.g. 2400,2100).
    #[arg(long, value_name = "LIST")]
    pub clock_caps: Option<String>,
    /// Also try each clock cap with a GPU clock offset (undervolt-style), MHz [default: 150].
    #[arg(long, value_name = "MHZ", num_args = 0..=1, default_missing_value = "150")]
    pub undervolt: Option<i32>,
    /// Seconds each setting runs.
    #[arg(long, value_name = "SECONDS", default_value_t = 90.0)]
    pub step_s: f64,
    /// Seconds at the start of each setting that are not measured (the job and the card
    /// settle).
    #[arg(long, value_name = "SECONDS", default_value_t = 20.0)]
    pub warmup_s: f64,
    /// Seconds to wait for the job's first progress line (it may be loading a model) before
    /// measuring by the GPU-side proxy.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    pub wait_s: f64,
    /// What "best" means: within-slowdown (least energy at most --max-slowdown-pct slower than
    /// the first setting), energy (least energy per unit of work) or perf-per-watt.
    #[arg(long, value_name = "NAME", default_value = "within-slowdown")]
    pub objective: String,
    /// The slowdown within-slowdown accepts, %.
    #[arg(long, value_name = "PCT", default_value_t = DEFAULT_MAX_SLOWDOWN_PCT)]
    pub max_slowdown_pct: f64,
    /// Read progress with this regex instead of the known formats (tqdm, Lightning, Hugging
    /// Face): named groups `rate` (units/s), `seconds_per` (s/unit) or `count` (a counter),
    /// and optionally `unit`.
    #[arg(long, value_name = "REGEX")]
    pub progress_regex: Option<String>,
    /// Follow this log file for progress (like tail -F) instead of the command's output; with
    /// no command, attach to a job already running.
    #[arg(long, value_name = "FILE")]
    pub progress_file: Option<PathBuf>,
    /// Save the recommended setting as a profile with this name.
    #[arg(long, value_name = "NAME")]
    pub save_profile: Option<String>,
    /// Print the result as JSON on stdout (the job's own output then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Also write the result as CSV to this file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Measure on top of the clock locks and offsets already in force (by default those the
    /// sweep does not set itself are reset for the sweep and put back after).
    #[arg(long)]
    pub keep_settings: bool,
    /// Under sudo, run the command as root too (by default it runs as the user who ran sudo).
    #[arg(long)]
    pub keep_root: bool,
    /// The training command, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// What the arguments ask for, checked before anything starts.
struct Checked {
    spec: SweepSpec,
    timing: SweepTiming,
    objective: Objective,
}

fn check(args: &SweepArgs) -> anyhow::Result<Checked> {
    if args.command.is_empty() && args.progress_file.is_none() {
        bail!(
            "Give the training command after -- (gputune sweep -- python train.py), or --progress-file FILE to attach to a job already running."
        );
    }
    let spec = SweepSpec {
        power_limits_pct: match &args.power_limits {
            Some(list) => parse_list("--power-limits", list).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        },
        clock_caps_mhz: match &args.clock_caps {
            Some(list) => parse_list("--clock-caps", list).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        },
        undervolt_offset_mhz: args.undervolt,
    };
    let timing =
        SweepTiming::new(args.step_s, args.warmup_s, args.wait_s).map_err(anyhow::Error::msg)?;
    let objective =
        Objective::parse(&args.objective, args.max_slowdown_pct).map_err(anyhow::Error::msg)?;
    // A bad regex is said now, not after the job started.
    ProgressParser::new(args.progress_regex.as_deref()).map_err(anyhow::Error::msg)?;
    if let Some(name) = &args.save_profile
        && name.trim().is_empty()
    {
        bail!("--save-profile needs a name.");
    }
    Ok(Checked {
        spec,
        timing,
        objective,
    })
}

/// gputune's own messages on stderr, each on a line of its own even when the job left a
/// progress bar's line open.
struct Messages {
    line_open: Arc<AtomicBool>,
}

impl Write for Messages {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut stderr = std::io::stderr();
        if self.line_open.swap(false, Ordering::SeqCst) {
            stderr.write_all(b"\n")?;
        }
        stderr.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Runs `gputune sweep`; returns the exit status gputune should end with.
pub fn run_command(args: &SweepArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    let checked = check(args)?;
    // A sudo environment that names no real user refuses the sweep before the card is touched.
    let run_as = if args.command.is_empty() {
        None
    } else {
        invoking_user(args.keep_root).map_err(anyhow::Error::msg)?
    };
    let line_open = Arc::new(AtomicBool::new(false));
    let mut messages = Messages {
        line_open: Arc::clone(&line_open),
    };
    let store = match &args.save_profile {
        Some(_) => Some(ProfileStore::open(&options.folders)?),
        None => None,
    };
    let mut client = connect_for_changes(options, &mut messages)?;
    let snapshot = snapshot(&mut client)?;
    let gpus = snapshot.gpus;
    let index = choose_gpu(&gpus, args.gpu.as_deref(), None)?;
    let gpu = gpus[index as usize].clone();
    let in_force = snapshot
        .tunings
        .get(index as usize)
        .map(|tuning| tuning.in_force.clone())
        .unwrap_or_default();
    let (plan, base) = sweep_steps_with_base(
        &checked.spec,
        &gpu.constraints,
        &in_force,
        args.keep_settings,
    )?;
    // A session holding a control the sweep changes (the daemon knows them all) refuses the
    // sweep before its job starts; one held by another process's own engine is found at the
    // first setting. A session holding other controls (a fan curve) is no obstacle.
    let swept: Vec<Hold> = plan
        .iter()
        .flat_map(|step| step.settings.iter().map(Hold::of))
        .collect();
    if let Some(holder) = snapshot.tunings.get(index as usize).and_then(|tuning| {
        tuning
            .holders
            .iter()
            .find(|holder| holder.controls.iter().any(|hold| swept.contains(hold)))
    }) {
        bail!(
            "GPU {index}'s {} held by {}: wait for it to end, or stop it there; the sweep was not started.",
            match holder.controls.as_slice() {
                [one] if *one != Hold::Fans => format!("{} is", holder.controls_text()),
                _ => format!("{} are", holder.controls_text()),
            },
            holder
                .purpose
                .describe_by(&crate::text::printable(&holder.by))
        );
    }
    if !client.is_daemon() {
        let mut holds = swept.clone();
        holds.dedup();
        if let Some((hold, holder)) = held_elsewhere(&options.folders, &gpu.identity.uuid, &holds) {
            bail!(
                "GPU {index}'s {} is being changed by {}: wait for it to end, or stop it there; the sweep was not started.",
                hold.name(),
                crate::text::printable(&holder)
            );
        }
    }
    say_plan(&mut messages, index, &gpu, &plan, &checked.timing);
    if let Some(sentence) = base.sentence() {
        let _ = writeln!(messages, "gputune: GPU {index}: {sentence}");
    }
    client
        .request(Request::Subscribe {
            interval_ms: sample_interval_ms(&checked.timing),
        })
        .map_err(refusal)?;
    let stop = crate::cli::signals::install_stop_signal(2)?;
    let clock = SweepClock::start();
    let (sender, progress) = mpsc::channel();
    let follow_stop = Arc::new(AtomicBool::new(false));
    if let Some(path) = &args.progress_file {
        let parser =
            ProgressParser::new(args.progress_regex.as_deref()).map_err(anyhow::Error::msg)?;
        follow_file(
            path.clone(),
            parser,
            clock,
            sender.clone(),
            Arc::clone(&follow_stop),
        )
        .context("The progress file cannot be followed")?;
    }
    let job = if args.command.is_empty() {
        None
    } else {
        match spawn_job(
            args,
            run_as.as_ref(),
            clock,
            &sender,
            &line_open,
            &mut messages,
        ) {
            Some(child) => Some(child),
            None => {
                follow_stop.store(true, Ordering::SeqCst);
                return Ok(EXIT_NOT_STARTED);
            }
        }
    };
    drop(sender);
    let mut sweep = Sweep::new(
        index,
        gpu.clone(),
        plan,
        checked.timing,
        checked.objective,
        clock,
    );
    if let Some(job) = &job {
        sweep = sweep.with_job_pid(job.pid());
    }
    let mut reported = Ok(());
    let ended = supervise(
        &mut sweep,
        job,
        &mut client,
        &progress,
        &stop,
        &mut messages,
        &mut |outcome, messages| {
            follow_stop.store(true, Ordering::SeqCst);
            reported = report(args, outcome, &gpu, store.as_ref(), messages);
        },
    )?;
    follow_stop.store(true, Ordering::SeqCst);
    reported?;
    let Some(outcome) = sweep.outcome().cloned() else {
        bail!("The sweep ended without a result.");
    };
    let job_code = ended.map(exit_code_of);
    let mut exit_code = job_code.unwrap_or(0);
    if exit_code == 0 {
        exit_code = match (&outcome.ended, outcome.restore_complete) {
            (_, false) => 1,
            (SweepEnd::Failed { .. }, _) => 1,
            (SweepEnd::Stopped { .. }, _) if ended.is_none() => 130,
            _ => 0,
        };
    }
    // The last word agrees with the status gputune ends with.
    if let Some(job_code) = job_code
        && job_code != exit_code
    {
        let why = if outcome.restore_complete {
            "the sweep failed"
        } else {
            "not every setting could be put back"
        };
        let _ = writeln!(
            messages,
            "gputune: exit status {exit_code}, not the command's {job_code}: {why}."
        );
    }
    Ok(exit_code)
}

fn say_plan(
    messages: &mut dyn Write,
    index: u32,
    gpu: &GpuInfo,
    plan: &[SweepStep],
    timing: &SweepTiming,
) {
    let labels: Vec<&str> = plan
        .iter()
        .filter(|step| !step.is_repeat)
        .map(|step| step.label.as_str())
        .collect();
    let total_s = timing.total_s(plan.len());
    let duration = if total_s < 120.0 {
        format!("{total_s:.0} s")
    } else {
        format!("{:.0} min", total_s / 60.0)
    };
    let _ = writeln!(
        messages,
        "gputune: sweeping GPU {index} ({}): {} settings × {} s ({} s warm-up each), about {duration}: {}{}. The card is put back when the sweep ends.",
        gpu.identity.name,
        plan.len(),
        crate::text::number(timing.step_s),
        crate::text::number(timing.warmup_s),
        labels.join(", "),
        if plan.iter().any(|step| step.is_repeat) {
            ", then the first again (the noise)"
        } else {
            ""
        }
    );
}

/// Readings often enough for a few dozen per measured step, never more than 5 a second.
fn sample_interval_ms(timing: &SweepTiming) -> u64 {
    let measured_ms = (timing.step_s - timing.warmup_s) * 1000.0;
    ((measured_ms / 40.0) as u64).clamp(200, 1_000)
}

/// One of the job's outputs: its thread's name, the pipe, where it is passed on.
type JobStream = (
    &'static str,
    Option<Box<dyn std::io::Read + Send>>,
    Box<dyn Write + Send>,
);

/// Starts the job with its output piped through gputune (to the terminal, unchanged, and to
/// the progress parser); `None` when it cannot start.
fn spawn_job(
    args: &SweepArgs,
    run_as: Option<&InvokingUser>,
    clock: SweepClock,
    sender: &mpsc::Sender<FeedMessage>,
    line_open: &Arc<AtomicBool>,
    messages: &mut dyn Write,
) -> Option<TrackedJob> {
    let program = &args.command[0];
    let mut command = Command::new(program);
    command
        .args(&args.command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Python buffers a pipe by the block: its log lines would arrive minutes late.
    if std::env::var_os("PYTHONUNBUFFERED").is_none() {
        command.env("PYTHONUNBUFFERED", "1");
    }
    let mut child = start_command(command, run_as, messages)?;
    // Progress comes from the output unless a file was named.
    let regex = args.progress_regex.as_deref();
    let parse = args.progress_file.is_none();
    let streams: [JobStream; 2] = [
        (
            "job-stdout",
            child
                .take_stdout()
                .map(|stream| Box::new(stream) as Box<dyn std::io::Read + Send>),
            if args.json {
                Box::new(std::io::stderr())
            } else {
                Box::new(std::io::stdout())
            },
        ),
        (
            "job-stderr",
            child
                .take_stderr()
                .map(|stream| Box::new(stream) as Box<dyn std::io::Read + Send>),
            Box::new(std::io::stderr()),
        ),
    ];
    for (name, stream, echo) in streams {
        let Some(stream) = stream else { continue };
        let echo = Box::new(Echo::new(echo, Arc::clone(line_open)));
        // With --progress-file the output is only passed on.
        let parser = if parse {
            ProgressParser::new(regex).ok()
        } else {
            None
        };
        if let Err(error) = read_stream(name, stream, echo, parser, clock, sender.clone()) {
            let _ = writeln!(
                messages,
                "gputune: the job's output cannot be read ({error})."
            );
        }
    }
    Some(child)
}

/// Drives the sweep until it ends (handing its outcome to `finished` at once), then waits
/// for the job, its output still passed on; returns how the job ended, `None` without a job.
fn supervise(
    sweep: &mut Sweep,
    mut job: Option<TrackedJob>,
    client: &mut TuningClient,
    progress: &Receiver<FeedMessage>,
    stop: &Receiver<()>,
    messages: &mut dyn Write,
    finished: &mut dyn FnMut(&SweepOutcome, &mut dyn Write),
) -> anyhow::Result<Option<ExitStatus>> {
    let mut signals = 0u32;
    let mut terminate_at: Option<Instant> = None;
    let mut said_sweep_over = false;
    let mut report_once = |sweep: &Sweep, messages: &mut dyn Write, said: &mut bool| {
        if !*said && let Some(outcome) = sweep.outcome() {
            *said = true;
            // A failure (a refusal naming the card's holder) is said on stderr first; the
            // table on stdout repeats it.
            if let SweepEnd::Failed { reason } = &outcome.ended {
                let _ = writeln!(messages, "gputune: {reason}");
            }
            finished(outcome, messages);
        }
    };
    loop {
        while let Ok(message) = progress.try_recv() {
            match message {
                FeedMessage::Reading(reading) => sweep.on_progress(reading),
                FeedMessage::Note(note) => {
                    let _ = writeln!(messages, "gputune: {note}");
                }
            }
        }
        if stop.try_recv().is_ok() {
            signals += 1;
            if !sweep.is_finished() {
                let _ = writeln!(
                    messages,
                    "gputune: stopping the sweep; the card is put back."
                );
                sweep.stop(
                    client,
                    SweepEnd::Stopped {
                        reason: "Interrupted (Ctrl-C or SIGTERM).".to_string(),
                    },
                );
            }
            match job.as_mut() {
                Some(_) if signals == 1 => {
                    // In a terminal the Ctrl-C reached the command too: let it end by itself.
                    let grace = if in_terminal_foreground() {
                        TERMINAL_GRACE
                    } else {
                        Duration::ZERO
                    };
                    terminate_at = Some(Instant::now() + grace);
                }
                Some(child) => {
                    let _ = writeln!(messages, "gputune: killing the command.");
                    let _ = child.end_tree();
                }
                None => {}
            }
        }
        if let Some(child) = job.as_mut()
            && terminate_at.is_some_and(|at| Instant::now() >= at)
        {
            terminate_at = None;
            terminate(child);
        }
        if let Some(child) = job.as_mut() {
            match child.try_wait() {
                Ok(Some(status)) => {
                    job_ended(sweep, client, status, messages);
                    drain_updates(sweep, messages);
                    report_once(sweep, messages, &mut said_sweep_over);
                    return Ok(Some(status));
                }
                Ok(None) => {}
                Err(error) => {
                    let _ = writeln!(
                        messages,
                        "gputune: the command cannot be waited on ({error})."
                    );
                    let status = child.end_tree()?;
                    job_ended(sweep, client, status, messages);
                    drain_updates(sweep, messages);
                    report_once(sweep, messages, &mut said_sweep_over);
                    return Ok(Some(status));
                }
            }
        }
        if !sweep.is_finished() {
            match client.next_event(POLL_INTERVAL) {
                Ok(Some(event)) => {
                    say_notice(sweep.gpu_index(), &event, messages);
                    sweep.on_event(&event);
                }
                Ok(None) => {}
                Err(error) => {
                    sweep.stop(
                        client,
                        SweepEnd::Failed {
                            reason: format!("{error} The daemon put the card back."),
                        },
                    );
                }
            }
            sweep.tick(client);
        } else {
            std::thread::sleep(POLL_INTERVAL);
        }
        drain_updates(sweep, messages);
        if sweep.is_finished() {
            let first_time = !said_sweep_over;
            report_once(sweep, messages, &mut said_sweep_over);
            if job.is_none() {
                return Ok(None);
            }
            if first_time {
                let status = match sweep.outcome().map(|outcome| &outcome.ended) {
                    Some(SweepEnd::Failed { .. }) => {
                        "gputune waits for it, then exits with status 1 as the sweep failed, or with the command's own status if that is an error"
                    }
                    _ => "gputune waits for it and passes on its exit status",
                };
                let _ = writeln!(
                    messages,
                    "gputune: the sweep is over; the command goes on at the card's own settings ({status})."
                );
            }
        }
    }
}

fn job_ended(
    sweep: &mut Sweep,
    client: &mut TuningClient,
    status: ExitStatus,
    messages: &mut dyn Write,
) {
    let _ = writeln!(
        messages,
        "gputune: the command {}.",
        describe_status(status)
    );
    if sweep.is_finished() {
        return;
    }
    let exit_code = exit_code_of(status);
    let ended = if exit_code == 0 {
        SweepEnd::Stopped {
            reason: "The command ended before the sweep did.".to_string(),
        }
    } else {
        SweepEnd::JobFailed {
            exit_code,
            message: format!("the command {}.", describe_status(status)),
        }
    };
    sweep.stop(client, ended);
}

fn say_notice(gpu_index: u32, event: &Event, messages: &mut dyn Write) {
    if let Event::Engine { event } = event
        && let EngineEvent::Notice {
            gpu_index: about,
            notice,
        } = event.as_ref()
        && about.is_none_or(|about| about == gpu_index)
    {
        let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
    }
}

fn drain_updates(sweep: &mut Sweep, messages: &mut dyn Write) {
    for update in sweep.take_updates() {
        let line = match update {
            SweepUpdate::Measuring {
                by_proxy_unless_progress,
            } => {
                if by_proxy_unless_progress {
                    "no progress from the job yet; starting (it is measured by the GPU-side proxy unless progress shows during the first setting).".to_string()
                } else {
                    "the job's progress shows; starting.".to_string()
                }
            }
            SweepUpdate::StepStarted {
                index,
                count,
                label,
            } => format!("[{}/{count}] {label}", index + 1),
            SweepUpdate::StepMeasured(result) => {
                let unit = sweep
                    .measured_by()
                    .map_or_else(|| "unit".to_string(), |by| by.unit_name());
                format!(
                    "{}: {}, {}, {}{}",
                    result.step.label,
                    result.throughput.map_or_else(
                        || format!("no {unit}s measured"),
                        |throughput| format!(
                            "{:.3} {unit}/s{}",
                            throughput.units_per_s,
                            throughput
                                .spread_pct
                                .map_or_else(String::new, |spread| format!(" (±{spread:.1} %)"))
                        )
                    ),
                    result
                        .average_power_w
                        .map_or_else(|| "power n/a".to_string(), |watts| format!("{watts:.0} W")),
                    result.energy_per_unit_j.map_or_else(
                        || "energy n/a".to_string(),
                        |joules| format!("{joules:.3} J/{unit}")
                    ),
                    result
                        .unstable
                        .as_ref()
                        .map_or_else(String::new, |why| format!(" — unstable: {why}"))
                )
            }
            SweepUpdate::Note(note) => note,
            SweepUpdate::Finished(_) => continue,
        };
        let _ = writeln!(messages, "gputune: {line}");
    }
}

/// The table (or JSON), the CSV and the profile.
fn report(
    args: &SweepArgs,
    outcome: &SweepOutcome,
    gpu: &GpuInfo,
    store: Option<&ProfileStore>,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    if args.json {
        let report = crate::formats::reports::sweep::SweepReport {
            format_version: crate::formats::reports::sweep::SWEEP_REPORT_FORMAT,
            outcome,
        };
        crate::text::write_json_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", table(outcome))?;
    }
    if let Some(path) = &args.csv {
        match write_csv(outcome, path) {
            Ok(()) => {
                let _ = writeln!(messages, "gputune: wrote {}.", crate::text::path(path));
            }
            Err(error) => {
                let _ = writeln!(messages, "gputune: the CSV was not written: {error}");
            }
        }
    }
    if let (Some(name), Some(store)) = (&args.save_profile, store) {
        match recommended_profile(outcome, name, &gpu.identity, &gpu.constraints)
            .map_err(anyhow::Error::msg)
            .and_then(|profile| Ok(store.save(&profile)?))
        {
            Ok(path) => {
                let _ = writeln!(
                    messages,
                    "gputune: saved the recommended setting as the profile \"{}\" ({}); use it with gputune run --profile \"{}\" -- COMMAND.",
                    name.trim(),
                    crate::text::path(&path),
                    name.trim()
                );
            }
            Err(error) => {
                let _ = writeln!(messages, "gputune: the profile was not saved: {error}");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        sweep: SweepArgs,
    }

    #[test]
    fn undervolt_without_a_value_is_the_default_offset_and_checks_refuse_nonsense() {
        let parsed =
            Wrapper::parse_from(["x", "--clock-caps", "2400", "--undervolt", "--", "python"]);
        assert_eq!(
            parsed.sweep.undervolt,
            Some(crate::sweep::steps::DEFAULT_UNDERVOLT_OFFSET_MHZ)
        );
        assert!(check(&parsed.sweep).is_ok());
        let no_job = Wrapper::parse_from(["x"]);
        let error = check(&no_job.sweep).err().map(|error| error.to_string());
        assert!(error.is_some_and(|error| error.contains("--progress-file")));
        let bad_regex =
            Wrapper::parse_from(["x", "--progress-regex", "speed (\\d+)", "--", "python"]);
        assert!(check(&bad_regex.sweep).is_err());
        let bad_objective = Wrapper::parse_from(["x", "--objective", "fastest", "--", "python"]);
        assert!(check(&bad_objective.sweep).is_err());
        let bad_timing =
            Wrapper::parse_from(["x", "--step-s", "10", "--warmup-s", "10", "--", "python"]);
        assert!(check(&bad_timing.sweep).is_err());
    }
}
