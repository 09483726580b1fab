//! One run of the user's job: started by the `job` room with its output watched for CUDA's
//! out-of-memory text and read for progress, its processes' GPU memory read from NVML's
//! process lists until its steps (or seconds) are done, then stopped by the job room's one
//! policy; how it ended, as a [`RunResult`].

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::spec::{MAX_SECONDS_COUNTING_STEPS, RunLimit};
use crate::device::worker::{DeviceWorker, call_timeout_from_env};
use crate::job::JobClock;
use crate::job::as_user::InvokingUser;
use crate::job::feed::FeedMessage;
use crate::job::progress::{ProgressParser, ProgressValue};
use crate::job::{Job, JobCommand, JobOutput, JobStreams};
use gputune_formats::reports::measure::{JobRun, RunResult};
use gputune_formats::reports::sweep_step::WorkUnit;

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
pub(super) struct Cards {
    pub(super) memory_bytes: Vec<Option<u64>>,
    pub(super) names: Vec<Option<String>>,
}

impl Cards {
    /// GPU `index`'s memory, when it could be read.
    pub(super) fn memory_of(&self, index: u32) -> Option<u64> {
        self.memory_bytes.get(index as usize).copied().flatten()
    }
}

pub(super) fn read_cards(
    worker: &mut DeviceWorker,
) -> Result<Cards, gputune_formats::card::DeviceError> {
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
pub(super) struct Runner<'a> {
    pub(super) worker: &'a mut DeviceWorker,
    pub(super) cards: &'a Cards,
    pub(super) limit: RunLimit,
    /// The user's regex for the job's progress, if any.
    pub(super) progress_regex: Option<&'a str>,
    pub(super) stop: &'a Receiver<()>,
    pub(super) watcher: &'a mut dyn Watcher,
    pub(super) interrupted: bool,
    pub(super) runs_started: usize,
}

/// A run started: its job, its progress and what its output said.
struct Started {
    job: Job,
    progress: Receiver<FeedMessage>,
    readers: Vec<JoinHandle<()>>,
    out_of_memory_text: Arc<AtomicBool>,
    at: Instant,
}

/// What the watching saw until the run ended.
#[derive(Default)]
struct Seen {
    peak: Option<(u32, u64)>,
    steps_read: u64,
    reached_card: bool,
    ended: Option<ExitStatus>,
    stopped_by_us: bool,
}

impl Runner<'_> {
    /// Runs `command` once and measures it.
    pub(super) fn run(
        &mut self,
        command: &[OsString],
        micro_batch: Option<u64>,
    ) -> anyhow::Result<JobRun> {
        self.runs_started += 1;
        self.watcher.run_starting(command, micro_batch);
        let mut started = self.start(command)?;
        let seen = self.watch(&mut started, micro_batch);
        // The rest of its output: CUDA's out-of-memory text comes as the job ends.
        let drain_until = Instant::now() + OUTPUT_DRAIN;
        while started.readers.iter().any(|reader| !reader.is_finished())
            && Instant::now() < drain_until
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let out_of_memory_text = started.out_of_memory_text.load(Ordering::SeqCst);
        Ok(JobRun {
            micro_batch,
            result: self.result_of(&seen, out_of_memory_text),
            peak_bytes: seen.peak.map(|(_, bytes)| bytes),
            gpu_index: seen.peak.map(|(index, _)| index),
            steps_read: seen.steps_read,
            seconds: started.at.elapsed().as_secs_f64(),
        })
    }

    /// Starts the job with its output passed to the watcher and read for progress.
    fn start(&mut self, command: &[OsString]) -> anyhow::Result<Started> {
        let mut job = Job::start(&JobCommand {
            words: command.to_vec(),
            run_as: self.watcher.run_as(),
            output: JobOutput::Piped,
            reads_stdin: false,
        })
        .map_err(anyhow::Error::msg)?;
        let clock = JobClock::start();
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
        let regex = self.progress_regex;
        let parser = || ProgressParser::new(regex).ok();
        let (readers, problems) = job.read_output(streams, &parser, clock, &sender);
        for problem in problems {
            self.watcher.message(&problem);
        }
        Ok(Started {
            job,
            progress,
            readers,
            out_of_memory_text,
            at: Instant::now(),
        })
    }

    /// Watches the run until it ends, its limit is reached, it runs out of memory or a stop
    /// comes; the job is stopped by the job room's policy.
    fn watch(&mut self, started: &mut Started, micro_batch: Option<u64>) -> Seen {
        let gpus = self.cards.memory_bytes.len() as u32;
        let mut seen = Seen::default();
        loop {
            while let Ok(message) = started.progress.try_recv() {
                // A step counter (tqdm's, the Trainer's "step"): steps done since the start.
                if let FeedMessage::Reading(reading) = message
                    && let ProgressValue::Count { units_done } = reading.value
                    && reading.unit == WorkUnit::Step
                {
                    seen.steps_read = seen.steps_read.max(units_done as u64);
                }
            }
            // The memory after the progress: the step that ends the run has its peak read.
            for (index, bytes) in job_memory(self.worker, gpus, &started.job.pids()) {
                if seen.peak.is_none_or(|(_, most)| bytes > most) {
                    seen.peak = Some((index, bytes));
                }
                if self
                    .cards
                    .memory_of(index)
                    .is_some_and(|total| bytes >= total)
                {
                    seen.reached_card = true;
                }
            }
            // Ended, and nothing it started outlives it (its guard killed the rest).
            let polled = started.job.poll();
            // A job that stayed stopped (it used the terminal) is being stopped: said once.
            if let Some(notice) = started.job.take_notice() {
                self.watcher.message(notice);
            }
            if let Ok(Some(status)) = polled {
                seen.ended = Some(status);
                return seen;
            }
            if self.stop.try_recv().is_ok() {
                self.interrupted = true;
                self.watcher.message("stopping the job (interrupted).");
                seen.stopped_by_us = true;
                seen.ended = started.job.stop_and_wait(self.stop);
                return seen;
            }
            let elapsed_s = started.at.elapsed().as_secs_f64();
            let done = match self.limit.steps {
                Some(steps) => seen.steps_read >= steps || elapsed_s >= MAX_SECONDS_COUNTING_STEPS,
                None => elapsed_s >= self.limit.seconds,
            };
            if done || seen.reached_card || started.out_of_memory_text.load(Ordering::SeqCst) {
                if self.limit.steps.is_some() && elapsed_s >= MAX_SECONDS_COUNTING_STEPS {
                    self.watcher.message(&format!(
                        "no progress gputune can read came in {MAX_SECONDS_COUNTING_STEPS:.0} s; measuring by time instead (seconds per run) needs no progress."
                    ));
                }
                seen.stopped_by_us = true;
                seen.ended = started.job.stop_and_wait(self.stop);
                return seen;
            }
            self.watcher.progress(&RunProgress {
                run: self.runs_started,
                micro_batch,
                steps_read: seen.steps_read,
                peak_bytes: seen.peak.map(|(_, bytes)| bytes),
                seconds: elapsed_s,
            });
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// How the run ended, from what was seen.
    fn result_of(&self, seen: &Seen, out_of_memory_text: bool) -> RunResult {
        if out_of_memory_text {
            RunResult::OutOfMemory {
                because: "its output says CUDA ran out of memory".to_string(),
            }
        } else if seen.reached_card {
            RunResult::OutOfMemory {
                because: "its memory reached the card's".to_string(),
            }
        } else if self.interrupted {
            RunResult::Failed {
                because: "interrupted".to_string(),
            }
        } else if !seen.stopped_by_us && seen.ended.is_some_and(|status| !status.success()) {
            RunResult::Failed {
                because: format!(
                    "the command {} before its steps",
                    seen.ended
                        .map_or_else(|| "ended".to_string(), crate::job::describe_status)
                ),
            }
        } else if seen.peak.is_none() {
            RunResult::Failed {
                because: "NVML never listed the job's processes on a GPU (a job in a container shows other pids; a driver that does not list processes cannot be measured)".to_string(),
            }
        } else {
            RunResult::Measured
        }
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
}
