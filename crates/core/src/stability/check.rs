//! A stability check of one card, as the CLI and the window both run it: the settings to check
//! held by a session of the tuning engine (so the daemon puts them back if this process dies),
//! one [`CheckRun`] of checked work, the service's readings and critical errors fed to it,
//! and the session ended (everything put back) however the check ends. Never blocks: the
//! caller passes every service event to [`CardCheck::take_event`] and calls
//! [`CardCheck::tick`] often.

use super::busy::{OtherWork, describe_processes};
use super::compute::ComputeDevice;
use super::held::Held;
use super::put_back::stock_clocks;
use super::report::{check_report, describe_settings};
use super::rounds::CheckOptions;
use super::run::{CheckRun, SettingsSeen};
use super::worker::ComputeWorker;
use crate::service::client::TuningClient;
use gputune_formats::card::{GpuProcess, Setting};
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::reports::stability::CheckReport;
use gputune_formats::reports::stability::{Ending, Finding, RunResult};
use gputune_formats::tuning::SettingsInForce;
use gputune_formats::tuning::{
    GpuChange, GpuInfo, GpuTuning, SessionPurpose, SessionRequest, TuneErrorKind,
};

/// Where a check stands, for a progress line or the window.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckProgress {
    pub gpu_index: u32,
    pub elapsed_s: f64,
    pub duration_s: f64,
    /// What runs now ("GEMM pulsed at 40 %").
    pub activity: String,
    pub results: u64,
    pub wrong: u64,
    /// "2415–2745 MHz, 71 °C peak, …".
    pub readings: String,
}

/// One card's check; see the module's documentation.
pub struct CardCheck {
    gpu: GpuInfo,
    settings_text: String,
    /// Without a session another program may change the card's settings meanwhile: what it
    /// runs now, when that differs from what it ran at the start.
    settings_now: Option<String>,
    /// The other programs it runs beside (forced), for the verdict.
    beside: Option<String>,
    /// The check holds settings of its own (a profile's): the engine puts them back.
    holds_settings: bool,
    /// What the card runs, as the engine last said.
    in_force_now: SettingsInForce,
    options: CheckOptions,
    held: Held,
    run: CheckRun,
    report: Option<CheckReport>,
}

impl CardCheck {
    /// Starts checking `gpu` with `device`: refuses a busy card first (another check or scan,
    /// other programs computing, unless forced), then holds `setup`'s settings (and fan curve)
    /// in a session of the engine; with none, a session that holds nothing, so every client
    /// sees the check among the card's holders. `tuning` is the card's tuning state now.
    pub fn start(
        client: &mut TuningClient,
        gpu: &GpuInfo,
        tuning: &GpuTuning,
        setup: &CheckSetup<'_>,
        options: CheckOptions,
        device: Box<dyn ComputeDevice>,
    ) -> Result<CardCheck, String> {
        let index = gpu.identity.index;
        let beside = setup.other_work.refusal(index, tuning, "check")?;
        let settings = setup.settings;
        let holds_settings = !settings.is_empty() || setup.fan_curve.is_some();
        let mut in_force = tuning.in_force.clone();
        let mut held = Held::nothing();
        let request = Request::StartSession {
            session: SessionRequest {
                purpose: SessionPurpose::Stability,
                changes: vec![GpuChange {
                    gpu_uuid: gpu.identity.uuid.clone(),
                    settings: settings.to_vec(),
                }],
                fan_curves: setup
                    .fan_curve
                    .map(|curve| {
                        vec![gputune_formats::tuning::GpuFanCurve {
                            gpu_uuid: gpu.identity.uuid.clone(),
                            curve: curve.clone(),
                        }]
                    })
                    .unwrap_or_default(),
                job_pid: None,
                job: None,
            },
        };
        match client.request(request) {
            Ok(Response::SessionStarted(started)) => {
                if let Some(applied) = started.applied.first() {
                    in_force = applied.in_force.clone();
                }
                held.started(started.session);
            }
            Ok(other) => {
                return Err(format!(
                    "The service answered {other:?} to the check's settings."
                ));
            }
            // A check that changes nothing needs no right to change settings: it goes on
            // without a session (other clients do not see it).
            Err(error)
                if !holds_settings
                    && error
                        .refusal()
                        .is_some_and(|refusal| refusal.kind == TuneErrorKind::NotAllowed) => {}
            Err(error) => {
                return Err(format!(
                    "The settings to check could not be applied to GPU {index}: {error}"
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
        let mut run = CheckRun::start(worker, options, None);
        run.take_settings(SettingsSeen::of(&in_force));
        let beside = (!beside.is_empty()).then(|| {
            let beside: Vec<&GpuProcess> = beside.iter().collect();
            format!(
                ", beside other programs computing on the card (forced: {})",
                describe_processes(&beside)
            )
        });
        Ok(CardCheck {
            settings_text: describe_settings(&in_force, gpu.constraints.power_limit_default_mw),
            beside,
            settings_now: None,
            holds_settings,
            in_force_now: in_force,
            gpu: gpu.clone(),
            options,
            held,
            run,
            report: None,
        })
    }

    pub fn gpu_index(&self) -> u32 {
        self.gpu.identity.index
    }

    /// Takes one event of the service: this card's readings, settings and critical errors,
    /// and the engine ending this check's session.
    pub fn take_event(&mut self, event: &Event) {
        let index = self.gpu_index();
        let Some(tuning) = self.held.feed(&mut self.run, index, event) else {
            return;
        };
        if self.run.result().is_none() {
            self.in_force_now = tuning.in_force.clone();
        }
        // Settings the check holds are its own (nobody else may change them, and their
        // put-back is not what was checked).
        if !self.holds_settings && self.run.result().is_none() {
            let now = describe_settings(
                &tuning.in_force,
                self.gpu.constraints.power_limit_default_mw,
            );
            self.settings_now = (now != self.settings_text).then_some(now);
        }
    }

    /// Moves the check on; returns its report once it has ended (and its settings are back).
    pub fn tick(&mut self, client: &mut TuningClient) -> Option<&CheckReport> {
        if self.report.is_none()
            && let Some(result) = self.run.tick().cloned()
        {
            self.conclude(client, result);
        }
        self.report.as_ref()
    }

    /// Stops the check now (Ctrl-C, the window's Stop) and puts its settings back.
    pub fn stop(&mut self, client: &mut TuningClient, reason: &str) {
        self.run.stop(reason);
        self.tick(client);
    }

    pub fn report(&self) -> Option<&CheckReport> {
        self.report.as_ref()
    }

    pub fn progress(&self) -> CheckProgress {
        CheckProgress {
            gpu_index: self.gpu_index(),
            elapsed_s: self.run.elapsed_s(),
            duration_s: self.options.duration_s,
            activity: self.run.activity(),
            results: self.run.tally().results(),
            wrong: self.run.tally().wrong(),
            readings: self.run.watched().summary(),
        }
    }

    fn conclude(&mut self, client: &mut TuningClient, result: RunResult) {
        self.held.end(client);
        let (mut put_back, complete) = self.held.take_put_back();
        let mut complete = complete;
        if !self.holds_settings
            && let Ending::Unstable {
                finding: Finding::Fault { .. },
            } = &result.ending
            && let Some((line, done)) = self.put_back_after_fault(client)
        {
            put_back.push(line);
            complete &= done;
        }
        let mut settings = match &self.settings_now {
            Some(now) => format!(
                "{now} (changed during the check by another program, from {})",
                self.settings_text
            ),
            None => self.settings_text.clone(),
        };
        if let Some(beside) = &self.beside {
            settings.push_str(beside);
        }
        self.report = Some(check_report(
            &self.gpu,
            settings,
            &self.options,
            result,
            (put_back, complete),
        ));
    }

    /// A CUDA fault at the card's own clock offset or lock most likely means that tuning
    /// failed: the offsets and locks go back to stock through the engine (the fans stay as
    /// they are). The sentence to say, and whether it worked; `None` when the card ran stock
    /// clocks already.
    fn put_back_after_fault(&mut self, client: &mut TuningClient) -> Option<(String, bool)> {
        let settings = stock_clocks(&self.gpu, &self.in_force_now, false);
        if settings.is_empty() {
            return None;
        }
        let index = self.gpu_index();
        let at = describe_settings(
            &self.in_force_now,
            self.gpu.constraints.power_limit_default_mw,
        );
        let request = Request::Apply {
            changes: vec![GpuChange {
                gpu_uuid: self.gpu.identity.uuid.clone(),
                settings: settings.clone(),
            }],
        };
        Some(match client.request(request) {
            Ok(Response::Applied { .. }) => (
                format!(
                    "A CUDA fault at the card's own settings ({at}) most likely means they failed: GPU {index}'s clock offsets and locks were put back to stock ({}); the fans were left as they are.",
                    crate::tuning::describe_all(&settings)
                ),
                true,
            ),
            Ok(other) => (
                format!(
                    "GPU {index}'s clock offsets and locks could not be put back after a CUDA fault (the service answered {other:?}): `gputune stability --put-back --gpu {index}`."
                ),
                false,
            ),
            Err(error) => (
                format!(
                    "GPU {index}'s clock offsets and locks could not be put back after a CUDA fault at {at} ({error}): `gputune stability --put-back --gpu {index}`."
                ),
                false,
            ),
        })
    }
}

/// What a check holds and what it may run beside.
#[derive(Debug, Clone, Copy)]
pub struct CheckSetup<'a> {
    /// Settings to check, held while it runs (none: the card's as they are).
    pub settings: &'a [Setting],
    pub fan_curve: Option<&'a FanCurve>,
    pub other_work: &'a OtherWork,
}
