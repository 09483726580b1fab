//! One span of checked work on one card: the rounds of [`super::rounds`] handed to the device's
//! worker one piece at a time, every result counted, the first sign of instability ending it.
//! It never blocks: the caller gives it the card's readings and calls [`CheckRun::tick`] often
//! (every 10-50 ms); a check and each step of a scan are one `CheckRun`. A box check's runs
//! follow one shared schedule instead of their own rounds (`run/in_phase.rs`).

pub mod in_phase;
mod settings_seen;

pub use settings_seen::SettingsSeen;

use std::time::{Duration, Instant};

use super::compute::{CardConditions, ComputeError, VramPattern};
use super::reference::fma_chain_reference;
use super::rounds::{CheckOptions, Part, in_burst, round, round_length_s};
use super::worker::{ComputeWorker, Done, Poll, Work};
use crate::device::XidMeaning;
use gputune_formats::card::{CriticalEvent, Telemetry};
use gputune_formats::reports::stability::{Checked, Ending, Finding, Prepared, RunResult, Tally};
use gputune_formats::reports::stability_watched::Watched;

/// A GEMM batch aims at this long, so a fault is seen within about this much of happening.
const BATCH_S: f64 = 0.1;
/// The most passes in one batch.
const MAX_PASSES: u32 = 10_000;
/// No piece of work may take longer than this many times what it was expected to take...
const DEADLINE_FACTOR: f64 = 20.0;
/// ...nor less than this: the first passes compile and warm up.
const SHORTEST_DEADLINE: Duration = Duration::from_secs(10);
/// Preparing allocates and fills every buffer and runs the reference GEMM.
const PREPARE_DEADLINE: Duration = Duration::from_secs(120);

fn add(total: &mut Checked, batch: &Checked) {
    total.results += batch.results;
    total.wrong += batch.wrong;
    total.flop += batch.flop;
    total.bytes += batch.bytes;
    total.elapsed_s += batch.elapsed_s;
}

enum State {
    Preparing,
    Running {
        part_index: usize,
        part_started: Instant,
        patterns_done: usize,
        fma_done: bool,
    },
    Finished(Box<RunResult>),
}

/// A span of checked work; see the module's documentation.
pub struct CheckRun {
    worker: ComputeWorker,
    options: CheckOptions,
    parts: Vec<Part>,
    state: State,
    started: Option<Instant>,
    rounds_done: u32,
    tally: Tally,
    watched: Watched,
    prepared: Option<Prepared>,
    conditions: CardConditions,
    gemm_pass_s: Option<f64>,
    /// The uncorrectable ECC count at the first reading that had one.
    ecc_uncorrected_first: Option<u64>,
    /// A box check's run: the shared schedule it follows, and its edges.
    in_phase: Option<in_phase::Follow>,
}

impl CheckRun {
    /// Starts preparing the device behind `worker` (which may already be prepared: then
    /// `prepared` is what it said, and the run starts at once).
    pub fn start(
        worker: ComputeWorker,
        options: CheckOptions,
        prepared: Option<Prepared>,
    ) -> CheckRun {
        let parts = round(options.shape, round_length_s(options.duration_s));
        CheckRun::start_parts(worker, options, prepared, parts)
    }

    /// The checked GEMM at full load for the whole `options.duration_s`, nothing else (no FMA
    /// chains, no memory patterns): the ranking's load, the same on every card.
    pub fn start_full_gemm(
        worker: ComputeWorker,
        options: CheckOptions,
        prepared: Option<Prepared>,
    ) -> CheckRun {
        let parts = vec![Part::FullLoad {
            seconds: options.duration_s,
        }];
        CheckRun::start_parts(worker, options, prepared, parts)
    }

    fn start_parts(
        mut worker: ComputeWorker,
        options: CheckOptions,
        prepared: Option<Prepared>,
        parts: Vec<Part>,
    ) -> CheckRun {
        let state = match &prepared {
            Some(_) => running(),
            None => {
                let fma_reference =
                    fma_chain_reference(options.setup.fma_seeds, options.setup.fma_steps);
                worker.send(
                    Work::Prepare {
                        setup: options.setup,
                        fma_reference,
                    },
                    PREPARE_DEADLINE,
                );
                State::Preparing
            }
        };
        let started = prepared.as_ref().map(|_| Instant::now());
        CheckRun {
            worker,
            parts,
            options,
            state,
            started,
            rounds_done: 0,
            tally: Tally::default(),
            watched: Watched::default(),
            prepared,
            conditions: CardConditions::default(),
            gemm_pass_s: None,
            ecc_uncorrected_first: None,
            in_phase: None,
        }
    }

    /// A reading of the card.
    pub fn take_reading(&mut self, reading: &Telemetry) {
        if matches!(self.state, State::Running { .. }) {
            self.watched.take(reading);
            if let Some(ecc) = reading.ecc {
                self.take_ecc_uncorrected(ecc.uncorrected_volatile);
            }
        }
        self.conditions.graphics_clock_mhz = reading
            .sm_clock_mhz
            .or(reading.gpu_clock_mhz)
            .or(self.conditions.graphics_clock_mhz);
        self.conditions.temperature_c = reading.temperature_c.or(self.conditions.temperature_c);
        self.worker.observe(self.conditions);
    }

    /// The uncorrectable ECC errors the card has counted so far (volatile), when it counts them.
    pub fn take_ecc_uncorrected(&mut self, count: u64) {
        if !matches!(self.state, State::Running { .. }) {
            return;
        }
        let first = *self.ecc_uncorrected_first.get_or_insert(count);
        if count > first {
            self.finish(Ending::Unstable {
                finding: Finding::UncorrectedEcc {
                    errors: count - first,
                },
            });
        }
    }

    /// The settings in force: the offsets and lock the simulated device's margins depend on.
    pub fn take_settings(&mut self, settings: SettingsSeen) {
        self.conditions.gpu_clock_offset_mhz = settings.gpu_clock_offset_mhz;
        self.conditions.memory_clock_offset_mhz = settings.memory_clock_offset_mhz;
        self.conditions.locked_max_mhz = settings.locked_max_mhz;
        self.watched.locked_max_mhz = settings.locked_max_mhz;
        // A reading from before a new lock shows a clock the lock no longer allows.
        if let (Some(clock), Some(locked_max)) =
            (self.conditions.graphics_clock_mhz, settings.locked_max_mhz)
        {
            self.conditions.graphics_clock_mhz = Some(clock.min(locked_max));
        }
        self.worker.observe(self.conditions);
    }

    /// The driver reported a critical error on this card.
    pub fn take_critical_event(&mut self, event: CriticalEvent) {
        let meaning = event.meaning().to_string();
        self.finish(Ending::Unstable {
            finding: Finding::Xid {
                xid: event.xid,
                meaning,
            },
        });
    }

    /// Stops it now (what the device is doing finishes on its own).
    pub fn stop(&mut self, reason: &str) {
        self.finish(Ending::Stopped {
            reason: reason.to_string(),
        });
    }

    pub fn result(&self) -> Option<&RunResult> {
        match &self.state {
            State::Finished(result) => Some(result),
            _ => None,
        }
    }

    /// Takes the worker back for another run on the same card (a scan's next step), with what
    /// it prepared. None while it works, or after it hung.
    pub fn into_worker(self) -> Option<(ComputeWorker, Option<Prepared>)> {
        if self.worker.is_busy() {
            return None;
        }
        let hung = matches!(
            &self.state,
            State::Finished(result) if matches!(result.ending, Ending::Unstable { finding: Finding::Hung { .. } })
        );
        (!hung).then_some((self.worker, self.prepared))
    }

    /// Whether the checked work runs (prepared, not yet ended).
    pub fn is_running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    /// Seconds of checked work so far.
    pub fn elapsed_s(&self) -> f64 {
        self.started
            .map_or(0.0, |started| started.elapsed().as_secs_f64())
    }

    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    pub fn watched(&self) -> &Watched {
        &self.watched
    }

    /// What runs now ("preparing", "GEMM pulsed at 40 %").
    pub fn activity(&self) -> String {
        if let (State::Running { .. }, Some(follow)) = (&self.state, &self.in_phase) {
            return follow.activity();
        }
        match &self.state {
            State::Preparing => "preparing".to_string(),
            State::Running { part_index, .. } => self
                .parts
                .get(*part_index)
                .map_or_else(String::new, |part| part.describe()),
            State::Finished(_) => "finished".to_string(),
        }
    }

    /// Moves the run on; returns its result once it has ended.
    pub fn tick(&mut self) -> Option<&RunResult> {
        if !matches!(self.state, State::Finished(_)) {
            self.advance();
        }
        self.result()
    }

    fn advance(&mut self) {
        match self.worker.poll() {
            Poll::Busy { .. } => {}
            Poll::Done(done) => self.take_done(done),
            Poll::Hung { waited } => {
                self.finish(Ending::Unstable {
                    finding: Finding::Hung {
                        waited_s: waited.as_secs_f64(),
                    },
                });
            }
            Poll::Gone => self.finish(Ending::NotRun {
                reason: "The check's worker thread ended unexpectedly.".to_string(),
            }),
            Poll::Idle => {}
        }
        if self.in_phase.is_some() {
            self.hand_out_in_phase();
        } else if matches!(self.state, State::Running { .. }) && !self.worker.is_busy() {
            self.hand_out_work();
        }
    }

    fn take_done(&mut self, done: Done) {
        match done {
            Done::Prepared(Ok(prepared)) => {
                self.prepared = Some(prepared);
                self.started = Some(Instant::now());
                self.state = running();
            }
            Done::Prepared(Err(error)) | Done::Checked(Err(error)) => self.fail(error),
            Done::Checked(Ok(checked)) => {
                if let Some(follow) = &mut self.in_phase {
                    follow.batch_done(self.worker.last_began());
                }
                self.count(checked);
            }
        }
    }

    fn fail(&mut self, error: ComputeError) {
        let ending = match error {
            ComputeError::Fault(message) => Ending::Unstable {
                finding: Finding::Fault { message },
            },
            ComputeError::Unavailable(reason) | ComputeError::OutOfMemory(reason) => {
                Ending::NotRun { reason }
            }
        };
        self.finish(ending);
    }

    fn count(&mut self, checked: Checked) {
        let State::Running {
            part_index,
            ref mut patterns_done,
            ref mut fma_done,
            ..
        } = self.state
        else {
            return;
        };
        let part = self.parts.get(part_index).copied();
        let (total, name) = match part {
            Some(Part::Fma { .. }) => {
                *fma_done = true;
                (&mut self.tally.fma, "FMA-chain")
            }
            Some(Part::Vram) => {
                *patterns_done += 1;
                self.tally.vram_patterns += 1;
                (&mut self.tally.vram, "VRAM")
            }
            _ => {
                if checked.results > 0 && self.options.setup.gemm_results() > 0 {
                    let passes = checked.results / self.options.setup.gemm_results();
                    if passes > 0 {
                        self.gemm_pass_s = Some(checked.elapsed_s / passes as f64);
                    }
                }
                (&mut self.tally.gemm, "GEMM")
            }
        };
        add(total, &checked);
        if checked.wrong > 0 {
            let finding = Finding::WrongResults {
                part: name.to_string(),
                wrong: checked.wrong,
                clock_mhz: self.conditions.graphics_clock_mhz,
            };
            self.finish(Ending::Unstable { finding });
        }
    }

    fn hand_out_work(&mut self) {
        loop {
            let State::Running {
                part_index,
                part_started,
                patterns_done,
                fma_done,
            } = self.state
            else {
                return;
            };
            // Once every part has run, the check ends on time, even mid-round.
            if self.rounds_done > 0 && self.elapsed_s() >= self.options.duration_s {
                self.finish(Ending::Completed);
                return;
            }
            let Some(part) = self.parts.get(part_index).copied() else {
                self.end_round();
                if !matches!(self.state, State::Running { .. }) {
                    return;
                }
                continue;
            };
            let part_elapsed_s = part_started.elapsed().as_secs_f64();
            let work = match part {
                Part::FullLoad { seconds } if part_elapsed_s < seconds => Some(Work::Gemm {
                    passes: self.passes_for(seconds - part_elapsed_s),
                    not_before: None,
                }),
                Part::Pulsed { duty, seconds } if part_elapsed_s < seconds => {
                    if !in_burst(duty, part_elapsed_s) {
                        return; // idle between bursts
                    }
                    let burst_left_s = duty - (part_elapsed_s % 1.0);
                    Some(Work::Gemm {
                        passes: self.passes_for(burst_left_s),
                        not_before: None,
                    })
                }
                Part::Fma { seconds } if part_elapsed_s < seconds || !fma_done => Some(Work::Fma),
                Part::Vram => {
                    let tested = self
                        .prepared
                        .as_ref()
                        .is_some_and(|prepared| prepared.vram_tested_bytes > 0);
                    let patterns = VramPattern::for_pass(self.rounds_done);
                    match patterns.get(patterns_done) {
                        Some(pattern) if tested => Some(Work::Vram { pattern: *pattern }),
                        _ => None,
                    }
                }
                _ => None,
            };
            match work {
                Some(work) => {
                    let deadline = self.deadline_for(&work);
                    self.worker.send(work, deadline);
                    return;
                }
                None => self.next_part(),
            }
        }
    }

    fn next_part(&mut self) {
        if let State::Running {
            ref mut part_index,
            ref mut part_started,
            ref mut patterns_done,
            ref mut fma_done,
            ..
        } = self.state
        {
            *part_index += 1;
            *part_started = Instant::now();
            *patterns_done = 0;
            *fma_done = false;
        }
    }

    fn end_round(&mut self) {
        self.rounds_done += 1;
        if self.elapsed_s() >= self.options.duration_s {
            self.finish(Ending::Completed);
        } else {
            self.state = running();
        }
    }

    /// GEMM passes to fill about `left_s` (at most a batch's length).
    fn passes_for(&self, left_s: f64) -> u32 {
        match self.gemm_pass_s {
            Some(pass_s) if pass_s > 0.0 => {
                let passes = (left_s.clamp(0.0, BATCH_S) / pass_s).floor();
                (passes as u32).clamp(1, MAX_PASSES)
            }
            _ => 1,
        }
    }

    fn deadline_for(&self, work: &Work) -> Duration {
        let expected_s = match work {
            Work::Gemm { passes, .. } => self.gemm_pass_s.unwrap_or(0.0) * f64::from(*passes),
            _ => 0.0,
        };
        Duration::from_secs_f64(expected_s * DEADLINE_FACTOR).max(SHORTEST_DEADLINE)
    }

    fn finish(&mut self, ending: Ending) {
        if matches!(self.state, State::Finished(_)) {
            return;
        }
        self.state = State::Finished(Box::new(RunResult {
            ending,
            ran_s: self.elapsed_s(),
            tally: self.tally,
            watched: self.watched.clone(),
            prepared: self.prepared.clone(),
        }));
    }
}

fn running() -> State {
    let now = Instant::now();
    State::Running {
        part_index: 0,
        part_started: now,
        patterns_done: 0,
        fma_done: false,
    }
}
