//! The undervolt scanner (`gputune scan`, the Tune tab's "Find my undervolt"): at a clock
//! lock, raise the graphics clock offset a step at a time from zero with a short check at each,
//! stop at the first instability, step back a margin, and confirm with a long check. A higher
//! offset at a locked clock reaches that clock at a lower voltage: less power for the same work.
//!
//! The whole scan is one session of the engine (a new one if an Xid made the engine end it):
//! however it ends, the card is put back. The session starts with stock clock offsets and
//! locks (a user's own offset is never measured as "stock"), and a stock step at them gives
//! what the result saves. Never blocks, like [`super::check::CardCheck`].

mod options;
mod outcome;

use gputune_formats::reports::scan::ScanOptions;
use gputune_formats::reports::scan::{ScanOutcome, ScanStep};
pub use options::scan_options;
pub use outcome::{lock_caveat, save_scan_profile};

use super::busy::OtherWork;
use super::compute::ComputeDevice;
use super::held::Held;
use super::put_back::stock_clocks;
use super::report::{check_report, describe_settings};
use super::rounds::CheckOptions;
use super::run::{CheckRun, SettingsSeen};
use super::worker::ComputeWorker;
use crate::service::client::TuningClient;
use gputune_formats::card::Setting;
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::reports::stability::LoadShape;
use gputune_formats::reports::stability::Prepared;
use gputune_formats::reports::stability::{Ending, RunResult};
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};
use gputune_formats::tuning::{GpuChange, GpuInfo, GpuTuning, SessionPurpose, SessionRequest};
use gputune_formats::{profile::Verdict, reports::stability::CheckReport};

/// How many times a failed confirmation steps back once more before giving up.
const MAX_CONFIRMATIONS: u32 = 3;

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
    /// What the card runs at the stock step: stock clock offsets and locks.
    start_in_force: SettingsInForce,
    /// The settings that bring the card to stock (a new session after an Xid starts with them).
    stock_settings: Vec<Setting>,
    /// The scan's session holds its clock lock (from the first step on).
    locked: bool,
    held: Held,
    run: Option<CheckRun>,
    prepared: Option<Prepared>,
    phase: Phase,
    stock: Option<ScanStep>,
    steps: Vec<ScanStep>,
    first_unstable_mhz: Option<i32>,
    confirmation: Option<CheckReport>,
    started: std::time::Instant,
    outcome: Option<ScanOutcome>,
}

impl Scan {
    /// Starts a scan of `gpu`: refuses a busy card first (another check or scan, other
    /// programs computing, unless forced), then starts the scan's session with stock clock
    /// offsets and locks (so a missing right to change settings is found before anything is
    /// measured, and the stock step measures stock, not the user's own offset), and the stock
    /// step at them.
    pub fn start(
        client: &mut TuningClient,
        gpu: &GpuInfo,
        tuning: &GpuTuning,
        options: ScanOptions,
        device: Box<dyn ComputeDevice>,
        other_work: &OtherWork,
    ) -> Result<Scan, String> {
        let index = gpu.identity.index;
        other_work.refusal(index, tuning, "scan")?;
        let stock = stock_clocks(gpu, &tuning.in_force, true);
        let mut held = Held::nothing();
        let mut in_force = tuning.in_force.clone();
        match client.request(Request::StartSession {
            session: SessionRequest {
                purpose: SessionPurpose::Scan,
                changes: vec![GpuChange {
                    gpu_uuid: gpu.identity.uuid.clone(),
                    settings: stock.clone(),
                }],
                fan_curves: Vec::new(),
                job_pid: None,
                job: None,
            },
        }) {
            Ok(Response::SessionStarted(started)) => {
                if let Some(applied) = started.applied.first() {
                    in_force = applied.in_force.clone();
                }
                held.started(started.session);
            }
            Ok(other) => return Err(format!("The service answered {other:?} to the scan.")),
            Err(error) => {
                return Err(format!(
                    "The scan could not set GPU {index} to stock clocks and offsets ({}): {error} The scan did not start; nothing was measured.",
                    crate::tuning::describe_all(&stock)
                ));
            }
        }
        let worker = match ComputeWorker::start(device, &index.to_string()) {
            Ok(worker) => worker,
            Err(message) => {
                held.end(client);
                return Err(message);
            }
        };
        let mut run = CheckRun::start(
            worker,
            step_options(options.step_s, LoadShape::Pulsed),
            None,
        );
        run.take_settings(SettingsSeen::of(&in_force));
        Ok(Scan {
            gpu: gpu.clone(),
            options,
            start_in_force: in_force,
            stock_settings: stock,
            locked: false,
            held,
            run: Some(run),
            prepared: None,
            phase: Phase::Stock,
            stock: None,
            steps: Vec::new(),
            first_unstable_mhz: None,
            confirmation: None,
            started: std::time::Instant::now(),
            outcome: None,
        })
    }

    /// Takes one event of the service (the card's news; an Xid ends the scan's session, and
    /// the next setting starts a new one).
    pub fn take_event(&mut self, event: &Event) {
        if let Some(run) = self.run.as_mut() {
            self.held.feed(run, self.gpu.identity.index, event);
        }
    }

    /// Stops the scan now and puts the card back.
    pub fn stop(&mut self, client: &mut TuningClient, reason: &str) {
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
            gputune_formats::units::duration_s(elapsed),
            gputune_formats::units::duration_s(of),
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
        // Stopped: Ctrl-C, the window, the service gone, or the engine ending the session
        // without an Xid.
        if let Ending::Stopped { reason } = &result.ending {
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
                        "The card is not stable even at stock clock offsets and locks; nothing to scan (check its cooling and power, or have it looked at)."
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
                    let summary = outcome::confirmed_summary(
                        &self.options,
                        offset_mhz,
                        self.first_unstable_mhz,
                        result.ran_s,
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

    /// The lock and `offset_mhz` held by the scan's session (started when there is none: an
    /// Xid ended the last one, and everything it changed went back).
    fn hold(&mut self, client: &mut TuningClient, offset_mhz: i32) -> Result<(), String> {
        let offset = Setting::GpuClockOffset { offset_mhz };
        let lock = Setting::LockGpuClocks {
            min_mhz: self.options.lock_mhz,
            max_mhz: self.options.lock_mhz,
        };
        let request = match self.held.session() {
            Some(session) => Request::SessionApply {
                session,
                changes: vec![GpuChange {
                    gpu_uuid: self.gpu.identity.uuid.clone(),
                    settings: if self.locked {
                        vec![offset]
                    } else {
                        vec![lock, offset]
                    },
                }],
            },
            None => {
                let mut settings: Vec<Setting> = self
                    .stock_settings
                    .iter()
                    .filter(|setting| {
                        !matches!(
                            setting,
                            Setting::GpuClockOffset { .. } | Setting::ResetGpuClocks
                        )
                    })
                    .copied()
                    .collect();
                settings.extend([lock, offset]);
                Request::StartSession {
                    session: SessionRequest {
                        purpose: SessionPurpose::Scan,
                        changes: vec![GpuChange {
                            gpu_uuid: self.gpu.identity.uuid.clone(),
                            settings,
                        }],
                        fan_curves: Vec::new(),
                        job_pid: None,
                        job: None,
                    },
                }
            }
        };
        match client.request(request) {
            Ok(Response::SessionStarted(started)) => {
                self.held.started(started.session);
                self.locked = true;
                Ok(())
            }
            Ok(Response::Applied { .. }) => {
                self.locked = true;
                Ok(())
            }
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
        in_force.gpu_clock_lock = ClockLockInForce::Locked {
            min_mhz: self.options.lock_mhz,
            max_mhz: self.options.lock_mhz,
        };
        check_report(
            &self.gpu,
            describe_settings(&in_force, self.gpu.constraints.power_limit_default_mw),
            &step_options(self.options.confirm_s, LoadShape::Both),
            result,
            (Vec::new(), true),
        )
    }

    fn finish_stable(&mut self, client: &mut TuningClient, offset_mhz: i32, summary: String) {
        self.finish(client, summary);
        if let Some(outcome) = self.outcome.as_mut() {
            outcome.confirmed(offset_mhz);
        }
    }

    /// Ends the scan: the session ended (the card put back) and the outcome written.
    fn finish(&mut self, client: &mut TuningClient, summary: String) {
        // A run left (its worker busy or hung) is dropped: the device finishes on its own.
        self.run = None;
        self.held.end(client);
        let (put_back, put_back_complete) = self.held.take_put_back();
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
            put_back,
            put_back_complete,
            ran_s: self.started.elapsed().as_secs_f64(),
        });
    }
}

/// A scan step's or confirmation's options (`seconds` was checked by [`ScanOptions::new`]).
fn step_options(seconds: f64, shape: LoadShape) -> CheckOptions {
    CheckOptions::clamped(seconds, shape)
}
