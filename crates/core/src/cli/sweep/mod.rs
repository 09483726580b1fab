//! `gputune sweep [OPTIONS] -- COMMAND ARGS...`: runs the training command once and, while it
//! runs, steps the card through power limits (and clock caps, undervolt-style offsets),
//! measuring the job's own throughput and energy per unit of work at each; then recommends a
//! setting, saves it as a profile when asked, and puts the card back. Without a command it
//! attaches to a job already running and reads its progress from `--progress-file`. With
//! several cards (`--gpu 0,1,2,3`, `--gpu all`: one data-parallel job across them) each step
//! is held on every card at once in one session, and the box's energy is summed.

mod report;
mod supervise;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use anyhow::{Context, bail};

use crate::cli::connect::{TuningOptions, choose_gpus, connect_for_changes, refusal, snapshot};
use crate::job::JobClock;
use crate::job::as_user::{InvokingUser, invoking_user, runs_as_sentence};
use crate::job::feed::{Echo, FeedMessage, follow_file};
use crate::job::progress::ProgressParser;
use crate::job::{EXIT_NOT_STARTED, Job, JobCommand, JobOutput, JobStreams, exit_code_of};
use crate::profiles::store::ProfileStore;
use crate::sweep::base::{CardToSweep, SweepBase, plan_for_cards};
use crate::sweep::runner::{Sweep, SweepCardPlan, SweepTiming};
use crate::sweep::steps::{SweepSpec, parse_list};
use crate::tuning::engine::held_elsewhere;
use gputune_formats::protocol::Request;
use gputune_formats::protocol::Snapshot;
use gputune_formats::reports::sweep::{DEFAULT_MAX_SLOWDOWN_PCT, Objective};
use gputune_formats::reports::sweep::{SweepEnd, SweepOutcome};
use gputune_formats::reports::sweep_step::SweepStep;
use gputune_formats::tuning::{GpuInfo, Hold, SettingsInForce};
use report::{ReportTo, report, say_plan};
use supervise::supervise;

/// `gputune sweep`.
#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// The GPU: an index or a UUID; several (0,1,2,3) or all for one job across them, each
    /// step held on every card at once (default: the only GPU).
    #[arg(long, value_name = "UUID|INDEX|LIST|all")]
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
    let indices = choose_gpus(&snapshot, args.gpu.as_deref(), None)?;
    let planned = plan_cards(&snapshot, &indices, &checked.spec, args.keep_settings)?;
    for (card, _) in &planned {
        refuse_when_held(
            &snapshot,
            card.index,
            &card.plan,
            client.is_daemon(),
            options,
        )?;
    }
    let cards: Vec<SweepCardPlan> = planned.iter().map(|(card, _)| card.clone()).collect();
    say_plan(&mut messages, &cards, &checked.timing);
    for (card, base) in &planned {
        if let Some(sentence) = base.sentence() {
            let _ = writeln!(messages, "gputune: GPU {}: {sentence}", card.index);
        }
    }
    let gpus: Vec<GpuInfo> = cards.iter().map(|card| card.gpu.clone()).collect();
    client
        .request(Request::Subscribe {
            interval_ms: sample_interval_ms(&checked.timing),
        })
        .map_err(refusal)?;
    let stop = crate::cli::signals::install_stop_signal(2)?;
    let clock = JobClock::start();
    let mut sweep = Sweep::over_cards(cards, checked.timing, checked.objective, clock)
        .map_err(anyhow::Error::msg)?;
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
        let started = start_job(args, run_as.as_ref(), clock, &sender, &line_open);
        match started {
            Ok(job) => Some(job),
            Err(sentence) => {
                let _ = writeln!(messages, "gputune: {sentence}");
                follow_stop.store(true, Ordering::SeqCst);
                return Ok(EXIT_NOT_STARTED);
            }
        }
    };
    drop(sender);
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
            let to = ReportTo {
                json: args.json,
                csv: args.csv.as_deref(),
                save_profile: args.save_profile.as_deref(),
            };
            reported = report(&to, outcome, &gpus, store.as_ref(), messages);
        },
    )?;
    follow_stop.store(true, Ordering::SeqCst);
    reported?;
    let Some(outcome) = sweep.outcome() else {
        bail!("The sweep ended without a result.");
    };
    Ok(exit_status(outcome, ended.map(exit_code_of), &mut messages))
}

/// Each card's plan of `spec`, from what it runs now, with its base.
fn plan_cards(
    snapshot: &Snapshot,
    indices: &[u32],
    spec: &SweepSpec,
    keep_settings: bool,
) -> anyhow::Result<Vec<(SweepCardPlan, SweepBase)>> {
    let in_force: Vec<SettingsInForce> = indices
        .iter()
        .map(|index| {
            snapshot
                .tunings
                .get(*index as usize)
                .map(|tuning| tuning.in_force.clone())
                .unwrap_or_default()
        })
        .collect();
    let to_sweep: Vec<CardToSweep<'_>> = indices
        .iter()
        .zip(&in_force)
        .filter_map(|(index, in_force)| {
            Some(CardToSweep {
                index: *index,
                gpu: snapshot.gpus.get(*index as usize)?,
                in_force,
            })
        })
        .collect();
    Ok(plan_for_cards(spec, &to_sweep, keep_settings)?)
}

/// A session holding a control the sweep changes (the daemon knows them all) refuses the
/// sweep before its job starts; one held by another process's own engine is found at the
/// first setting. A session holding other controls (a fan curve) is no obstacle.
fn refuse_when_held(
    snapshot: &Snapshot,
    index: u32,
    plan: &[SweepStep],
    to_daemon: bool,
    options: &TuningOptions,
) -> anyhow::Result<()> {
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
    let Some(gpu) = snapshot.gpus.get(index as usize) else {
        return Ok(());
    };
    if !to_daemon {
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
    Ok(())
}

/// The status gputune ends with: the command's, else 1 when the sweep failed or the card
/// was not all put back, 130 when interrupted without a command. Said when it is not the
/// command's own.
fn exit_status(outcome: &SweepOutcome, job_code: Option<i32>, messages: &mut dyn Write) -> i32 {
    let mut exit_code = job_code.unwrap_or(0);
    if exit_code == 0 {
        exit_code = match (&outcome.ended, outcome.restore_complete) {
            (_, false) => 1,
            (SweepEnd::Failed { .. }, _) => 1,
            (SweepEnd::Stopped { .. }, _) if job_code.is_none() => 130,
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
    exit_code
}

/// Readings often enough for a few dozen per measured step, never more than 5 a second.
fn sample_interval_ms(timing: &SweepTiming) -> u64 {
    let measured_ms = (timing.step_s - timing.warmup_s) * 1000.0;
    ((measured_ms / 40.0) as u64).clamp(200, 1_000)
}

/// Starts the job with its output piped through gputune (to the terminal, unchanged, and to
/// the progress parser unless a progress file was named); the sentence when it cannot start.
fn start_job(
    args: &SweepArgs,
    run_as: Option<&InvokingUser>,
    clock: JobClock,
    sender: &mpsc::Sender<FeedMessage>,
    line_open: &Arc<AtomicBool>,
) -> Result<Job, String> {
    let mut messages = Messages {
        line_open: Arc::clone(line_open),
    };
    if let Some(user) = run_as {
        let _ = writeln!(messages, "gputune: {}", runs_as_sentence(user));
    }
    let mut job = Job::start(&JobCommand {
        words: args.command.clone(),
        run_as: run_as.cloned(),
        output: JobOutput::Piped,
        reads_stdin: true,
    })?;
    let echo = |inner: Box<dyn Write + Send>| -> Box<dyn Write + Send> {
        Box::new(Echo::new(inner, Arc::clone(line_open)))
    };
    let streams = JobStreams {
        // With --json stdout holds the report alone.
        stdout: if args.json {
            echo(Box::new(std::io::stderr()))
        } else {
            echo(Box::new(std::io::stdout()))
        },
        stderr: echo(Box::new(std::io::stderr())),
    };
    let regex = args.progress_regex.as_deref();
    let parse = args.progress_file.is_none();
    let parser = || {
        if parse {
            ProgressParser::new(regex).ok()
        } else {
            None
        }
    };
    let (_readers, problems) = job.read_output(streams, &parser, clock, sender);
    for problem in problems {
        let _ = writeln!(messages, "gputune: {problem}");
    }
    Ok(job)
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
