//! The box check (`gputune stability --together`, the window's "Check the whole box"): the
//! checked GEMM load on every listed card at once, in phase (one schedule from one clock, so
//! every card's pulses begin and end at the same instants: the worst case for the power supply),
//! each card's results checked as a single-card check checks them (a [`CheckRun`] per card, fed
//! the service's readings and critical errors). One engine session holds the cards (purpose
//! `box_check`: the engine journals the check, so a machine that goes down is said at its next
//! start) and puts them back however the check ends. When a step fails with the machine still
//! up, the step runs again at lower clock caps until it passes (`together/recommend.rs`).
//!
//! Never blocks: the caller passes every service event to [`BoxCheck::take_event`] and calls
//! [`BoxCheck::tick`] often (every few ms: a 20 ms pulse's next edge is handed out there);
//! [`run_box_check`] is that loop, for the CLI and the window's link thread alike.

mod drive;
mod hold;
mod plan;
pub mod recommend;
mod report;
pub mod schedule;
pub mod steps;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use drive::{TICK, run_box_check};
use hold::{box_options, hold};
use schedule::{BOX_STEPS, InPhase, LEAD, TimedStep};
use steps::StepTally;

use super::busy::OtherWork;
use super::check::CheckProgress;
use super::compute::ComputeDevice;
use super::held::Held;
use super::report::describe_settings;
use super::rounds::CheckOptions;
use super::run::in_phase::EdgeBegun;
use super::run::{CheckRun, SettingsSeen};
use super::worker::ComputeWorker;
use crate::service::client::TuningClient;
use gputune_formats::card::Telemetry;
use gputune_formats::protocol::Event;
use gputune_formats::reports::box_check::{BoxCheckReport, BoxFailure, BoxStep};
use gputune_formats::reports::stability::Ending;
use gputune_formats::tuning::{GpuInfo, GpuTuning};

/// After the first failure the other cards run this much longer: a machine going down shows as
/// every card failing within it (each sees it at its next batch, within 0.1 s), one bad card as
/// that card alone.
const GRACE: Duration = Duration::from_millis(500);
/// The shortest rerun of a failing step.
const SHORTEST_RERUN_S: f64 = 1.0;

/// What a box check checks.
#[derive(Debug, Clone)]
pub struct BoxPlan {
    /// The cards, each with its tuning state now and what else runs on it.
    pub gpus: Vec<GpuInfo>,
    pub tunings: Vec<GpuTuning>,
    pub other_work: Vec<OtherWork>,
    /// The whole check, shared equally by its steps.
    pub duration_s: f64,
    /// A clock cap held on every card (a recommendation being proven).
    pub clock_cap_mhz: Option<u32>,
    /// After a failure with the machine up, rerun the failing step at lower caps.
    pub find_cap: bool,
}

/// Where a box check stands.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxProgress {
    pub elapsed_s: f64,
    pub duration_s: f64,
    /// "preparing", "10 ms pulses every 20 ms (50 % duty)", "finding a clock cap: … at 2655 MHz".
    pub stage: String,
    pub step_index: Option<usize>,
    pub steps: usize,
    /// The box's power at the last reading (the cards' sum).
    pub box_power_w: Option<f64>,
    pub cards: Vec<CheckProgress>,
}

struct BoxCard {
    gpu: GpuInfo,
    settings_text: String,
    run: CheckRun,
}

/// The first failure: which card, where, when it was seen.
struct FirstFailure {
    card: usize,
    step_index: Option<usize>,
    at_s: f64,
    finding: String,
    seen: Instant,
}

/// A rerun of the failing step at a cap.
struct Rerun {
    step: TimedStep,
    cap_mhz: u32,
    done: u32,
    tried: Vec<String>,
}

/// The box check; see the module's documentation.
pub struct BoxCheck {
    cards: Vec<BoxCard>,
    held: Held,
    journaled: bool,
    options: CheckOptions,
    clock_cap_mhz: Option<u32>,
    find_cap: bool,
    schedule: Option<Arc<InPhase>>,
    tallies: Vec<StepTally>,
    failure: Option<FirstFailure>,
    box_power_w: Option<f64>,
    /// The main check's report, kept while reruns find a cap.
    report: Option<BoxCheckReport>,
    rerun: Option<Rerun>,
    /// The engine ended the check's session without an Xid (a card lost): when, and why.
    session_ended: Option<(Instant, String)>,
    done: bool,
}

impl BoxCheck {
    /// Starts checking every card of `plan` with `devices` (one each, in the same order): a busy
    /// card refuses the whole check; the cards are held by one engine session (a clock cap when
    /// the plan has one), which journals the check.
    pub fn start(
        client: &mut TuningClient,
        plan: &BoxPlan,
        devices: Vec<Box<dyn ComputeDevice>>,
    ) -> Result<BoxCheck, String> {
        if plan.gpus.is_empty() || plan.gpus.len() != devices.len() {
            return Err(
                "A box check needs a device for each of its cards; it did not start.".to_string(),
            );
        }
        for ((gpu, tuning), other) in plan.gpus.iter().zip(&plan.tunings).zip(&plan.other_work) {
            other.refusal(gpu.identity.index, tuning, "box check")?;
        }
        let options = box_options(plan.duration_s);
        let mut held = Held::nothing();
        let journaled = hold(client, &mut held, &plan.gpus, plan.clock_cap_mhz)?;
        let mut cards = Vec::new();
        for ((gpu, tuning), device) in plan.gpus.iter().zip(&plan.tunings).zip(devices) {
            let index = gpu.identity.index;
            let worker = match ComputeWorker::start(device, &index.to_string()) {
                Ok(worker) => worker,
                Err(message) => {
                    held.end(client);
                    return Err(message);
                }
            };
            let mut run = CheckRun::start_in_phase(worker, options, None);
            let mut seen = SettingsSeen::of(&tuning.in_force);
            seen.locked_max_mhz = plan.clock_cap_mhz.or(seen.locked_max_mhz);
            run.take_settings(seen);
            let mut settings_text =
                describe_settings(&tuning.in_force, gpu.constraints.power_limit_default_mw);
            if let Some(cap) = plan.clock_cap_mhz {
                settings_text = format!("{settings_text}, capped at {cap} MHz");
            }
            cards.push(BoxCard {
                gpu: gpu.clone(),
                settings_text,
                run,
            });
        }
        Ok(BoxCheck {
            cards,
            held,
            journaled,
            options,
            clock_cap_mhz: plan.clock_cap_mhz,
            find_cap: plan.find_cap,
            schedule: None,
            tallies: Vec::new(),
            failure: None,
            box_power_w: None,
            report: None,
            rerun: None,
            session_ended: None,
            done: false,
        })
    }

    /// Takes one event of the service: the cards' readings (and the box's power), settings and
    /// critical errors, and the engine ending the check's session.
    pub fn take_event(&mut self, event: &Event) {
        if let Event::Samples { readings } = event {
            let mut box_readings: Vec<Option<&Telemetry>> = Vec::new();
            for card in &mut self.cards {
                let reading = readings
                    .get(card.gpu.identity.index as usize)
                    .and_then(|reading| reading.as_ref().ok());
                if let Some(reading) = reading {
                    card.run.take_reading(reading);
                }
                // A card the driver lost (fallen off the bus) failed the check.
                if let Some(Err(error)) = readings.get(card.gpu.identity.index as usize)
                    && error.is_fatal()
                {
                    card.run.lost(&error.to_string());
                }
                box_readings.push(reading);
            }
            self.take_box_readings(&box_readings);
            return;
        }
        if let Some((critical, message)) = self.held.ended_by_engine(event) {
            // An Xid is its card's finding. Without one (a card lost), the others stop after the
            // grace, while the readings may still show which cards are gone.
            if let Some(critical) = critical
                && let Some(card) = self
                    .cards
                    .iter_mut()
                    .find(|card| card.gpu.identity.index == critical.gpu_index)
            {
                card.run.take_critical_event(critical);
            }
            self.session_ended = Some((
                Instant::now(),
                format!("the tuning engine ended the box check: {message}"),
            ));
            return;
        }
        for card in &mut self.cards {
            let index = card.gpu.identity.index;
            self.held.feed(&mut card.run, index, event);
        }
    }

    fn take_box_readings(&mut self, readings: &[Option<&Telemetry>]) {
        let sum: Option<f64> = readings
            .iter()
            .map(|reading| reading.and_then(|reading| reading.power_draw_mw))
            .try_fold(0.0, |sum, mw| mw.map(|mw| sum + f64::from(mw) / 1000.0));
        self.box_power_w = sum.or(self.box_power_w);
        let Some(schedule) = &self.schedule else {
            return;
        };
        if let Some(step) = schedule.step_at(Instant::now())
            && let Some(tally) = self.tallies.get_mut(step)
        {
            tally.take(readings);
        }
    }

    /// Moves the check on; returns its report once it has ended (and the cards are back).
    pub fn tick(&mut self, client: &mut TuningClient) -> Option<&BoxCheckReport> {
        if self.done {
            return self.report.as_ref();
        }
        let now = Instant::now();
        for card in &mut self.cards {
            card.run.tick();
        }
        if self.schedule.is_none() {
            if self.cards.iter().all(|card| card.run.is_ready()) {
                self.begin_schedule(now);
            } else if let Some(index) = self
                .cards
                .iter()
                .position(|card| card.run.result().is_some())
            {
                let gpu = self.cards[index].gpu.identity.index;
                self.stop_all(&format!(
                    "GPU {gpu} could not start its part of the box check"
                ));
            }
        }
        self.watch_failures(now);
        // A stopped card's last batch may still be on it: its worker is taken back after.
        if self.cards.iter().all(|card| card.run.result().is_some())
            && self.cards.iter_mut().all(|card| card.run.settled())
        {
            self.conclude(client);
        }
        if self.done {
            self.report.as_ref()
        } else {
            None
        }
    }

    /// Stops the check now (Ctrl-C, the window's Stop) and puts the cards back.
    pub fn stop(&mut self, client: &mut TuningClient, reason: &str) {
        self.find_cap = false;
        self.stop_all(reason);
        self.tick(client);
    }

    pub fn report(&self) -> Option<&BoxCheckReport> {
        self.done.then_some(self.report.as_ref()).flatten()
    }

    /// The edges each card began its bursts at (for measuring how well they line up).
    pub fn edges(&self) -> Vec<&[EdgeBegun]> {
        self.cards.iter().map(|card| card.run.edges()).collect()
    }

    pub fn progress(&self) -> BoxProgress {
        let now = Instant::now();
        let step_index = self
            .schedule
            .as_ref()
            .and_then(|schedule| schedule.step_at(now));
        let step = step_index
            .and_then(|index| self.schedule.as_ref()?.steps().get(index))
            .map(|timed| timed.step);
        let stage = match (&self.rerun, step) {
            (Some(rerun), _) => format!(
                "finding a clock cap: {} again at {} MHz",
                rerun.step.step.describe(),
                rerun.cap_mhz
            ),
            (None, Some(step)) => step.describe(),
            (None, None) if self.schedule.is_none() => "preparing every card".to_string(),
            (None, None) => "ending".to_string(),
        };
        BoxProgress {
            elapsed_s: self
                .schedule
                .as_ref()
                .map_or(0.0, |schedule| schedule.seconds_at(now).max(0.0)),
            duration_s: self
                .schedule
                .as_ref()
                .map_or(self.options.duration_s, |s| s.total_s()),
            stage,
            step_index,
            steps: self
                .schedule
                .as_ref()
                .map_or(BOX_STEPS.len(), |s| s.steps().len()),
            box_power_w: self.box_power_w,
            cards: self
                .cards
                .iter()
                .map(|card| CheckProgress {
                    gpu_index: card.gpu.identity.index,
                    elapsed_s: card.run.elapsed_s(),
                    duration_s: self.options.duration_s,
                    activity: card.run.activity(),
                    results: card.run.tally().results(),
                    wrong: card.run.tally().wrong(),
                    readings: card.run.watched().summary(),
                })
                .collect(),
        }
    }

    fn begin_schedule(&mut self, now: Instant) {
        let origin = now + LEAD;
        let schedule = Arc::new(match &self.rerun {
            Some(rerun) => InPhase::of_steps(origin, vec![rerun.step]),
            None => InPhase::new(origin, &BOX_STEPS, self.options.duration_s),
        });
        self.tallies = schedule
            .steps()
            .iter()
            .map(|timed| StepTally::new(*timed, self.cards.len()))
            .collect();
        for card in &mut self.cards {
            card.run.follow(Arc::clone(&schedule));
        }
        self.schedule = Some(schedule);
    }

    /// The first card found unstable; after the grace, the others are stopped.
    fn watch_failures(&mut self, now: Instant) {
        if self.failure.is_none()
            && let Some((card, finding)) =
                self.cards.iter().enumerate().find_map(|(index, card)| {
                    match &card.run.result()?.ending {
                        Ending::Unstable { finding } => Some((index, finding.describe())),
                        _ => None,
                    }
                })
        {
            let schedule = self.schedule.as_ref();
            self.failure = Some(FirstFailure {
                card,
                step_index: schedule.and_then(|schedule| schedule.step_at(now)),
                at_s: schedule.map_or(0.0, |schedule| schedule.seconds_at(now).max(0.0)),
                finding,
                seen: now,
            });
        }
        if let Some((ended, reason)) = self.session_ended.clone()
            && now.duration_since(ended) >= GRACE
        {
            self.stop_all(&reason);
        }
        if let Some(failure) = &self.failure
            && now.duration_since(failure.seen) >= GRACE
        {
            let gpu = self.cards[failure.card].gpu.identity.index;
            self.stop_all(&format!("GPU {gpu} failed first"));
        }
    }

    fn stop_all(&mut self, reason: &str) {
        for card in &mut self.cards {
            card.run.stop(reason);
        }
    }

    fn step_of(&self, step_index: Option<usize>) -> Option<BoxStep> {
        let schedule = self.schedule.as_ref()?;
        Some(schedule.steps().get(step_index?)?.step)
    }

    fn first_failure(&self) -> Option<BoxFailure> {
        let failure = self.failure.as_ref()?;
        let card = &self.cards[failure.card];
        let all_cards_lost = self.cards.len() > 1
            && self.cards.iter().all(|card| {
                matches!(
                    card.run.result().map(|result| &result.ending),
                    Some(Ending::Unstable { .. })
                )
            });
        Some(BoxFailure {
            gpu_index: card.gpu.identity.index,
            gpu_uuid: card.gpu.identity.uuid.clone(),
            step: self.step_of(failure.step_index),
            at_s: failure.at_s,
            finding: failure.finding.clone(),
            all_cards_lost,
        })
    }
}
