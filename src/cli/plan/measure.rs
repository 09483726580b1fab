//! `gputune plan --measure -- COMMAND…`: runs the user's own training command for a few steps
//! (at each micro-batch when `{mb}` is in it), watches its processes' GPU memory in NVML's
//! process list, stops it (SIGTERM to its process group, a grace, then SIGKILL), and fits the
//! peaks to a fixed cost plus a cost per sample (`plan::measure`). Progress is read by the
//! sweep's reader (`sweep::feed::read_stream` with its `ProgressParser`). A run that runs out
//! of memory (CUDA's out-of-memory text in its output, or its memory reaching the card's) is a
//! result, not a failure.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{PlanArgs, load_model, training_setup};
use crate::cli::as_user::{InvokingUser, invoking_user};
use crate::cli::run::{describe_status, start_command};
use crate::device::BackendOptions;
use crate::device::worker::{DeviceWorker, call_timeout_from_env};
use crate::plan::PlanError;
use crate::plan::measure::{MeasuredFit, MeasuredRun, fit_runs, has_placeholder, with_micro_batch};
use crate::plan::memory::estimate;
use crate::sweep::feed::{Echo, FeedMessage, read_stream};
use crate::sweep::progress::{ProgressParser, ProgressValue, WorkUnit};
use crate::sweep::runner::SweepClock;

/// Progress steps a run is given when neither `--steps` nor `--seconds` says.
pub const DEFAULT_STEPS: u64 = 20;
/// Micro-batches measured when `--micro-batches` is not given.
pub const DEFAULT_MICRO_BATCHES: [u64; 2] = [1, 2];
/// A run counting steps is stopped after this long even if it printed no readable progress.
const MOST_SECONDS_COUNTING_STEPS: f64 = 900.0;
/// How often the job's processes are looked for in NVML's list.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long a job has to end after SIGTERM before it is killed (a training script may save a
/// checkpoint on SIGTERM; a few seconds is enough to end without one).
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the job's output is waited for after it ended (the out-of-memory text).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);
/// What the job's output says when CUDA ran out of memory (PyTorch, JAX/XLA, TensorFlow).
const OUT_OF_MEMORY_TEXTS: [&str; 4] = [
    "CUDA out of memory",
    "OutOfMemoryError",
    "RESOURCE_EXHAUSTED: Out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
];

/// How one run ended.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum RunResult {
    /// It ran its steps (or its time), then was stopped.
    Measured,
    /// It ran out of GPU memory: `because` says how that was seen.
    OutOfMemory { because: String },
    /// It ended by itself before its steps, not out of memory.
    Failed { because: String },
}

/// One run of the job.
#[derive(Debug, Clone, Serialize)]
pub struct JobRun {
    pub micro_batch: Option<u64>,
    #[serde(flatten)]
    pub result: RunResult,
    /// The largest GPU memory the job's processes held on one GPU, as NVML listed them.
    pub peak_bytes: Option<u64>,
    pub gpu_index: Option<u32>,
    /// Progress steps read from its output.
    pub steps_read: u64,
    pub seconds: f64,
}

impl JobRun {
    fn as_measured(&self) -> Option<MeasuredRun> {
        let micro_batch = self.micro_batch?;
        match (&self.result, self.peak_bytes) {
            (RunResult::OutOfMemory { .. }, _) => Some(MeasuredRun::OutOfMemory { micro_batch }),
            (RunResult::Measured, Some(peak_bytes)) => Some(MeasuredRun::Peak {
                micro_batch,
                peak_bytes,
            }),
            _ => None,
        }
    }
}

/// The fit, as `--json` prints it.
#[derive(Debug, Serialize)]
struct FitReport {
    fixed_bytes: u64,
    per_sample_bytes: u64,
    max_micro_batch: u64,
    limited_by_out_of_memory: Option<u64>,
    predicted_peak_bytes: u64,
}

/// The plan for the same setup at a measured micro-batch.
#[derive(Debug, Serialize)]
struct PlanComparison {
    micro_batch: u64,
    measured_bytes: u64,
    planned_bytes: u64,
    /// (planned − measured) / measured, percent.
    difference_pct: f64,
}

/// The plan's line against the measured one.
#[derive(Debug, Serialize)]
struct PlanVersusMeasured {
    model: String,
    runs: Vec<PlanComparison>,
    planned_fixed_bytes: Option<u64>,
    planned_per_sample_bytes: Option<u64>,
    planned_cuda_context_bytes: u64,
    /// What differs, in words.
    differences: Vec<String>,
}

/// What `plan --measure --json` prints.
#[derive(Debug, Serialize)]
struct MeasureReport {
    card: Option<String>,
    gpu_memory_bytes: Option<u64>,
    runs: Vec<JobRun>,
    fit: Option<FitReport>,
    /// Why there is no fit, when there is none.
    no_fit: Option<String>,
    /// The run at the recommended micro-batch (`--confirm`).
    confirmed: Option<bool>,
    plan: Option<PlanVersusMeasured>,
    summary: String,
}

/// A writer that passes the job's output on and notes CUDA's out-of-memory text in it (the
/// last bytes are kept, so a text split between two reads is still found).
struct OutOfMemoryWatch {
    inner: Box<dyn Write + Send>,
    seen: Arc<AtomicBool>,
    tail: Vec<u8>,
}

impl Write for OutOfMemoryWatch {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.tail.extend_from_slice(bytes);
        let text = String::from_utf8_lossy(&self.tail);
        if OUT_OF_MEMORY_TEXTS
            .iter()
            .any(|needle| text.contains(needle))
        {
            self.seen.store(true, Ordering::SeqCst);
        }
        let keep = 64;
        if self.tail.len() > keep {
            self.tail.drain(..self.tail.len() - keep);
        }
        // The terminal going away does not stop the watching.
        let _ = self.inner.write_all(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.inner.flush();
        Ok(())
    }
}

/// When a run stops.
#[derive(Debug, Clone, Copy)]
struct RunLimit {
    steps: Option<u64>,
    seconds: f64,
}

/// The pids of `root` and every process below it, from /proc.
fn process_tree(root: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<u32>().ok())
            else {
                continue;
            };
            // The parent is the second field after the command, which may hold ") ".
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|field| field.parse::<u32>().ok());
            if let Some(parent) = parent {
                parents.push((pid, parent));
            }
        }
    }
    let mut tree = vec![root];
    let mut index = 0;
    while index < tree.len() {
        let parent = tree[index];
        tree.extend(
            parents
                .iter()
                .filter(|(pid, ppid)| *ppid == parent && !tree.contains(pid))
                .map(|(pid, _)| *pid)
                .collect::<Vec<_>>(),
        );
        index += 1;
    }
    tree
}

/// The GPUs: their count and memory, read once.
struct Cards {
    memory_bytes: Vec<Option<u64>>,
    names: Vec<Option<String>>,
}

fn read_cards(worker: &mut DeviceWorker) -> Result<Cards, crate::device::DeviceError> {
    let timeout = call_timeout_from_env();
    let count = worker.call("counting the GPUs", timeout, |backend| backend.gpu_count())?;
    let mut cards = Cards {
        memory_bytes: Vec::new(),
        names: Vec::new(),
    };
    for index in 0..count {
        let identity = worker
            .call("reading a GPU", timeout, move |backend| {
                backend.identity(index)
            })
            .ok();
        cards.memory_bytes.push(
            identity
                .as_ref()
                .map(|identity| identity.memory_total_bytes),
        );
        cards.names.push(identity.map(|identity| identity.name));
    }
    Ok(cards)
}

/// The memory `pids` hold on each GPU now (GPU index, bytes), from NVML's process lists.
fn job_memory(worker: &mut DeviceWorker, gpus: u32, pids: &[u32]) -> Vec<(u32, u64)> {
    let timeout = call_timeout_from_env();
    let mut held = Vec::new();
    for index in 0..gpus {
        let Ok(Some(processes)) = worker.call("listing the GPU's processes", timeout, move |b| {
            b.processes(index)
        }) else {
            continue;
        };
        let bytes: u64 = processes
            .iter()
            .filter(|process| pids.contains(&process.pid))
            .filter_map(|process| process.used_memory_bytes)
            .sum();
        if bytes > 0 {
            held.push((index, bytes));
        }
    }
    held
}

/// `signal` to the job's process group: its children (a launcher's workers) too. Only the
/// group: the job's own pid may belong to another process once it has been waited for.
fn signal_group(group: i32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group), signal);
}

/// Stops the job: SIGTERM to its group, [`STOP_GRACE`] to end (cut short by another Ctrl-C),
/// then SIGKILL; whatever of its group is left is killed once it has ended.
fn stop_job(child: &mut Child, stop: &Receiver<()>) -> Option<ExitStatus> {
    let Ok(group) = i32::try_from(child.id()) else {
        let _ = child.kill();
        return child.wait().ok();
    };
    signal_group(group, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline && stop.try_recv().is_err() {
        match child.try_wait() {
            Ok(Some(status)) => {
                // Its children too, if any ignored the SIGTERM.
                signal_group(group, nix::sys::signal::Signal::SIGKILL);
                return Some(status);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break,
        }
    }
    signal_group(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.kill();
    child.wait().ok()
}

/// Everything one run needs from the command.
struct Runner<'a> {
    worker: &'a mut DeviceWorker,
    cards: &'a Cards,
    run_as: Option<&'a InvokingUser>,
    limit: RunLimit,
    stop: &'a Receiver<()>,
    messages: &'a mut dyn Write,
    interrupted: bool,
    /// Whether the job's output left a line open.
    line_open: Arc<AtomicBool>,
}

impl Runner<'_> {
    /// Ends the job's tqdm line (drawn with `\r`, no newline) so gputune's own line starts
    /// on a line of its own.
    fn end_open_line(&mut self) {
        if self.line_open.swap(false, Ordering::SeqCst) {
            let _ = writeln!(self.messages);
        }
    }

    /// Runs `command` once and measures it.
    fn run(&mut self, command: &[OsString], micro_batch: Option<u64>) -> anyhow::Result<JobRun> {
        let Some((program, arguments)) = command.split_first() else {
            anyhow::bail!("No command to measure: give it after --.");
        };
        let shown: Vec<String> = command
            .iter()
            .map(|argument| crate::text::printable(&argument.to_string_lossy()))
            .collect();
        self.end_open_line();
        let _ = writeln!(self.messages, "gputune: measuring: {}", shown.join(" "));
        let mut process = Command::new(program);
        process
            .args(arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so stopping it stops the workers a launcher starts.
            .process_group(0);
        if std::env::var_os("PYTHONUNBUFFERED").is_none() {
            process.env("PYTHONUNBUFFERED", "1");
        }
        let Some(mut child) = start_command(process, self.run_as, self.messages) else {
            anyhow::bail!(
                "The command could not be started: check its path and that it is executable."
            );
        };
        let clock = SweepClock::start();
        let (sender, progress) = mpsc::channel();
        let out_of_memory_text = Arc::new(AtomicBool::new(false));
        let mut readers: Vec<JoinHandle<()>> = Vec::new();
        let streams: [(&str, Option<Box<dyn std::io::Read + Send>>); 2] = [
            (
                "job-stdout",
                child
                    .stdout
                    .take()
                    .map(|stream| Box::new(stream) as Box<dyn std::io::Read + Send>),
            ),
            (
                "job-stderr",
                child
                    .stderr
                    .take()
                    .map(|stream| Box::new(stream) as Box<dyn std::io::Read + Send>),
            ),
        ];
        for (name, stream) in streams {
            let Some(stream) = stream else { continue };
            // The job's output goes to stderr: stdout is the report's.
            let echo = Box::new(OutOfMemoryWatch {
                inner: Box::new(Echo::new(
                    Box::new(std::io::stderr()),
                    Arc::clone(&self.line_open),
                )),
                seen: Arc::clone(&out_of_memory_text),
                tail: Vec::new(),
            });
            let parser = ProgressParser::new(None).ok();
            match read_stream(name, stream, echo, parser, clock, sender.clone()) {
                Ok(handle) => readers.push(handle),
                Err(error) => {
                    let _ = writeln!(
                        self.messages,
                        "gputune: the job's output cannot be read ({error})."
                    );
                }
            }
        }
        drop(sender);
        let started = Instant::now();
        let card_memory = |index: u32| -> Option<u64> {
            self.cards
                .memory_bytes
                .get(index as usize)
                .copied()
                .flatten()
        };
        let gpus = self.cards.memory_bytes.len() as u32;
        let mut peak: Option<(u32, u64)> = None;
        let mut steps_read = 0u64;
        let mut reached_card = false;
        let ended: Option<ExitStatus>;
        let mut stopped_by_us = false;
        loop {
            while let Ok(message) = progress.try_recv() {
                // A step counter (tqdm's, the Trainer's "step"): steps done since the start.
                if let FeedMessage::Reading(reading) = message
                    && let ProgressValue::Count { units_done } = reading.value
                    && reading.unit == WorkUnit::Step
                {
                    steps_read = steps_read.max(units_done as u64);
                }
            }
            // The memory after the progress: the step that ends the run has its peak read.
            let pids = process_tree(child.id());
            for (index, bytes) in job_memory(self.worker, gpus, &pids) {
                if peak.is_none_or(|(_, most)| bytes > most) {
                    peak = Some((index, bytes));
                }
                if card_memory(index).is_some_and(|total| bytes >= total) {
                    reached_card = true;
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Nothing it started outlives the measurement (a launcher's workers).
                if let Ok(group) = i32::try_from(child.id()) {
                    signal_group(group, nix::sys::signal::Signal::SIGKILL);
                }
                ended = Some(status);
                break;
            }
            if self.stop.try_recv().is_ok() {
                self.interrupted = true;
                let _ = writeln!(self.messages, "gputune: stopping the job (interrupted).");
                stopped_by_us = true;
                ended = stop_job(&mut child, self.stop);
                break;
            }
            let elapsed_s = started.elapsed().as_secs_f64();
            let done = match self.limit.steps {
                Some(steps) => steps_read >= steps || elapsed_s >= MOST_SECONDS_COUNTING_STEPS,
                None => elapsed_s >= self.limit.seconds,
            };
            if done || reached_card || out_of_memory_text.load(Ordering::SeqCst) {
                if self.limit.steps.is_some() && elapsed_s >= MOST_SECONDS_COUNTING_STEPS {
                    let _ = writeln!(
                        self.messages,
                        "gputune: no progress gputune can read came in {MOST_SECONDS_COUNTING_STEPS:.0} s; measuring by time instead (--seconds S) needs no progress."
                    );
                }
                stopped_by_us = true;
                ended = stop_job(&mut child, self.stop);
                break;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        // The rest of its output: CUDA's out-of-memory text comes as the job ends.
        let drain_until = Instant::now() + OUTPUT_DRAIN;
        while readers.iter().any(|reader| !reader.is_finished()) && Instant::now() < drain_until {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.end_open_line();
        let seconds = started.elapsed().as_secs_f64();
        let result = if out_of_memory_text.load(Ordering::SeqCst) {
            RunResult::OutOfMemory {
                because: "its output says CUDA ran out of memory".to_string(),
            }
        } else if reached_card {
            RunResult::OutOfMemory {
                because: "its memory reached the card's".to_string(),
            }
        } else if self.interrupted {
            RunResult::Failed {
                because: "interrupted".to_string(),
            }
        } else if !stopped_by_us && ended.is_some_and(|status| !status.success()) {
            RunResult::Failed {
                because: format!(
                    "the command {} before its steps",
                    ended.map_or_else(|| "ended".to_string(), describe_status)
                ),
            }
        } else if peak.is_none() {
            RunResult::Failed {
                because: "NVML never listed the job's processes on a GPU (a job in a container shows other pids; a driver that does not list processes cannot be measured)".to_string(),
            }
        } else {
            RunResult::Measured
        };
        Ok(JobRun {
            micro_batch,
            result,
            peak_bytes: peak.map(|(_, bytes)| bytes),
            gpu_index: peak.map(|(index, _)| index),
            steps_read,
            seconds,
        })
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / 1024.0 / 1024.0)
}

/// Runs `gputune plan --measure`; returns the exit status.
pub fn run(args: &PlanArgs, backend: &BackendOptions, out: &mut dyn Write) -> anyhow::Result<i32> {
    if args.command.is_empty() {
        anyhow::bail!(
            "--measure needs the training command after --: gputune plan --measure -- python train.py --batch-size {{mb}}"
        );
    }
    let with_placeholder = has_placeholder(&args.command);
    let mut micro_batches: Vec<u64> = if args.micro_batches.is_empty() {
        DEFAULT_MICRO_BATCHES.to_vec()
    } else {
        args.micro_batches.clone()
    };
    if micro_batches.contains(&0) {
        anyhow::bail!("--micro-batches must be 1 or more.");
    }
    micro_batches.dedup();
    if !with_placeholder && !args.micro_batches.is_empty() {
        anyhow::bail!(
            "--micro-batches needs {{mb}} in the command where its micro-batch goes (e.g. --batch-size {{mb}})."
        );
    }
    if let Some(steps) = args.steps
        && steps == 0
    {
        anyhow::bail!("--steps must be 1 or more.");
    }
    let limit = match args.seconds {
        Some(seconds) if seconds.is_finite() && seconds > 0.0 => RunLimit {
            steps: None,
            seconds,
        },
        Some(seconds) => anyhow::bail!("--seconds must be more than 0, not {seconds}."),
        None => RunLimit {
            steps: Some(args.steps.unwrap_or(DEFAULT_STEPS)),
            seconds: MOST_SECONDS_COUNTING_STEPS,
        },
    };
    // The plan's side is checked before any run, so a typo costs no job start.
    let model = match &args.model {
        Some(name) => Some(load_model(name)?),
        None => None,
    };
    if let Some(model) = &model {
        training_setup(args, model)?;
    }
    let run_as = invoking_user(args.keep_root).map_err(anyhow::Error::msg)?;
    let opened = crate::device::open_backend(backend)?;
    if let Some(reason) = &opened.fallback_reason {
        anyhow::bail!(
            "There is no NVIDIA driver to watch the job with ({reason}): --measure needs the GPU the job runs on."
        );
    }
    let mut worker = DeviceWorker::start(opened.backend, "gputune-measure");
    let cards = read_cards(&mut worker)?;
    let stop = crate::cli::signals::install_stop_signal(2)?;
    let mut messages = std::io::stderr();
    let mut runner = Runner {
        worker: &mut worker,
        cards: &cards,
        run_as: run_as.as_ref(),
        limit,
        stop: &stop,
        messages: &mut messages,
        interrupted: false,
        line_open: Arc::new(AtomicBool::new(false)),
    };
    let mut runs = Vec::new();
    if with_placeholder {
        for &micro_batch in &micro_batches {
            let command = with_micro_batch(&args.command, micro_batch)?;
            runs.push(runner.run(&command, Some(micro_batch))?);
            if runner.interrupted {
                break;
            }
        }
    } else {
        runs.push(runner.run(&args.command, None)?);
    }
    let gpu_index = runs.iter().find_map(|run| run.gpu_index).unwrap_or(0);
    let card_bytes = cards
        .memory_bytes
        .get(gpu_index as usize)
        .copied()
        .flatten();
    let card_name = cards.names.get(gpu_index as usize).cloned().flatten();
    let fit_of = |runs: &[JobRun]| -> Result<MeasuredFit, PlanError> {
        let measured: Vec<MeasuredRun> = runs.iter().filter_map(JobRun::as_measured).collect();
        fit_runs(&measured, card_bytes.unwrap_or(0))
    };
    let mut fit = if with_placeholder {
        Some(fit_of(&runs))
    } else {
        None
    };
    let mut confirmed = None;
    if args.confirm
        && !runner.interrupted
        && let Some(Ok(first)) = &fit
        && first.max_micro_batch > 0
    {
        let size = first.max_micro_batch;
        let already = runs
            .iter()
            .find(|run| run.micro_batch == Some(size) && run.result == RunResult::Measured);
        if already.is_some() {
            confirmed = Some(true);
        } else {
            let command = with_micro_batch(&args.command, size)?;
            let run = runner.run(&command, Some(size))?;
            confirmed = Some(run.result == RunResult::Measured);
            runs.push(run);
            // An out-of-memory run at the answer lowers it.
            fit = Some(fit_of(&runs));
        }
    }
    let plan = match &model {
        Some(model) => Some(compare_with_plan(args, model, &runs, fit.as_ref())?),
        None => None,
    };
    let (fit_report, no_fit) = match fit {
        Some(Ok(fit)) => (
            Some(FitReport {
                fixed_bytes: fit.fixed_bytes.max(0.0) as u64,
                per_sample_bytes: fit.per_sample_bytes as u64,
                max_micro_batch: fit.max_micro_batch,
                limited_by_out_of_memory: fit.limited_by_out_of_memory,
                predicted_peak_bytes: fit.predicted_bytes(fit.max_micro_batch).max(0.0) as u64,
            }),
            None,
        ),
        Some(Err(error)) => (None, Some(error.to_string())),
        None => (None, None),
    };
    let summary = summary(&runs, fit_report.as_ref(), no_fit.as_deref(), confirmed);
    let report = MeasureReport {
        card: card_name,
        gpu_memory_bytes: card_bytes,
        runs,
        fit: fit_report,
        no_fit,
        confirmed,
        plan,
        summary,
    };
    if args.json {
        crate::text::write_json_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        write_text(out, &report)?;
    }
    if runner.interrupted {
        return Ok(130);
    }
    let nothing_fits = report
        .fit
        .as_ref()
        .is_some_and(|fit| fit.max_micro_batch == 0)
        || (report.fit.is_none()
            && report
                .runs
                .iter()
                .all(|run| matches!(run.result, RunResult::OutOfMemory { .. })));
    let measured_something = report.fit.is_some()
        || report
            .runs
            .iter()
            .any(|run| run.result == RunResult::Measured);
    Ok(if nothing_fits {
        super::EXIT_DOES_NOT_FIT
    } else if measured_something {
        super::EXIT_FITS
    } else {
        1
    })
}

/// The plan for the same setup at each measured micro-batch, and what differs.
fn compare_with_plan(
    args: &PlanArgs,
    model: &crate::plan::model::Model,
    runs: &[JobRun],
    fit: Option<&Result<MeasuredFit, PlanError>>,
) -> anyhow::Result<PlanVersusMeasured> {
    let setup = training_setup(args, model)?;
    let planned_at = |micro_batch: u64| -> Option<u64> {
        let mut at = setup;
        at.micro_batch = micro_batch;
        estimate(model, &at).ok().map(|breakdown| breakdown.total())
    };
    let mut comparisons = Vec::new();
    for run in runs {
        let (RunResult::Measured, Some(measured_bytes)) = (&run.result, run.peak_bytes) else {
            continue;
        };
        let micro_batch = run.micro_batch.unwrap_or(args.micro_batch);
        let Some(planned_bytes) = planned_at(micro_batch) else {
            continue;
        };
        comparisons.push(PlanComparison {
            micro_batch,
            measured_bytes,
            planned_bytes,
            difference_pct: (planned_bytes as f64 - measured_bytes as f64) / measured_bytes as f64
                * 100.0,
        });
    }
    // The plan's own line through two micro-batches, against the measured one.
    let (planned_fixed, planned_per_sample) = match (planned_at(1), planned_at(2)) {
        (Some(one), Some(two)) if two >= one => {
            let per_sample = two - one;
            (Some(one.saturating_sub(per_sample)), Some(per_sample))
        }
        _ => (None, None),
    };
    let mut differences = Vec::new();
    if let (Some(Ok(fit)), Some(fixed), Some(per_sample)) = (fit, planned_fixed, planned_per_sample)
    {
        let share = |planned: f64, measured: f64| (planned - measured) / measured.max(1.0) * 100.0;
        differences.push(format!(
            "Fixed part (context, weights, optimizer states): planned {}, measured {} ({:+.1} %).",
            mib(fixed as f64),
            mib(fit.fixed_bytes),
            share(fixed as f64, fit.fixed_bytes)
        ));
        differences.push(format!(
            "Per sample (activations and the allocator's reserve for them): planned {}, measured {} ({:+.1} %).",
            mib(per_sample as f64),
            mib(fit.per_sample_bytes),
            share(per_sample as f64, fit.per_sample_bytes)
        ));
    }
    differences.push(format!(
        "The plan assumed a {} MiB CUDA context (--cuda-context-mib); it differs per card and driver, and the measurement holds this card's.",
        args.cuda_context_mib
    ));
    Ok(PlanVersusMeasured {
        model: model.name.clone(),
        runs: comparisons,
        planned_fixed_bytes: planned_fixed,
        planned_per_sample_bytes: planned_per_sample,
        planned_cuda_context_bytes: args.cuda_context_mib.saturating_mul(1024 * 1024),
        differences,
    })
}

fn summary(
    runs: &[JobRun],
    fit: Option<&FitReport>,
    no_fit: Option<&str>,
    confirmed: Option<bool>,
) -> String {
    if let Some(fit) = fit {
        let checked = match confirmed {
            Some(true) => " (a run at that size ran its steps)",
            Some(false) => " (the run at the size first found did not; this is one below it)",
            None => " (not run: --confirm runs it)",
        };
        if fit.max_micro_batch == 0 {
            return format!(
                "Not even micro-batch 1 fits the card: the job needs {} before its first sample.",
                mib(fit.fixed_bytes as f64)
            );
        }
        return format!(
            "The largest micro-batch that fits the card is {}{checked}: {} predicted.",
            fit.max_micro_batch,
            mib(fit.predicted_peak_bytes as f64)
        );
    }
    // Runs that failed say why before the fit's own reason ("No run finished").
    let failure = runs.iter().find_map(|run| match &run.result {
        RunResult::Failed { because } => Some(because),
        _ => None,
    });
    if let (Some(reason), Some(because)) = (no_fit, failure) {
        return format!("{reason} A run could not be measured: {because}.");
    }
    if let Some(reason) = no_fit {
        return reason.to_string();
    }
    match runs.first() {
        Some(JobRun {
            result: RunResult::Measured,
            peak_bytes: Some(peak),
            ..
        }) => format!(
            "The job's peak was {}; put {{mb}} where its micro-batch goes to find the largest that fits.",
            mib(*peak as f64)
        ),
        Some(JobRun {
            result: RunResult::OutOfMemory { because },
            ..
        }) => format!("The job ran out of memory ({because})."),
        Some(JobRun {
            result: RunResult::Failed { because },
            ..
        }) => format!("The job could not be measured: {because}."),
        _ => "The job could not be measured.".to_string(),
    }
}

fn write_text(out: &mut dyn Write, report: &MeasureReport) -> std::io::Result<()> {
    if let (Some(card), Some(bytes)) = (&report.card, report.gpu_memory_bytes) {
        writeln!(
            out,
            "Card: {} ({})",
            crate::text::printable(card),
            mib(bytes as f64)
        )?;
    }
    for run in &report.runs {
        let size = run
            .micro_batch
            .map_or_else(|| "job".to_string(), |size| format!("micro-batch {size}"));
        let result = match &run.result {
            RunResult::Measured => match run.peak_bytes {
                Some(peak) => format!("peak {}", mib(peak as f64)),
                None => "no memory seen".to_string(),
            },
            RunResult::OutOfMemory { because } => format!("out of memory ({because})"),
            RunResult::Failed { because } => format!("not measured: {because}"),
        };
        writeln!(
            out,
            "  {size:<16} {result}, {} steps read in {:.1} s",
            run.steps_read, run.seconds
        )?;
    }
    if let Some(fit) = &report.fit {
        writeln!(
            out,
            "Fit: {} fixed + {} per sample.",
            mib(fit.fixed_bytes as f64),
            mib(fit.per_sample_bytes as f64)
        )?;
    }
    if let Some(plan) = &report.plan {
        writeln!(
            out,
            "Against the plan for {}:",
            crate::text::printable(&plan.model)
        )?;
        for run in &plan.runs {
            writeln!(
                out,
                "  micro-batch {:<5} measured {}, planned {} ({:+.1} %)",
                run.micro_batch,
                mib(run.measured_bytes as f64),
                mib(run.planned_bytes as f64),
                run.difference_pct
            )?;
        }
        for line in &plan.differences {
            writeln!(out, "  {line}")?;
        }
    }
    writeln!(out, "{}", report.summary)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut kept) = self.0.lock() {
                kept.extend_from_slice(bytes);
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn out_of_memory_text_split_between_reads_is_seen_and_passed_on() {
        let sink = Sink::default();
        let seen = Arc::new(AtomicBool::new(false));
        let mut watch = OutOfMemoryWatch {
            inner: Box::new(sink.clone()),
            seen: Arc::clone(&seen),
            tail: Vec::new(),
        };
        watch
            .write_all(b"step 3\rtorch.OutOfMemoryError: CUDA out of me")
            .unwrap();
        assert!(seen.load(Ordering::SeqCst), "OutOfMemoryError is enough");
        let seen = Arc::new(AtomicBool::new(false));
        let mut watch = OutOfMemoryWatch {
            inner: Box::new(sink.clone()),
            seen: Arc::clone(&seen),
            tail: Vec::new(),
        };
        watch.write_all(b"RuntimeError: CUDA out of me").unwrap();
        assert!(!seen.load(Ordering::SeqCst));
        watch
            .write_all(b"mory. Tried to allocate 2.00 GiB")
            .unwrap();
        assert!(seen.load(Ordering::SeqCst));
        let kept = sink.0.lock().map(|kept| kept.clone()).unwrap_or_default();
        assert!(String::from_utf8_lossy(&kept).ends_with("Tried to allocate 2.00 GiB"));
    }

    #[test]
    fn the_process_tree_holds_the_root_and_its_children() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let tree = process_tree(std::process::id());
        assert_eq!(tree[0], std::process::id());
        assert!(tree.contains(&child.id()), "{tree:?}");
        let _ = child.kill();
        let _ = child.wait();
    }
}
