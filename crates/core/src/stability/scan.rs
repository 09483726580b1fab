//! The undervolt scanner (`gputune scan`, the Tune tab's "Find my undervolt"): at a clock
//! lock, raise the graphics clock offset a step at a time from zero with a short check at each,
//! stop at the first instability, step back a margin, and confirm with a long check. A higher
//! offset at a locked clock reaches that clock at a lower voltage: less power for the same work.
//!
//! The whole scan is one session of the engine (a new one if an Xid made the engine end it):
//! however it ends, the card is put back. A stock step first, at the card's settings as they
//! are, gives what the result saves. Never blocks, like [`super::check::CardCheck`].

use serde::{Deserialize, Serialize};

use super::check::end_session;
use super::compute::{ComputeDevice, Prepared};
use super::plan::{CheckOptions, LONGEST_CHECK_S, LoadShape, SHORTEST_CHECK_S};
use super::report::{CheckReport, Verdict, describe_settings};
use super::run::{CheckRun, Ending, RunResult, SettingsSeen};
use super::worker::ComputeWorker;
use crate::device::Setting;
use crate::profiles::profile::Profile;
use crate::service::client::TuningClient;
use crate::service::protocol::{Event, Request, Response};
use crate::tuning::engine::{
    EngineEvent, GpuChange, GpuInfo, GpuTuning, SessionId, SessionPurpose, SessionRequest,
    report_lines,
};
use crate::tuning::in_force::{ClockLock, SettingsInForce};

/// The scanner's options, checked against the card before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScanOptions {
    pub lock_mhz: u32,
    pub step_mhz: i32,
    pub step_s: f64,
    pub margin_steps: u32,
    pub confirm_s: f64,
    /// The highest offset tried: the card's.
    pub max_offset_mhz: i32,
}

/// How many times a failed confirmation steps back once more before giving up.
const MAX_CONFIRMATIONS: u32 = 3;

impl ScanOptions {
    /// Checks what the user asked for against `gpu` (`lock_mhz` None: the rated boost clock).
    pub fn new(
        gpu: &GpuInfo,
        lock_mhz: Option<u32>,
        step_mhz: i32,
        step_s: f64,
        margin_steps: u32,
        confirm_s: f64,
    ) -> Result<ScanOptions, String> {
        let index = gpu.identity.index;
        let Some(offsets) = gpu.constraints.adjustable_gpu_clock_offset_range() else {
            return Err(format!(
                "GPU {index} ({}) takes no graphics clock offset, so there is no undervolt to find (datacenter cards and drivers before 555 have none).",
                gpu.identity.name
            ));
        };
        let Some(range) = gpu.constraints.gpu_clock_range else {
            return Err(format!(
                "GPU {index} does not say which clocks it can lock, so the scanner cannot lock one."
            ));
        };
        let lock_mhz = match lock_mhz.or(gpu.constraints.boost_clock_mhz) {
            Some(lock) => lock,
            None => {
                return Err(format!(
                    "GPU {index} does not report its boost clock: give the clock to lock with --lock-mhz ({}-{} MHz).",
                    range.min_mhz, range.max_mhz
                ));
            }
        };
        if !(range.min_mhz..=range.max_mhz).contains(&lock_mhz) {
            return Err(format!(
                "--lock-mhz {lock_mhz}: GPU {index} locks clocks from {} to {} MHz.",
                range.min_mhz, range.max_mhz
            ));
        }
        if !(1..=200).contains(&step_mhz) {
            return Err(format!(
                "--step-mhz {step_mhz}: give 1 to 200 MHz (15 is one boost bin)."
            ));
        }
        for (name, seconds) in [("--step-s", step_s), ("--confirm-s", confirm_s)] {
            if !seconds.is_finite() || !(SHORTEST_CHECK_S..=LONGEST_CHECK_S).contains(&seconds) {
                return Err(format!(
                    "{name} {seconds}: give {SHORTEST_CHECK_S} to {LONGEST_CHECK_S} seconds."
                ));
            }
        }
        if margin_steps > 10 {
            return Err(format!(
                "--margin-steps {margin_steps}: give 0 to 10 steps."
            ));
        }
        Ok(ScanOptions {
            lock_mhz,
            step_mhz,
            step_s,
            margin_steps,
            confirm_s,
            max_offset_mhz: offsets.max_mhz.max(0),
        })
    }

    /// Steps at most (the stock step and the confirmation aside).
    pub fn most_steps(&self) -> u32 {
        (self.max_offset_mhz / self.step_mhz) as u32 + 1
    }
}

/// One measured setting of the scan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanStep {
    /// None for the stock step (the card's settings as the scan found them).
    pub offset_mhz: Option<i32>,
    pub verdict: Verdict,
    /// What went wrong, when it did.
    pub finding: Option<String>,
    pub clock_min_mhz: Option<u32>,
    pub clock_max_mhz: Option<u32>,
    pub power_mean_w: Option<f64>,
    pub temperature_peak_c: Option<u32>,
    pub wrong: u64,
    pub results: u64,
    pub gemm_tflops: Option<f64>,
    /// Energy per unit of GEMM work, joules per TFLOP.
    pub joules_per_tflop: Option<f64>,
    pub ran_s: f64,
}

impl ScanStep {
    fn of(offset_mhz: Option<i32>, result: &RunResult) -> ScanStep {
        let watched = &result.watched;
        let tally = &result.tally;
        // The readings span less than the run: their average power times the run's length.
        let energy_j = watched
            .counter_power_w()
            .or(watched.power_mean_w)
            .map(|power| power * result.ran_s);
        let tflop = tally.gemm.flop / 1e12;
        ScanStep {
            offset_mhz,
            verdict: Verdict::of(&result.ending),
            finding: match &result.ending {
                Ending::Unstable { finding } => Some(finding.describe()),
                Ending::Stopped { reason } | Ending::NotRun { reason } => Some(reason.clone()),
                Ending::Completed => None,
            },
            clock_min_mhz: watched.clock_min_mhz,
            clock_max_mhz: watched.clock_max_mhz,
            power_mean_w: watched.power_mean_w,
            temperature_peak_c: watched.temperature_peak_c,
            wrong: tally.wrong(),
            results: tally.results(),
            gemm_tflops: tally.gemm_tflops(),
            joules_per_tflop: energy_j
                .filter(|_| tflop > 0.0)
                .map(|energy| energy / tflop),
            ran_s: result.ran_s,
        }
    }

    /// "+45 MHz", "stock".
    pub fn label(&self) -> String {
        self.offset_mhz
            .map_or_else(|| "stock".to_string(), |offset| format!("{offset:+} MHz"))
    }
}

/// How a scan ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanOutcome {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub gpu_name: String,
    pub options: ScanOptions,
    pub stock: Option<ScanStep>,
    pub steps: Vec<ScanStep>,
    /// The first offset found unstable, if any was.
    pub first_unstable_mhz: Option<i32>,
    /// The offset the long check confirmed stable.
    pub stable_offset_mhz: Option<i32>,
    /// The long check of the confirmed offset (or of the last one tried).
    pub confirmation: Option<CheckReport>,
    /// One sentence: what was found, or why there is no result.
    pub summary: String,
    /// What it saves against stock at the confirmed offset.
    pub savings: Option<String>,
    pub put_back: Vec<String>,
    pub put_back_complete: bool,
    pub ran_s: f64,
}

impl ScanOutcome {
    /// The confirmed offset at the scan's lock as a profile named `name` (the card's other
    /// settings as they were, `previous`'s notes kept), with its confirmation as its check;
    /// None when no offset was confirmed. The CLI and the window save through here.
    pub fn profile(
        &self,
        name: &str,
        gpu: &GpuInfo,
        tuning: &GpuTuning,
        previous: Option<&Profile>,
    ) -> Option<Profile> {
        let offset_mhz = self.stable_offset_mhz?;
        let report = self.confirmation.as_ref()?;
        let mut in_force = tuning.in_force.clone();
        in_force.gpu_clock_offset_mhz = Some(offset_mhz);
        in_force.gpu_clock_lock = ClockLock::Locked {
            min_mhz: self.options.lock_mhz,
            max_mhz: self.options.lock_mhz,
        };
        let mut profile = Profile::from_in_force(
            name,
            &gpu.identity,
            &gpu.constraints,
            &in_force,
            tuning.fan_curve.as_ref(),
            previous,
        );
        profile.last_check = Some(report.record());
        if profile.notes.is_empty() {
            profile.notes = format!("Found by gputune scan: {}", self.summary);
        }
        Some(profile)
    }
}

enum Phase {
    Stock,
    Stepping { offset_mhz: i32 },
    Confirming { offset_mhz: i32, tries: u32 },
    Done,
}

/// A scan; see the module's documentation.
pub struct Scan {
    gpu: GpuInfo,
    options: ScanOptions,
    start_in_force: SettingsInForce,
    session: Option<SessionId>,
    run: Option<CheckRun>,
    prepared: Option<Prepared>,
    phase: Phase,
    stock: Option<ScanStep>,
    steps: Vec<ScanStep>,
    first_unstable_mhz: Option<i32>,
    confirmation: Option<CheckReport>,
    put_back: Vec<String>,
    put_back_complete: bool,
    started: std::time::Instant,
    outcome: Option<ScanOutcome>,
    /// Set when the current run must end the scan (Ctrl-C, the service gone).
    stop_reason: Option<String>,
}

impl Scan {
    pub fn start(
        gpu: &GpuInfo,
        tuning: &GpuTuning,
        options: ScanOptions,
        device: Box<dyn ComputeDevice>,
    ) -> Result<Scan, String> {
        let worker = ComputeWorker::start(device, &gpu.identity.index.to_string())?;
        let mut run = CheckRun::start(
            worker,
            step_options(options.step_s, LoadShape::Pulsed),
            None,
        );
        run.take_settings(SettingsSeen::of(&tuning.in_force));
        Ok(Scan {
            gpu: gpu.clone(),
            options,
            start_in_force: tuning.in_force.clone(),
            session: None,
            run: Some(run),
            prepared: None,
            phase: Phase::Stock,
            stock: None,
            steps: Vec::new(),
            first_unstable_mhz: None,
            confirmation: None,
            put_back: Vec::new(),
            put_back_complete: true,
            started: std::time::Instant::now(),
            outcome: None,
            stop_reason: None,
        })
    }

    pub fn take_event(&mut self, event: &Event) {
        let index = self.gpu.identity.index;
        let Some(run) = self.run.as_mut() else {
            return;
        };
        match event {
            Event::Samples { readings } => {
                if let Some(Ok(reading)) = readings.get(index as usize) {
                    run.take_reading(reading);
                }
            }
            Event::Engine { event } => match event.as_ref() {
                EngineEvent::Tuning { tuning } if tuning.gpu_index == index => {
                    run.take_settings(SettingsSeen::of(&tuning.in_force));
                }
                EngineEvent::Critical { critical } if critical.gpu_index == index => {
                    run.take_critical_event(*critical);
                }
                EngineEvent::SessionEnded { report, .. }
                    if Some(report.session) == self.session =>
                {
                    // An Xid: the engine put everything back; the next setting needs a new session.
                    self.session = None;
                    self.put_back_complete &= report.is_complete();
                    self.put_back.extend(report_lines(report));
                    match report.critical_event {
                        Some(critical) => run.take_critical_event(critical),
                        None => {
                            run.stop(&format!("the tuning engine ended it: {}", report.message));
                            self.stop_reason = Some(report.message.clone());
                        }
                    }
                }
                _ => {}
            },
        }
    }

    /// Stops the scan now and puts the card back.
    pub fn stop(&mut self, client: &mut TuningClient, reason: &str) {
        self.stop_reason = Some(reason.to_string());
        if let Some(run) = self.run.as_mut() {
            run.stop(reason);
        }
        self.tick(client);
    }

    pub fn outcome(&self) -> Option<&ScanOutcome> {
        self.outcome.as_ref()
    }

    /// "step +45 MHz: 12 s of 60 s", for a progress line.
    pub fn progress(&self) -> String {
        let what = match self.phase {
            Phase::Stock => "stock settings".to_string(),
            Phase::Stepping { offset_mhz } => format!("step {offset_mhz:+} MHz"),
            Phase::Confirming { offset_mhz, .. } => format!("confirming {offset_mhz:+} MHz"),
            Phase::Done => "done".to_string(),
        };
        let (elapsed, of) = match (&self.run, &self.phase) {
            (Some(run), Phase::Confirming { .. }) => (run.elapsed_s(), self.options.confirm_s),
            (Some(run), _) => (run.elapsed_s(), self.options.step_s),
            (None, _) => (0.0, 0.0),
        };
        format!(
            "{what}: {} of {} ({} wrong so far)",
            crate::units::duration_s(elapsed),
            crate::units::duration_s(of),
            self.run.as_ref().map_or(0, |run| run.tally().wrong())
        )
    }

    pub fn steps(&self) -> &[ScanStep] {
        &self.steps
    }

    /// The stock step, once measured.
    pub fn stock(&self) -> Option<&ScanStep> {
        self.stock.as_ref()
    }

    /// Moves the scan on; its outcome once it has ended and the card is back.
    pub fn tick(&mut self, client: &mut TuningClient) -> Option<&ScanOutcome> {
        if self.outcome.is_some() {
            return self.outcome.as_ref();
        }
        let finished = match self.run.as_mut() {
            Some(run) => run.tick().cloned(),
            None => None,
        };
        if let Some(result) = finished {
            self.after_run(client, result);
        }
        self.outcome.as_ref()
    }

    fn after_run(&mut self, client: &mut TuningClient, result: RunResult) {
        let run = self.run.take();
        if let Some(prepared) = &result.prepared {
            self.prepared = Some(prepared.clone());
        }
        if let Some(reason) = self.stop_reason.clone() {
            self.record(&result);
            return self.finish(client, format!("The scan ended early: {reason}."));
        }
        if let Ending::NotRun { reason } = &result.ending {
            return self.finish(client, format!("The scan could not run: {reason}"));
        }
        let worker = run.and_then(CheckRun::into_worker);
        let next = match self.phase {
            Phase::Stock => {
                self.stock = Some(ScanStep::of(None, &result));
                if result.ending != Ending::Completed {
                    return self.finish(
                        client,
                        "The card is not stable even at its own settings; nothing to scan."
                            .to_string(),
                    );
                }
                Some((0, false))
            }
            Phase::Stepping { offset_mhz } => {
                self.steps.push(ScanStep::of(Some(offset_mhz), &result));
                if result.ending == Ending::Completed {
                    let next_offset = offset_mhz + self.options.step_mhz;
                    if next_offset <= self.options.max_offset_mhz {
                        Some((next_offset, false))
                    } else {
                        // Stable up to the card's highest offset: that one, no margin needed.
                        Some((offset_mhz, true))
                    }
                } else {
                    self.first_unstable_mhz = Some(offset_mhz);
                    let last_stable = offset_mhz - self.options.step_mhz;
                    if last_stable < 0 {
                        return self.finish(
                            client,
                            format!(
                                "Unstable even without an offset at the {} MHz lock: no undervolt here (try a lower --lock-mhz).",
                                self.options.lock_mhz
                            ),
                        );
                    }
                    let margin = self.options.step_mhz * self.options.margin_steps as i32;
                    Some(((last_stable - margin).max(0), true))
                }
            }
            Phase::Confirming { offset_mhz, tries } => {
                let report = self.report_of(offset_mhz, result.clone());
                let stable = report.verdict == Verdict::Stable;
                self.confirmation = Some(report);
                if stable {
                    let summary = format!(
                        "The largest stable offset at the {} MHz lock is {offset_mhz:+} MHz (confirmed for {}).",
                        self.options.lock_mhz,
                        crate::units::duration_s(result.ran_s)
                    );
                    return self.finish_stable(client, offset_mhz, summary);
                }
                let lower = offset_mhz - self.options.step_mhz;
                if tries + 1 >= MAX_CONFIRMATIONS || lower < 0 {
                    return self.finish(
                        client,
                        format!("The long check failed at {offset_mhz:+} MHz too; no offset was confirmed stable."),
                    );
                }
                self.phase = Phase::Confirming {
                    offset_mhz: lower,
                    tries: tries + 1,
                };
                return self.begin(
                    client,
                    worker,
                    lower,
                    self.options.confirm_s,
                    LoadShape::Both,
                );
            }
            Phase::Done => None,
        };
        if let Some((offset_mhz, confirm)) = next {
            if confirm {
                self.phase = Phase::Confirming {
                    offset_mhz,
                    tries: 0,
                };
                self.begin(
                    client,
                    worker,
                    offset_mhz,
                    self.options.confirm_s,
                    LoadShape::Both,
                );
            } else {
                self.phase = Phase::Stepping { offset_mhz };
                self.begin(
                    client,
                    worker,
                    offset_mhz,
                    self.options.step_s,
                    LoadShape::Pulsed,
                );
            }
        }
    }

    fn record(&mut self, result: &RunResult) {
        match self.phase {
            Phase::Stepping { offset_mhz } => {
                self.steps.push(ScanStep::of(Some(offset_mhz), result))
            }
            Phase::Stock => self.stock = Some(ScanStep::of(None, result)),
            Phase::Confirming { offset_mhz, .. } => {
                self.confirmation = Some(self.report_of(offset_mhz, result.clone()));
            }
            Phase::Done => {}
        }
    }

    /// Puts `offset_mhz` (at the lock) on the card and starts a run of `seconds`.
    fn begin(
        &mut self,
        client: &mut TuningClient,
        worker: Option<(ComputeWorker, Option<Prepared>)>,
        offset_mhz: i32,
        seconds: f64,
        shape: LoadShape,
    ) {
        let Some((worker, prepared)) = worker else {
            return self.finish(
                client,
                "The check's worker hung on the card; the scan ended (the GPU may need a reset: nvidia-smi -r).".to_string(),
            );
        };
        if let Err(message) = self.hold(client, offset_mhz) {
            return self.finish(client, message);
        }
        let mut run = CheckRun::start(
            worker,
            step_options(seconds, shape),
            prepared.or(self.prepared.clone()),
        );
        run.take_settings(SettingsSeen {
            gpu_clock_offset_mhz: Some(offset_mhz),
            memory_clock_offset_mhz: self.start_in_force.memory_clock_offset_mhz,
            locked_max_mhz: Some(self.options.lock_mhz),
        });
        self.run = Some(run);
    }

    /// The lock and `offset_mhz` held by the scan's session (started when there is none).
    fn hold(&mut self, client: &mut TuningClient, offset_mhz: i32) -> Result<(), String> {
        let offset = Setting::GpuClockOffset { offset_mhz };
        let request = match self.session {
            Some(session) => Request::SessionApply {
                session,
                changes: vec![GpuChange {
                    gpu_uuid: self.gpu.identity.uuid.clone(),
                    settings: vec![offset],
                }],
            },
            None => Request::StartSession {
                session: SessionRequest {
                    purpose: SessionPurpose::Scan,
                    changes: vec![GpuChange {
                        gpu_uuid: self.gpu.identity.uuid.clone(),
                        settings: vec![
                            Setting::LockGpuClocks {
                                min_mhz: self.options.lock_mhz,
                                max_mhz: self.options.lock_mhz,
                            },
                            offset,
                        ],
                    }],
                    fan_curves: Vec::new(),
                    job_pid: None,
                },
            },
        };
        match client.request(request) {
            Ok(Response::SessionStarted(started)) => {
                self.session = Some(started.session);
                Ok(())
            }
            Ok(Response::Applied { .. }) => Ok(()),
            Ok(other) => Err(format!("The service answered {other:?} to a scan step.")),
            Err(error) => Err(format!(
                "The offset {offset_mhz:+} MHz at the {} MHz lock could not be applied: {error}",
                self.options.lock_mhz
            )),
        }
    }

    fn report_of(&self, offset_mhz: i32, result: RunResult) -> CheckReport {
        let mut in_force = self.start_in_force.clone();
        in_force.gpu_clock_offset_mhz = Some(offset_mhz);
        in_force.gpu_clock_lock = ClockLock::Locked {
            min_mhz: self.options.lock_mhz,
            max_mhz: self.options.lock_mhz,
        };
        CheckReport {
            gpu_index: self.gpu.identity.index,
            gpu_uuid: self.gpu.identity.uuid.clone(),
            gpu_name: self.gpu.identity.name.clone(),
            settings: describe_settings(&in_force, self.gpu.constraints.power_limit_default_mw),
            pattern: LoadShape::Both,
            duration_asked_s: self.options.confirm_s,
            verdict: Verdict::of(&result.ending),
            gemm_tflops: result.tally.gemm_tflops(),
            vram_gib_per_s: result.tally.vram_gib_per_s(),
            reached_power_limit: result.watched.reached_power_limit(),
            result,
            put_back: Vec::new(),
            put_back_complete: true,
            ended_at_ms: crate::clock::wall_clock_ms(),
            driver_version: self.gpu.identity.driver_version.clone(),
            gputune_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    fn finish_stable(&mut self, client: &mut TuningClient, offset_mhz: i32, summary: String) {
        self.finish(client, summary);
        if let Some(outcome) = self.outcome.as_mut() {
            outcome.stable_offset_mhz = Some(offset_mhz);
            let at_offset = outcome
                .steps
                .iter()
                .find(|step| step.offset_mhz == Some(offset_mhz));
            let at_zero = outcome.steps.iter().find(|step| step.offset_mhz == Some(0));
            outcome.savings = match (&outcome.stock, at_offset) {
                (Some(stock), Some(step)) => {
                    let mut text = savings("Against stock", stock, step);
                    if let Some(zero) = at_zero.filter(|_| offset_mhz != 0) {
                        text.push(' ');
                        text.push_str(&savings(
                            &format!(
                                "Against +0 MHz at the {} MHz lock",
                                outcome.options.lock_mhz
                            ),
                            zero,
                            step,
                        ));
                    }
                    Some(text)
                }
                _ => None,
            };
        }
    }

    /// Ends the scan: the session ended (the card put back) and the outcome written.
    fn finish(&mut self, client: &mut TuningClient, summary: String) {
        if let Some(run) = self.run.as_mut() {
            run.stop("the scan ended");
        }
        self.run = None;
        if let Some(session) = self.session.take() {
            match end_session(client, session) {
                Ok(report) => {
                    self.put_back_complete &= report.is_complete();
                    self.put_back.extend(report_lines(&report));
                }
                Err(message) => self.put_back.push(message),
            }
        }
        self.phase = Phase::Done;
        self.outcome = Some(ScanOutcome {
            gpu_index: self.gpu.identity.index,
            gpu_uuid: self.gpu.identity.uuid.clone(),
            gpu_name: self.gpu.identity.name.clone(),
            options: self.options,
            stock: self.stock.clone(),
            steps: self.steps.clone(),
            first_unstable_mhz: self.first_unstable_mhz,
            stable_offset_mhz: None,
            confirmation: self.confirmation.clone(),
            summary,
            savings: None,
            put_back: std::mem::take(&mut self.put_back),
            put_back_complete: self.put_back_complete,
            ran_s: self.started.elapsed().as_secs_f64(),
        });
    }
}

/// A scan step's or confirmation's options (`seconds` was checked by [`ScanOptions::new`]).
fn step_options(seconds: f64, shape: LoadShape) -> CheckOptions {
    CheckOptions::clamped(seconds, shape)
}

/// "Against stock: power 398 to 341 W (-14 %), 2.91 to 2.45 J per TFLOP of GEMM work (-16 %),
/// peak clock 2610 to 2520 MHz." (Words, not arrows: the window's font has no arrow.)
pub fn savings(against: &str, stock: &ScanStep, step: &ScanStep) -> String {
    let mut parts = Vec::new();
    let change = |before: f64, after: f64| {
        if before > 0.0 {
            format!(" ({:+.0} %)", (after / before - 1.0) * 100.0)
        } else {
            String::new()
        }
    };
    if let (Some(before), Some(after)) = (stock.power_mean_w, step.power_mean_w) {
        parts.push(format!(
            "power {before:.0} to {after:.0} W{}",
            change(before, after)
        ));
    }
    if let (Some(before), Some(after)) = (stock.joules_per_tflop, step.joules_per_tflop) {
        parts.push(format!(
            "{before:.2} to {after:.2} J per TFLOP of GEMM work{}",
            change(before, after)
        ));
    }
    if let (Some(before), Some(after)) = (stock.clock_max_mhz, step.clock_max_mhz)
        && before != after
    {
        parts.push(format!("peak clock {before} to {after} MHz"));
    }
    if parts.is_empty() {
        format!("{against}: no readings to compare.")
    } else {
        format!("{against}: {}.", parts.join(", "))
    }
}
