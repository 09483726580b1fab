//! The Plan tab's "Measure my job", run for the app glue (`GpuTuneApp`): `measure_job` (the
//! engine `gputune plan --measure` runs) on a thread of its own with its own NVML handle on a
//! `DeviceWorker`, its news sent to the panel (`MeasureNews`) and a repaint asked for each.
//! Stop sends the engine's stop signal; dropping the runner (the window closing) stops the
//! job too, so nothing it started outlives the window.

use std::ffi::OsString;
use std::io::Write;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::ui::plan::MeasureNews;
use gputune_core::device::BackendOptions;
use gputune_core::device::worker::DeviceWorker;
use gputune_core::measure_job::{JobSpec, RunProgress, Watcher, measure_job};

/// How long the window waits, when it closes, for a stopped job to end (its grace is cut short).
const CLOSE_PATIENCE: Duration = Duration::from_secs(5);

/// Runs one measurement at a time off the UI thread.
pub struct MeasureRunner {
    backend: BackendOptions,
    news: Receiver<MeasureNews>,
    sender: Sender<MeasureNews>,
    /// The running measurement's stop signal and thread.
    running: Option<(Sender<()>, JoinHandle<()>)>,
}

/// The measuring thread's side: news to the panel, a repaint each.
struct Relay {
    news: Sender<MeasureNews>,
    repaint: Box<dyn Fn() + Send>,
    runs_planned: usize,
    runs_started: usize,
    /// What the panel was last told of this run (progress comes ten times a second).
    last: Option<(u64, Option<u64>, u64)>,
}

impl Relay {
    fn send(&mut self, news: MeasureNews) {
        let _ = self.news.send(news);
        (self.repaint)();
    }
}

impl Watcher for Relay {
    fn message(&mut self, text: &str) {
        self.send(MeasureNews::Message(text.to_string()));
    }

    fn job_output(&mut self) -> Box<dyn Write + Send> {
        // The window shows progress, not the job's own lines.
        Box::new(std::io::sink())
    }

    fn run_starting(&mut self, _command: &[OsString], micro_batch: Option<u64>) {
        self.runs_started += 1;
        self.last = None;
        let news = MeasureNews::Starting {
            run: self.runs_started,
            runs_planned: self.runs_planned.max(self.runs_started),
            micro_batch,
        };
        self.send(news);
    }

    fn progress(&mut self, progress: &RunProgress) {
        // Once a second is enough for the seconds; steps and peaks as they change.
        let seen = (
            progress.steps_read,
            progress.peak_bytes,
            progress.seconds as u64,
        );
        if self.last != Some(seen) {
            self.last = Some(seen);
            self.send(MeasureNews::Progress(*progress));
        }
    }
}

impl MeasureRunner {
    pub fn new(backend: BackendOptions) -> MeasureRunner {
        let (sender, news) = mpsc::channel();
        MeasureRunner {
            backend,
            news,
            sender,
            running: None,
        }
    }

    /// Whether a measurement's thread is still running.
    pub fn running(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|(_, thread)| !thread.is_finished())
    }

    /// Starts measuring `spec`; `repaint` is called with each piece of news. An error (said in
    /// the panel) when one is already running or no thread could start.
    pub fn start(
        &mut self,
        spec: JobSpec,
        repaint: impl Fn() + Send + 'static,
    ) -> Result<(), String> {
        if self.running() {
            return Err("A measurement is running: stop it first.".to_string());
        }
        let (stop_sender, stop) = mpsc::channel();
        let mut relay = Relay {
            news: self.sender.clone(),
            repaint: Box::new(repaint),
            runs_planned: spec.runs_planned() + usize::from(spec.confirm),
            runs_started: 0,
            last: None,
        };
        let backend = self.backend.clone();
        let thread = std::thread::Builder::new()
            .name("gputune-measure".to_string())
            .spawn(move || {
                let result = measure_on(&backend, &spec, &stop, &mut relay);
                relay.send(MeasureNews::Finished(result));
            })
            .map_err(|error| format!("The measurement could not start: {error}"))?;
        self.running = Some((stop_sender, thread));
        Ok(())
    }

    /// Stops the running measurement: its job gets SIGTERM, then SIGKILL after the grace.
    pub fn stop(&mut self) {
        if let Some((stop, _)) = &self.running {
            let _ = stop.send(());
        }
    }

    /// The news since the last call.
    pub fn drain(&mut self) -> Vec<MeasureNews> {
        self.news.try_iter().collect()
    }
}

impl Drop for MeasureRunner {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.running.take() {
            // The first stops the job, the second cuts its grace: the window is closing.
            let _ = stop.send(());
            let _ = stop.send(());
            gputune_core::join::join_within(thread, CLOSE_PATIENCE);
        }
    }
}

/// Opens the GPU to watch the job with, then measures it.
fn measure_on(
    backend: &BackendOptions,
    spec: &JobSpec,
    stop: &Receiver<()>,
    relay: &mut Relay,
) -> Result<gputune_core::measure_job::JobReport, String> {
    if matches!(backend.choice, gputune_core::device::BackendChoice::Sim) {
        return Err("The simulator runs no jobs: measuring needs the GPU the job runs on (start gputune without --sim).".to_string());
    }
    let opened = gputune_core::device::open_backend(backend).map_err(|error| error.to_string())?;
    if let Some(reason) = &opened.fallback_reason {
        return Err(format!(
            "There is no NVIDIA driver to watch the job with ({reason}): measuring needs the GPU the job runs on."
        ));
    }
    let mut worker = DeviceWorker::start(opened.backend, "gputune-measure-nvml");
    measure_job(&mut worker, spec, stop, relay).map_err(|error| error.to_string())
}
