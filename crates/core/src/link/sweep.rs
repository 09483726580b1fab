//! A sweep started from the window, driven by the link thread: the same [`Sweep`] the CLI
//! runs, on the link's own connection (so closing the window ends it and the card is put
//! back), with the job's progress read from a followed log file, or the GPU-side proxy. Several
//! cards swept together (one data-parallel job) are one sweep, as on the command line.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::job::JobClock;
use crate::job::feed::{FeedMessage, follow_file};
use crate::job::progress::ProgressParser;
use crate::service::client::TuningClient;
use crate::sweep::base::{CardToSweep, plan_for_cards};
use crate::sweep::runner::{Sweep, SweepCardPlan, SweepTiming, SweepUpdate, SweepView};
use crate::sweep::steps::SweepSpec;
use gputune_formats::protocol::Event;
use gputune_formats::reports::sweep::Objective;
use gputune_formats::reports::sweep::SweepEnd;
use gputune_formats::tuning::GpuInfo;
use gputune_formats::tuning::SettingsInForce;

/// How often the window hears of a running sweep between steps (its live point moves).
const VIEW_EVERY: Duration = Duration::from_millis(1_000);

/// What the window asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepLaunch {
    pub gpu_index: u32,
    pub spec: SweepSpec,
    pub timing: SweepTiming,
    pub objective: Objective,
    /// The job's log, followed like `tail -F`; `None` measures by the GPU-side proxy.
    pub progress_file: Option<PathBuf>,
    pub progress_regex: Option<String>,
    /// What the card ran when the sweep was asked for: its locks and offsets are reset for
    /// the sweep (`sweep::base`).
    pub in_force: SettingsInForce,
    /// The other cards swept together with `gpu_index` (one job across them), each with what
    /// it ran; empty for a sweep of one card.
    pub also: Vec<(u32, SettingsInForce)>,
}

/// A sweep running in the link thread.
pub struct ActiveSweep {
    sweep: Sweep,
    progress: Receiver<FeedMessage>,
    follow_stop: Arc<AtomicBool>,
    progress_from: String,
    viewed_at: Instant,
    /// Lines for the window (a refused setting, an Xid, the file not there yet).
    pub notes: Vec<String>,
}

impl ActiveSweep {
    /// Plans the sweep on its cards (`gpus`: the machine's) and starts following the progress
    /// file; nothing is written to a card before the first tick.
    pub fn start(launch: SweepLaunch, gpus: &[GpuInfo]) -> Result<ActiveSweep, String> {
        let first = (launch.gpu_index, launch.in_force.clone());
        let mut cards = Vec::new();
        for (index, in_force) in std::iter::once(&first).chain(&launch.also) {
            let gpu = gpus
                .get(*index as usize)
                .ok_or_else(|| format!("There is no GPU {index}."))?;
            cards.push(CardToSweep {
                index: *index,
                gpu,
                in_force,
            });
        }
        let plans: Vec<SweepCardPlan> = plan_for_cards(&launch.spec, &cards, false)
            .map_err(|error| error.to_string())?
            .into_iter()
            .map(|(plan, _)| plan)
            .collect();
        let clock = JobClock::start();
        let (sender, progress) = mpsc::channel();
        let follow_stop = Arc::new(AtomicBool::new(false));
        let (timing, progress_from) = match &launch.progress_file {
            Some(path) => {
                let parser = ProgressParser::new(launch.progress_regex.as_deref())?;
                follow_file(
                    path.clone(),
                    parser,
                    clock,
                    sender,
                    Arc::clone(&follow_stop),
                )
                .map_err(|error| format!("The progress file cannot be followed: {error}"))?;
                (launch.timing, path.display().to_string())
            }
            None => (
                // No progress can come: no point waiting for it.
                SweepTiming {
                    wait_for_progress_s: 0.0,
                    ..launch.timing
                },
                "the GPU-side proxy (SM clock × utilization)".to_string(),
            ),
        };
        Ok(ActiveSweep {
            sweep: Sweep::over_cards(plans, timing, launch.objective, clock)?,
            progress,
            follow_stop,
            progress_from,
            viewed_at: Instant::now(),
            notes: Vec::new(),
        })
    }

    pub fn gpu_index(&self) -> u32 {
        self.sweep.gpu_index()
    }

    /// Every card the sweep holds.
    pub fn gpu_indices(&self) -> Vec<u32> {
        self.sweep.gpu_indices()
    }

    pub fn on_event(&mut self, event: &Event) {
        self.sweep.on_event(event);
    }

    pub fn stop(&mut self, client: &mut TuningClient) {
        self.sweep.stop(
            client,
            SweepEnd::Stopped {
                reason: "Stopped from the window.".to_string(),
            },
        );
    }

    pub fn is_finished(&self) -> bool {
        self.sweep.is_finished()
    }

    /// Moves the sweep on; returns a view when the window should hear of it.
    pub fn tick(&mut self, client: &mut TuningClient) -> Option<SweepView> {
        while let Ok(message) = self.progress.try_recv() {
            match message {
                FeedMessage::Reading(reading) => self.sweep.on_progress(reading),
                FeedMessage::Note(note) => self.notes.push(note),
            }
        }
        self.sweep.tick(client);
        let mut news = false;
        for update in self.sweep.take_updates() {
            news = true;
            if let SweepUpdate::Note(note) = update {
                self.notes.push(note);
            }
        }
        if self.sweep.is_finished() {
            self.follow_stop.store(true, Ordering::SeqCst);
        }
        if news || self.viewed_at.elapsed() >= VIEW_EVERY {
            self.viewed_at = Instant::now();
            return Some(self.sweep.view(&self.progress_from));
        }
        None
    }
}

impl Drop for ActiveSweep {
    fn drop(&mut self) {
        self.follow_stop.store(true, Ordering::SeqCst);
    }
}
