//! A trial run by the device-owner thread for the window: a baseline from the last samples,
//! a journal written before anything is applied, a countdown, and Keep / Revert / revert on
//! timeout or exit. The CLI's `apply --try` drives the same journal from its own process.

use std::collections::VecDeque;
use std::path::PathBuf;

use crate::device::{Backend, Setting, Telemetry};
use crate::tuning::journal::{Journal, JournalEntry, describe_all, journal_path, restore_journal};
use crate::tuning::trial::TrialStats;

/// Samples kept per GPU for a trial's baseline.
const BASELINE_SAMPLES: usize = 120;
/// How much of the recent past the baseline covers, ms.
const BASELINE_WINDOW_MS: u64 = 30_000;

/// Where a trial stands, as the window shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialStatus {
    pub gpu_index: u32,
    /// What is being tried ("power limit 315 W").
    pub what: String,
    /// Seconds left; `None` once the trial has ended.
    pub remaining_s: Option<u64>,
    pub baseline: TrialStats,
    pub during: TrialStats,
    /// How it ended, or why it could not start.
    pub message: Option<String>,
}

struct ActiveTrial {
    gpu_index: u32,
    what: String,
    started_ms: u64,
    duration_ms: u64,
    baseline: Vec<Telemetry>,
    during: Vec<Telemetry>,
    journal: Journal,
    journal_path: PathBuf,
}

/// The window's trials: at most one at a time.
#[derive(Default)]
pub struct GuiTrials {
    recent: Vec<VecDeque<Telemetry>>,
    active: Option<ActiveTrial>,
}

impl GuiTrials {
    /// Remembers samples for baselines and advances a running trial. Returns its status when one
    /// is running or has just ended.
    pub fn observe(
        &mut self,
        backend: &mut dyn Backend,
        samples: &[Result<Telemetry, crate::device::DeviceError>],
    ) -> Option<TrialStatus> {
        if self.recent.len() < samples.len() {
            self.recent.resize_with(samples.len(), VecDeque::new);
        }
        for (recent, sample) in self.recent.iter_mut().zip(samples) {
            if let Ok(reading) = sample {
                recent.push_back(reading.clone());
                while recent.len() > BASELINE_SAMPLES {
                    recent.pop_front();
                }
            }
        }
        let trial = self.active.as_mut()?;
        if let Some(Ok(reading)) = samples.get(trial.gpu_index as usize) {
            trial.during.push(reading.clone());
        }
        let now_ms = trial
            .during
            .last()
            .map_or(trial.started_ms, |reading| reading.sampled_at_ms);
        let elapsed_ms = now_ms.saturating_sub(trial.started_ms);
        if elapsed_ms >= trial.duration_ms {
            return Some(self.finish(backend, false, "Time is up: reverted"));
        }
        Some(status(
            trial,
            Some((trial.duration_ms - elapsed_ms).div_ceil(1000)),
            None,
        ))
    }

    /// Records what to restore, writes the journal, then applies `settings` through `apply`.
    pub fn start(
        &mut self,
        backend: &mut dyn Backend,
        gpu_index: u32,
        settings: &[Setting],
        duration_s: u64,
        apply: impl FnOnce(&mut dyn Backend) -> Result<(), String>,
    ) -> TrialStatus {
        let what = describe_all(settings);
        let refuse = |message: String| TrialStatus {
            gpu_index,
            what: what.clone(),
            remaining_s: None,
            baseline: TrialStats::default(),
            during: TrialStats::default(),
            message: Some(message),
        };
        if self.active.is_some() {
            return refuse("A trial is already running: keep or revert it first.".to_string());
        }
        let Some(journal_path) = journal_path() else {
            return refuse(
                "No state folder for the trial journal: set GPUTUNE_STATE_DIR.".to_string(),
            );
        };
        if journal_path.exists() {
            return refuse(format!(
                "A trial journal is pending at {}: another gputune is trying settings, or one did not exit cleanly.",
                journal_path.display()
            ));
        }
        let entry = match JournalEntry::record(backend, gpu_index, settings) {
            Ok(entry) => entry,
            Err(error) => return refuse(error.to_string()),
        };
        let journal = Journal::new(backend.kind(), vec![entry]);
        if let Err(error) = journal.write(&journal_path) {
            return refuse(error.to_string());
        }
        let recent = self.recent.get(gpu_index as usize);
        let started_ms = recent
            .and_then(|recent| recent.back())
            .map_or(0, |reading| reading.sampled_at_ms);
        let baseline: Vec<Telemetry> = recent
            .map(|recent| {
                recent
                    .iter()
                    .filter(|reading| {
                        started_ms.saturating_sub(reading.sampled_at_ms) <= BASELINE_WINDOW_MS
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        self.active = Some(ActiveTrial {
            gpu_index,
            what: what.clone(),
            started_ms,
            duration_ms: duration_s.clamp(5, 3_600) * 1000,
            baseline,
            during: Vec::new(),
            journal,
            journal_path,
        });
        match apply(backend) {
            Ok(()) => {
                let trial = self
                    .active
                    .as_ref()
                    .map(|trial| status(trial, Some(duration_s.clamp(5, 3_600)), None));
                trial.unwrap_or_else(|| refuse("The trial vanished.".to_string()))
            }
            // Whatever part was written goes back at once.
            Err(error) => self.finish(
                backend,
                false,
                &format!("Could not apply ({error}); reverted"),
            ),
        }
    }

    /// Ends the running trial: keeps the settings, or restores them from the journal.
    pub fn finish(&mut self, backend: &mut dyn Backend, keep: bool, reason: &str) -> TrialStatus {
        let Some(trial) = self.active.take() else {
            return TrialStatus {
                gpu_index: 0,
                what: String::new(),
                remaining_s: None,
                baseline: TrialStats::default(),
                during: TrialStats::default(),
                message: Some("No trial is running.".to_string()),
            };
        };
        let message = if keep {
            match std::fs::remove_file(&trial.journal_path) {
                Ok(()) => format!("{reason}: kept {}.", trial.what),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    format!("{reason}: kept {}.", trial.what)
                }
                Err(error) => format!(
                    "Kept {}, but the journal {} could not be removed ({error}); the next start will revert it.",
                    trial.what,
                    trial.journal_path.display()
                ),
            }
        } else {
            match restore_journal(&trial.journal_path, backend, &trial.journal) {
                Ok(report) if report.is_complete() => {
                    let restored: Vec<Setting> = trial
                        .journal
                        .gpus
                        .iter()
                        .flat_map(|entry| entry.restore.clone())
                        .collect();
                    format!("{reason} {}.", describe_all(&restored))
                }
                Ok(report) => format!(
                    "{reason} only in part: {}",
                    report.lines("restored").join(" ")
                ),
                Err(error) => error.to_string(),
            }
        };
        status(&trial, None, Some(message))
    }

    /// Reverts a running trial (the window is closing or the thread is stopping).
    pub fn release(&mut self, backend: &mut dyn Backend) {
        if self.active.is_some() {
            let status = self.finish(backend, false, "gputune is closing: reverted");
            tracing::warn!("{}", status.message.unwrap_or_default());
        }
    }
}

fn status(trial: &ActiveTrial, remaining_s: Option<u64>, message: Option<String>) -> TrialStatus {
    TrialStatus {
        gpu_index: trial.gpu_index,
        what: trial.what.clone(),
        remaining_s,
        baseline: TrialStats::from_samples(&trial.baseline),
        during: TrialStats::from_samples(&trial.during),
        message,
    }
}
