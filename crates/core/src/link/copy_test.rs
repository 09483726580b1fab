//! The window's "Test the links": the same test `gputune links` runs (`test_links_opening`),
//! on a thread of its own (the test blocks while its copies run) with its own read-only handle
//! on the cards, as the CLI opens one; driven by box_runs.rs. It changes no setting, so it holds
//! no session. Stop is asked through a flag the test reads between copies: the copy under way
//! ends first (a second or so on a real box), and the report of what was tested by then is kept.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::thread::JoinHandle;

use crate::device::BackendOptions;
use crate::link::box_runs::{BoxEngine, BoxProgress, BoxRunNews, BoxRunView, ProgressUnit};
use crate::pcie::{LinksOptions, LinksProgress, test_links_opening};
use crate::service::client::TuningClient;
use gputune_formats::protocol::Event;
use gputune_formats::reports::links::LinksReport;

/// What the test's thread tells the link thread.
enum News {
    Progress(LinksProgress),
    Ended(LinksReport),
}

/// A link test the window started.
pub struct CopyTestRun {
    news: Receiver<News>,
    thread: Option<JoinHandle<()>>,
    progress: Option<LinksProgress>,
    report: Option<LinksReport>,
    /// Stopped from the window: the test's thread reads it between copies.
    stop_asked: Arc<AtomicBool>,
    ended: bool,
    /// Why it ended without a report.
    failed: Option<String>,
}

impl CopyTestRun {
    /// Starts the test on `gpu_indices` on its own thread.
    pub fn start(
        backend: &BackendOptions,
        gpu_indices: &[u32],
        size_bytes: u64,
    ) -> Result<CopyTestRun, String> {
        let (sender, news) = mpsc::channel();
        let stop_asked = Arc::new(AtomicBool::new(false));
        let stop_seen = Arc::clone(&stop_asked);
        let backend = backend.clone();
        let gpus = gpu_indices.to_vec();
        let options = LinksOptions {
            size_bytes,
            ..LinksOptions::default()
        };
        let thread = std::thread::Builder::new()
            .name("gputune-links".to_string())
            .spawn(move || {
                let report = test_links_opening(&backend, &gpus, &options, &mut |step| {
                    let _ = sender.send(News::Progress(step.clone()));
                    if stop_seen.load(Ordering::Relaxed) {
                        ControlFlow::Break("stopped from the window".to_string())
                    } else {
                        ControlFlow::Continue(())
                    }
                });
                let _ = sender.send(News::Ended(report));
            })
            .map_err(|error| format!("The link test could not start: {error}"))?;
        Ok(CopyTestRun {
            news,
            thread: Some(thread),
            progress: None,
            report: None,
            stop_asked,
            ended: false,
            failed: None,
        })
    }

    /// What its thread said since the last tick.
    fn take_news(&mut self) {
        loop {
            match self.news.try_recv() {
                Ok(News::Progress(progress)) => self.progress = Some(progress),
                Ok(News::Ended(report)) => {
                    self.ended = true;
                    self.report = Some(report);
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    // Its thread ended without a report: it panicked.
                    if !self.ended {
                        self.failed = Some(
                            "The link test ended without a report (see the window's log)."
                                .to_string(),
                        );
                    }
                    self.ended = true;
                    return;
                }
            }
        }
    }
}

impl Drop for CopyTestRun {
    fn drop(&mut self) {
        // Its copies end by themselves; waiting for them here would hold the link thread.
        drop(self.thread.take());
    }
}

impl BoxEngine for CopyTestRun {
    type Report = LinksReport;

    fn take_event(&mut self, _event: &Event) {}

    fn tick(&mut self, _client: &mut TuningClient) -> bool {
        self.take_news();
        self.ended
    }

    fn failure(&self) -> Option<String> {
        self.failed.clone()
    }

    fn stopping(&self) -> bool {
        self.stop_asked.load(Ordering::Relaxed)
    }

    fn stop(&mut self, _client: &mut TuningClient, _reason: &str) {
        self.stop_asked.store(true, Ordering::Relaxed);
    }

    fn progress(&self) -> BoxProgress {
        match &self.progress {
            None => BoxProgress {
                phase: "opening the cards".to_string(),
                unit: ProgressUnit::Steps,
                ..BoxProgress::default()
            },
            Some(step) => BoxProgress {
                phase: step.doing.clone(),
                done: f64::from(step.done),
                of: f64::from(step.total),
                unit: ProgressUnit::Steps,
                left_s: None,
                cards: Vec::new(),
            },
        }
    }

    fn report(&self) -> Option<&LinksReport> {
        self.report.as_ref()
    }

    fn news(view: BoxRunView<LinksReport>) -> BoxRunNews {
        BoxRunNews::Links(view)
    }
}
