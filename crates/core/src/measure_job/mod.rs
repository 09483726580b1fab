//! Measuring the user's own training job (`gputune plan --measure` and the Plan tab's "Measure
//! my job", one engine for both): runs the command for a few steps (at each micro-batch when
//! `{mb}` is in it), watches its processes' GPU memory in NVML's process list on a
//! `DeviceWorker`, stops it (the `job` room's one policy: SIGTERM to its process group, a
//! grace, then SIGKILL to every process it started), and fits the
//! peaks to a fixed cost plus a cost per sample (`plan::measure`). Progress is read by the
//! sweep's reader (`sweep::feed::read_stream` with its `ProgressParser`). A run that runs out of
//! memory (CUDA's out-of-memory text in its output, or its memory reaching the card's) is a
//! result, not a failure. No printing and no UI: a [`Watcher`] gets the messages, the job's
//! output and the progress; the front ends say it in their own way.

mod compare;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use compare::{PlanComparison, PlanVersusMeasured, compare_with_plan};

use crate::device::worker::{DeviceWorker, call_timeout_from_env};
use crate::job::as_user::InvokingUser;
use crate::job::{Job, JobCommand, JobOutput, JobStreams, read_output};
use crate::plan::PlanError;
use crate::plan::measure::{MeasuredFit, MeasuredRun, fit_runs, has_placeholder, with_micro_batch};
use crate::sweep::feed::FeedMessage;
use crate::sweep::progress::{ProgressParser, ProgressValue, WorkUnit};
use crate::sweep::runner::SweepClock;

/// Progress steps a run is given when neither a step count nor seconds are given.
pub const DEFAULT_STEPS: u64 = 20;
/// Micro-batches measured when none are given.
pub const DEFAULT_MICRO_BATCHES: [u64; 2] = [1, 2];
/// A run counting steps is stopped after this long even if it printed no readable progress.
const MAX_SECONDS_COUNTING_STEPS: f64 = 900.0;
/// How often the job's processes are looked for in NVML's list.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
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

/// The measured line: fixed bytes plus bytes per sample, and what it says fits.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FitReport {
    pub fixed_bytes: u64,
    pub per_sample_bytes: u64,
    pub max_micro_batch: u64,
    pub limited_by_out_of_memory: Option<u64>,
    pub predicted_peak_bytes: u64,
}

impl FitReport {
    fn of(fit: &MeasuredFit) -> FitReport {
        FitReport {
            fixed_bytes: fit.fixed_bytes.max(0.0) as u64,
            per_sample_bytes: fit.per_sample_bytes as u64,
            max_micro_batch: fit.max_micro_batch,
            limited_by_out_of_memory: fit.limited_by_out_of_memory,
            predicted_peak_bytes: fit.predicted_bytes(fit.max_micro_batch).max(0.0) as u64,
        }
    }
}

/// A whole measurement: every run, the fit and the one-line answer.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    pub card: Option<String>,
    pub gpu_memory_bytes: Option<u64>,
    pub runs: Vec<JobRun>,
    pub fit: Option<FitReport>,
    /// Why there is no fit, when there is none.
    pub no_fit: Option<String>,
    /// The run at the recommended micro-batch (when confirming).
    pub confirmed: Option<bool>,
    pub summary: String,
    /// The stop signal ended it (Ctrl-C, the window's Stop).
    #[serde(skip)]
    pub interrupted: bool,
}

impl JobReport {
    /// Whether the measurement says nothing fits: the fit found no micro-batch, or every run
    /// ran out of memory.
    pub fn nothing_fits(&self) -> bool {
        self.fit
            .as_ref()
            .is_some_and(|fit| fit.max_micro_batch == 0)
            || (self.fit.is_none()
                && !self.runs.is_empty()
                && self
                    .runs
                    .iter()
                    .all(|run| matches!(run.result, RunResult::OutOfMemory { .. })))
    }

    /// Whether anything was measured (a fit, or a run that ran its steps).
    pub fn measured_something(&self) -> bool {
        self.fit.is_some()
            || self
                .runs
                .iter()
                .any(|run| run.result == RunResult::Measured)
    }
}

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunLimit {
    pub steps: Option<u64>,
    pub seconds: f64,
}

/// What to measure, checked: [`JobSpec::new`] refuses what could not run before any run.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub command: Vec<OsString>,
    /// The sizes put where `{mb}` is; empty when the command has no `{mb}` (one run).
    pub micro_batches: Vec<u64>,
    pub limit: RunLimit,
    /// Run once more at the largest micro-batch the fit finds.
    pub confirm: bool,
}

impl JobSpec {
    /// Checks the front end's inputs (`micro_batches` empty: the default 1 and 2; `steps` and
    /// `seconds` both `None`: [`DEFAULT_STEPS`]); the error names the input to change.
    pub fn new(
        command: Vec<OsString>,
        micro_batches: &[u64],
        steps: Option<u64>,
        seconds: Option<f64>,
        confirm: bool,
    ) -> Result<JobSpec, String> {
        if command.is_empty() {
            return Err("There is no training command to measure: give it with {mb} where its micro-batch goes (python train.py --batch-size {mb}).".to_string());
        }
        let with_placeholder = has_placeholder(&command);
        if micro_batches.contains(&0) {
            return Err("The micro-batches must be 1 or more.".to_string());
        }
        if !with_placeholder && !micro_batches.is_empty() {
            return Err("Micro-batches need {mb} in the command where its micro-batch goes (e.g. --batch-size {mb}).".to_string());
        }
        let mut sizes: Vec<u64> = if !with_placeholder {
            Vec::new()
        } else if micro_batches.is_empty() {
            DEFAULT_MICRO_BATCHES.to_vec()
        } else {
            micro_batches.to_vec()
        };
        sizes.dedup();
        if steps == Some(0) {
            return Err("The steps per run must be 1 or more.".to_string());
        }
        let limit = match seconds {
            Some(seconds) if seconds.is_finite() && seconds > 0.0 => RunLimit {
                steps: None,
                seconds,
            },
            Some(seconds) => {
                return Err(format!(
                    "The seconds per run must be more than 0, not {seconds}."
                ));
            }
            None => RunLimit {
                steps: Some(steps.unwrap_or(DEFAULT_STEPS)),
                seconds: MAX_SECONDS_COUNTING_STEPS,
            },
        };
        Ok(JobSpec {
            command,
            micro_batches: sizes,
            limit,
            confirm,
        })
    }

    /// How many runs the measurement starts (without the confirming one).
    pub fn runs_planned(&self) -> usize {
        self.micro_batches.len().max(1)
    }
}

/// Where a run is now, for a front end's progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunProgress {
    /// Which run, from 1.
    pub run: usize,
    pub micro_batch: Option<u64>,
    pub steps_read: u64,
    /// The largest memory its processes held so far.
    pub peak_bytes: Option<u64>,
    pub seconds: f64,
}

/// What a front end does with the measurement as it goes (called on the measuring thread).
pub trait Watcher {
    /// gputune's own line about the measurement (no "gputune:" prefix).
    fn message(&mut self, text: &str);
    /// Where the job's output goes (the CLI: its stderr; the window: nowhere). Called once per
    /// stream of each run.
    fn job_output(&mut self) -> Box<dyn Write + Send>;
    /// A run is starting (`command` as it will run, `{mb}` put in).
    fn run_starting(&mut self, _command: &[OsString], _micro_batch: Option<u64>) {}
    /// About ten times a second while a run runs.
    fn progress(&mut self, _progress: &RunProgress) {}
    /// The user the job runs as (the CLI under sudo: the one who ran sudo).
    fn run_as(&self) -> Option<InvokingUser> {
        None
    }
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

/// The GPUs: their count and memory, read once.
pub(crate) struct Cards {
    memory_bytes: Vec<Option<u64>>,
    names: Vec<Option<String>>,
}

pub(crate) fn read_cards(worker: &mut DeviceWorker) -> Result<Cards, crate::device::DeviceError> {
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

/// Everything one run needs.
struct Runner<'a> {
    worker: &'a mut DeviceWorker,
    cards: &'a Cards,
    limit: RunLimit,
    stop: &'a Receiver<()>,
    watcher: &'a mut dyn Watcher,
    interrupted: bool,
    runs_started: usize,
}

impl Runner<'_> {
    /// Runs `command` once and measures it.
    fn run(&mut self, command: &[OsString], micro_batch: Option<u64>) -> anyhow::Result<JobRun> {
        self.runs_started += 1;
        self.watcher.run_starting(command, micro_batch);
        let mut child = Job::start(&JobCommand {
            words: command.to_vec(),
            run_as: self.watcher.run_as(),
            output: JobOutput::Piped,
            reads_stdin: false,
        })
        .map_err(anyhow::Error::msg)?;
        let clock = SweepClock::start();
        let (sender, progress) = mpsc::channel();
        let out_of_memory_text = Arc::new(AtomicBool::new(false));
        let mut watched = || -> Box<dyn Write + Send> {
            Box::new(OutOfMemoryWatch {
                inner: self.watcher.job_output(),
                seen: Arc::clone(&out_of_memory_text),
                tail: Vec::new(),
            })
        };
        let streams = JobStreams {
            stdout: watched(),
            stderr: watched(),
        };
        let parser = || ProgressParser::new(None).ok();
        let (readers, problems) = read_output(&mut child, streams, &parser, clock, &sender);
        for problem in problems {
            self.watcher.message(&problem);
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
            let pids = child.pids();
            for (index, bytes) in job_memory(self.worker, gpus, &pids) {
                if peak.is_none_or(|(_, most)| bytes > most) {
                    peak = Some((index, bytes));
                }
                if card_memory(index).is_some_and(|total| bytes >= total) {
                    reached_card = true;
                }
            }
            // Ended, and nothing it started outlives it (its guard killed the rest).
            if let Ok(Some(status)) = child.poll() {
                ended = Some(status);
                break;
            }
            if self.stop.try_recv().is_ok() {
                self.interrupted = true;
                self.watcher.message("stopping the job (interrupted).");
                stopped_by_us = true;
                ended = child.stop_and_wait(self.stop);
                break;
            }
            let elapsed_s = started.elapsed().as_secs_f64();
            let done = match self.limit.steps {
                Some(steps) => steps_read >= steps || elapsed_s >= MAX_SECONDS_COUNTING_STEPS,
                None => elapsed_s >= self.limit.seconds,
            };
            if done || reached_card || out_of_memory_text.load(Ordering::SeqCst) {
                if self.limit.steps.is_some() && elapsed_s >= MAX_SECONDS_COUNTING_STEPS {
                    self.watcher.message(&format!(
                        "no progress gputune can read came in {MAX_SECONDS_COUNTING_STEPS:.0} s; measuring by time instead (seconds per run) needs no progress."
                    ));
                }
                stopped_by_us = true;
                ended = child.stop_and_wait(self.stop);
                break;
            }
            self.watcher.progress(&RunProgress {
                run: self.runs_started,
                micro_batch,
                steps_read,
                peak_bytes: peak.map(|(_, bytes)| bytes),
                seconds: elapsed_s,
            });
            std::thread::sleep(POLL_INTERVAL);
        }
        // The rest of its output: CUDA's out-of-memory text comes as the job ends.
        let drain_until = Instant::now() + OUTPUT_DRAIN;
        while readers.iter().any(|reader| !reader.is_finished()) && Instant::now() < drain_until {
            std::thread::sleep(Duration::from_millis(20));
        }
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
                    ended.map_or_else(|| "ended".to_string(), crate::text::describe_status)
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

/// Measures the job in `spec` on the GPUs `worker` reads; `stop` ends it early (the report
/// then says `interrupted`). An error only when nothing could be measured at all (no GPU to
/// read, a command that cannot start); a run out of memory or failing is in the report.
pub fn measure_job(
    worker: &mut DeviceWorker,
    spec: &JobSpec,
    stop: &Receiver<()>,
    watcher: &mut dyn Watcher,
) -> anyhow::Result<JobReport> {
    let cards = read_cards(worker)?;
    let mut runner = Runner {
        worker,
        cards: &cards,
        limit: spec.limit,
        stop,
        watcher,
        interrupted: false,
        runs_started: 0,
    };
    let mut runs = Vec::new();
    if spec.micro_batches.is_empty() {
        runs.push(runner.run(&spec.command, None)?);
    } else {
        for &micro_batch in &spec.micro_batches {
            let command = with_micro_batch(&spec.command, micro_batch)?;
            runs.push(runner.run(&command, Some(micro_batch))?);
            if runner.interrupted {
                break;
            }
        }
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
    let mut fit = if spec.micro_batches.is_empty() {
        None
    } else {
        Some(fit_of(&runs))
    };
    let mut confirmed = None;
    if spec.confirm
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
            let command = with_micro_batch(&spec.command, size)?;
            let run = runner.run(&command, Some(size))?;
            confirmed = Some(run.result == RunResult::Measured);
            runs.push(run);
            // An out-of-memory run at the answer lowers it.
            fit = Some(fit_of(&runs));
        }
    }
    let (fit, no_fit) = match fit {
        Some(Ok(fit)) => (Some(FitReport::of(&fit)), None),
        Some(Err(error)) => (None, Some(error.to_string())),
        None => (None, None),
    };
    let summary = summary(&runs, fit.as_ref(), no_fit.as_deref(), confirmed);
    Ok(JobReport {
        card: card_name,
        gpu_memory_bytes: card_bytes,
        runs,
        fit,
        no_fit,
        confirmed,
        summary,
        interrupted: runner.interrupted,
    })
}

/// Bytes as whole MiB, for the messages.
pub fn mib(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / 1024.0 / 1024.0)
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
            None => " (not run: confirming runs it)",
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
    fn the_inputs_are_checked_before_any_run() {
        let command = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let spec =
            JobSpec::new(command(&["train", "--bs", "{mb}"]), &[], None, None, false).unwrap();
        assert_eq!(spec.micro_batches, DEFAULT_MICRO_BATCHES.to_vec());
        assert_eq!(spec.limit.steps, Some(DEFAULT_STEPS));
        let once = JobSpec::new(command(&["train"]), &[], None, Some(5.0), false).unwrap();
        assert!(once.micro_batches.is_empty());
        assert_eq!(once.limit.steps, None);
        assert!(JobSpec::new(command(&["train"]), &[1, 2], None, None, false).is_err());
        assert!(JobSpec::new(command(&["t", "{mb}"]), &[0, 2], None, None, false).is_err());
        assert!(JobSpec::new(command(&["t", "{mb}"]), &[], Some(0), None, false).is_err());
        assert!(JobSpec::new(command(&["t", "{mb}"]), &[], None, Some(-1.0), false).is_err());
        assert!(JobSpec::new(Vec::new(), &[], None, None, false).is_err());
    }
}
