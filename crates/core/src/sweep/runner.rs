//! The sweep itself: a state machine over a [`TuningClient`] that the CLI and the window both
//! drive (one engine, two front ends). It never blocks: the caller hands it the service's
//! events and the job's progress, and calls [`Sweep::tick`] often (every 50 ms or so).
//!
//! All settings are one session of the tuning engine: the first step starts it, each next
//! step is a `SessionApply`, the end (or a stop) ends it and everything is put back. A client
//! that dies leaves the daemon to put the card back; a critical GPU error (Xid) makes the
//! engine put it back at once, the step is marked unstable and the sweep goes on in a new
//! session. A sweep over several cards (one data-parallel job) holds each step on every card
//! in that one session, so every ending puts them all back together; a card lost ends it.

mod steps;

use crate::job::JobClock;
use crate::job::progress::ProgressReading;
use crate::service::client::TuningClient;
use crate::sweep::measure::StepMeasurement;
use gputune_formats::protocol::Event;
use gputune_formats::reports::sweep::Objective;
use gputune_formats::reports::sweep::{SweepEnd, SweepOutcome};
use gputune_formats::reports::sweep_step::SweepStep;
use gputune_formats::reports::sweep_step::{MeasuredBy, StepResult};
use gputune_formats::tuning::{EngineEvent, GpuInfo, SessionId};

/// The shortest step that leaves a second to measure after a warm-up of zero.
const SHORTEST_STEP_S: f64 = 2.0;
/// An hour per setting is more than any job needs.
const LONGEST_STEP_S: f64 = 3_600.0;

/// How long each setting runs, and how much of it is discarded as warm-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepTiming {
    pub step_s: f64,
    pub warmup_s: f64,
    /// How long to wait for the job's first progress line before falling back to the proxy.
    pub wait_for_progress_s: f64,
}

impl SweepTiming {
    pub fn new(
        step_s: f64,
        warmup_s: f64,
        wait_for_progress_s: f64,
    ) -> Result<SweepTiming, String> {
        if !step_s.is_finite() || !(SHORTEST_STEP_S..=LONGEST_STEP_S).contains(&step_s) {
            return Err(format!(
                "--step-s {step_s}: give {SHORTEST_STEP_S} to {LONGEST_STEP_S} seconds per setting (90 is a good start)."
            ));
        }
        if !warmup_s.is_finite() || warmup_s < 0.0 || warmup_s > step_s - 1.0 {
            return Err(format!(
                "--warmup-s {warmup_s}: give 0 up to a second less than --step-s ({step_s} s), so something is measured."
            ));
        }
        if !wait_for_progress_s.is_finite()
            || !(0.0..=LONGEST_STEP_S).contains(&wait_for_progress_s)
        {
            return Err(format!(
                "--wait-s {wait_for_progress_s}: give 0 to {LONGEST_STEP_S} seconds."
            ));
        }
        Ok(SweepTiming {
            step_s,
            warmup_s,
            wait_for_progress_s,
        })
    }

    /// The whole sweep's length for `steps` settings, the wait for progress excluded.
    pub fn total_s(&self, steps: usize) -> f64 {
        self.step_s * steps as f64
    }
}

/// A sweep as a window shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepView {
    /// The first (or only) card swept.
    pub gpu_index: u32,
    /// Every card swept together (one for a sweep of one card).
    pub gpu_indices: Vec<u32>,
    pub plan: Vec<SweepStep>,
    pub results: Vec<StepResult>,
    pub phase: SweepPhase,
    pub timing: SweepTiming,
    /// The running step measured so far.
    pub live: Option<StepResult>,
    pub measured_by: Option<MeasuredBy>,
    /// Where progress is read from, for people ("train.log", "the GPU-side proxy").
    pub progress_from: String,
    pub outcome: Option<SweepOutcome>,
}

/// News for the front end.
#[derive(Debug, Clone, PartialEq)]
pub enum SweepUpdate {
    /// The job printed progress (or the wait ended); measuring starts.
    Measuring {
        by_proxy_unless_progress: bool,
    },
    StepStarted {
        index: usize,
        count: usize,
        label: String,
    },
    StepMeasured(Box<StepResult>),
    /// A sentence worth showing (a refused setting, an Xid, the proxy).
    Note(String),
    Finished(Box<SweepOutcome>),
}

/// Where the sweep stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SweepPhase {
    WaitingForProgress,
    /// Step `index`: `measuring` once its warm-up has passed.
    Step {
        index: usize,
        measuring: bool,
        elapsed_s: f64,
    },
    Finished,
}

enum State {
    WaitingForProgress {
        until_ms: u64,
    },
    Step {
        index: usize,
        started_ms: u64,
    },
    /// The engine ended the session after a critical error; the next step starts anew.
    AfterCriticalError {
        next: usize,
    },
    Finished,
}

/// One card of a sweep: its index, what it is, and its own plan (the same steps, each in %
/// of its own default power limit, with its own base: `base::plan_for_cards`).
#[derive(Debug, Clone, PartialEq)]
pub struct SweepCardPlan {
    pub index: u32,
    pub gpu: GpuInfo,
    pub plan: Vec<SweepStep>,
}

/// A sweep on one GPU, or on several held together.
pub struct Sweep {
    /// Never empty; the first card's plan is the rows every front end shows.
    cards: Vec<SweepCardPlan>,
    plan: Vec<SweepStep>,
    timing: SweepTiming,
    objective: Objective,
    clock: JobClock,
    state: State,
    session: Option<SessionId>,
    measurement: StepMeasurement,
    measured_by: Option<MeasuredBy>,
    results: Vec<StepResult>,
    progress_seen: bool,
    updates: Vec<SweepUpdate>,
    outcome: Option<SweepOutcome>,
    /// The job's process, when the sweep started it (named in each of its sessions).
    job_pid: Option<u32>,
}

impl Sweep {
    /// A sweep of `plan` on GPU `gpu_index`; nothing is written before the job's first
    /// progress line (or the wait's end).
    pub fn new(
        gpu_index: u32,
        gpu: GpuInfo,
        plan: Vec<SweepStep>,
        timing: SweepTiming,
        objective: Objective,
        clock: JobClock,
    ) -> Sweep {
        let card = SweepCardPlan {
            index: gpu_index,
            gpu,
            plan,
        };
        Sweep::build(vec![card], timing, objective, clock)
    }

    /// A sweep of several cards held together, each with its own plan of the same steps;
    /// refused when the plans do not line up (or there is no card).
    pub fn over_cards(
        cards: Vec<SweepCardPlan>,
        timing: SweepTiming,
        objective: Objective,
        clock: JobClock,
    ) -> Result<Sweep, String> {
        let Some(first) = cards.first() else {
            return Err("A sweep needs at least one GPU.".to_string());
        };
        for card in &cards {
            let same = card.plan.len() == first.plan.len()
                && card.plan.iter().zip(&first.plan).all(|(step, first)| {
                    step.power_limit_pct == first.power_limit_pct
                        && step.clock_cap_mhz == first.clock_cap_mhz
                        && step.is_repeat == first.is_repeat
                });
            if !same {
                return Err(format!(
                    "GPU {} cannot be swept step for step with GPU {}: their settings differ.",
                    card.index, first.index
                ));
            }
        }
        Ok(Sweep::build(cards, timing, objective, clock))
    }

    fn build(
        cards: Vec<SweepCardPlan>,
        timing: SweepTiming,
        objective: Objective,
        clock: JobClock,
    ) -> Sweep {
        let until_ms = clock.now_ms() + seconds_ms(timing.wait_for_progress_s);
        let plan = cards
            .first()
            .map(|card| card.plan.clone())
            .unwrap_or_default();
        let count = cards.len();
        Sweep {
            cards,
            plan,
            timing,
            objective,
            clock,
            state: State::WaitingForProgress { until_ms },
            session: None,
            measurement: StepMeasurement::new(0, count),
            measured_by: None,
            results: Vec::new(),
            progress_seen: false,
            updates: Vec::new(),
            outcome: None,
            job_pid: None,
        }
    }

    /// Names the job's process, which the sweep's sessions carry (the CLI starts the job; the
    /// window's sweep follows a log and knows no process).
    pub fn with_job_pid(mut self, pid: u32) -> Sweep {
        self.job_pid = Some(pid);
        self
    }

    pub fn clock(&self) -> JobClock {
        self.clock
    }

    pub fn plan(&self) -> &[SweepStep] {
        &self.plan
    }

    pub fn results(&self) -> &[StepResult] {
        &self.results
    }

    /// The first (or only) card swept.
    pub fn gpu_index(&self) -> u32 {
        self.cards.first().map_or(0, |card| card.index)
    }

    /// Every card swept, in the sweep's order.
    pub fn gpu_indices(&self) -> Vec<u32> {
        self.cards.iter().map(|card| card.index).collect()
    }

    pub fn timing(&self) -> SweepTiming {
        self.timing
    }

    pub fn measured_by(&self) -> Option<&MeasuredBy> {
        self.measured_by.as_ref()
    }

    pub fn outcome(&self) -> Option<&SweepOutcome> {
        self.outcome.as_ref()
    }

    pub fn is_finished(&self) -> bool {
        self.outcome.is_some()
    }

    /// News since the last call.
    pub fn take_updates(&mut self) -> Vec<SweepUpdate> {
        std::mem::take(&mut self.updates)
    }

    pub fn phase(&self) -> SweepPhase {
        match self.state {
            State::WaitingForProgress { .. } | State::AfterCriticalError { .. } => {
                if self.results.is_empty() {
                    SweepPhase::WaitingForProgress
                } else {
                    SweepPhase::Step {
                        index: self.results.len(),
                        measuring: false,
                        elapsed_s: 0.0,
                    }
                }
            }
            State::Step { index, started_ms } => {
                let elapsed_s = self.clock.now_ms().saturating_sub(started_ms) as f64 / 1000.0;
                SweepPhase::Step {
                    index,
                    measuring: elapsed_s >= self.timing.warmup_s,
                    elapsed_s,
                }
            }
            State::Finished => SweepPhase::Finished,
        }
    }

    /// The running step measured so far (after its warm-up), for a live view.
    pub fn live_result(&self) -> Option<StepResult> {
        let State::Step { index, .. } = self.state else {
            return None;
        };
        let now_ms = self.clock.now_ms();
        if now_ms <= self.measurement.start_ms {
            return None;
        }
        let by = self
            .measured_by
            .clone()
            .or_else(|| self.progress_by())
            .unwrap_or(MeasuredBy::Proxy);
        Some(
            self.measurement
                .result(&self.plan[index], now_ms, &by, &self.gpu_indices()),
        )
    }

    /// Everything a window shows of the sweep now.
    pub fn view(&self, progress_from: &str) -> SweepView {
        SweepView {
            gpu_index: self.gpu_index(),
            gpu_indices: self.gpu_indices(),
            plan: self.plan.clone(),
            results: self.results.clone(),
            phase: self.phase(),
            timing: self.timing,
            live: self.live_result(),
            // During the first setting, the unit its progress shows so far.
            measured_by: self.measured_by.clone().or_else(|| self.progress_by()),
            progress_from: progress_from.to_string(),
            outcome: self.outcome.clone(),
        }
    }

    /// Takes a line of the job's progress.
    pub fn on_progress(&mut self, reading: ProgressReading) {
        self.progress_seen = true;
        self.measurement.progress.push(reading);
    }

    /// Takes an event from the service.
    pub fn on_event(&mut self, event: &Event) {
        match event {
            Event::Samples { readings } => {
                let now_ms = self.clock.now_ms();
                for (position, card) in self.cards.iter().enumerate() {
                    if let (Some(Ok(reading)), Some(samples)) = (
                        readings.get(card.index as usize),
                        self.measurement.samples.get_mut(position),
                    ) {
                        samples.push((now_ms, reading.clone()));
                    }
                }
            }
            Event::Engine { event } => {
                if let EngineEvent::SessionEnded { report, .. } = event.as_ref()
                    && self.session == Some(report.session)
                {
                    self.session = None;
                    self.ended_by_engine(report);
                }
            }
        }
    }

    /// Moves the sweep on: starts the first step once progress shows, ends steps whose time
    /// is up, ends the sweep after the last.
    pub fn tick(&mut self, client: &mut TuningClient) {
        let now_ms = self.clock.now_ms();
        match self.state {
            State::WaitingForProgress { until_ms } => {
                if self.progress_seen || now_ms >= until_ms {
                    self.updates.push(SweepUpdate::Measuring {
                        by_proxy_unless_progress: !self.progress_seen,
                    });
                    self.start_step(client, 0, true);
                }
            }
            State::Step { index, started_ms } => {
                if now_ms >= started_ms + seconds_ms(self.timing.step_s) {
                    self.end_step(index, now_ms);
                    self.start_step(client, index + 1, false);
                }
            }
            State::AfterCriticalError { next } => self.start_step(client, next, true),
            State::Finished => {}
        }
    }

    /// Stops early: the card is put back, the steps measured so far are reported.
    pub fn stop(&mut self, client: &mut TuningClient, ended: SweepEnd) {
        if self.outcome.is_some() {
            return;
        }
        if let State::Step { index, .. } = self.state {
            self.updates.push(SweepUpdate::Note(format!(
                "The setting {} was not measured to its end; it is left out.",
                self.plan[index].label
            )));
        }
        self.finish(client, ended);
    }
}

fn seconds_ms(seconds: f64) -> u64 {
    (seconds * 1000.0).round().max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_are_checked() {
        assert!(SweepTiming::new(90.0, 20.0, 120.0).is_ok());
        assert!(SweepTiming::new(1.0, 0.0, 0.0).is_err());
        assert!(SweepTiming::new(10.0, 9.5, 0.0).is_err());
        assert!(SweepTiming::new(f64::INFINITY, 0.0, 0.0).is_err());
        assert!(SweepTiming::new(10.0, -1.0, 0.0).is_err());
        assert!(SweepTiming::new(10.0, 1.0, -1.0).is_err());
        assert_eq!(SweepTiming::new(90.0, 20.0, 0.0).unwrap().total_s(6), 540.0);
    }
}
