//! A stability check of one card, as the CLI and the window both run it: the settings to check
//! held by a session of the tuning engine (so the daemon puts them back if this process dies),
//! one [`CheckRun`] of checked work, the service's readings and critical errors fed to it,
//! and the session ended (everything put back) however the check ends. Never blocks: the
//! caller passes every service event to [`CardCheck::take_event`] and calls
//! [`CardCheck::tick`] often.

use serde::{Deserialize, Serialize};

use super::compute::ComputeDevice;
use super::held::Held;
use super::plan::CheckOptions;
use super::report::{CheckReport, describe_settings};
use super::run::{CheckRun, RunResult, SettingsSeen};
use super::worker::ComputeWorker;
use crate::device::Setting;
use crate::service::client::TuningClient;
use crate::service::protocol::{Event, Request, Response};
use crate::tuning::engine::{GpuChange, GpuInfo, GpuTuning, SessionPurpose, SessionRequest};
use crate::tuning::fan_curve::FanCurve;

/// Where a check stands, for a progress line or the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    options: CheckOptions,
    held: Held,
    run: CheckRun,
    report: Option<CheckReport>,
}

impl CardCheck {
    /// Starts checking `gpu` with `device`: first holds `settings` (and `fan_curve`) in a
    /// session of the engine (none: the card's settings as they are, nothing changed).
    /// `tuning` is the card's tuning state now.
    pub fn start(
        client: &mut TuningClient,
        gpu: &GpuInfo,
        tuning: &GpuTuning,
        settings: &[Setting],
        fan_curve: Option<&FanCurve>,
        options: CheckOptions,
        device: Box<dyn ComputeDevice>,
    ) -> Result<CardCheck, String> {
        let mut in_force = tuning.in_force.clone();
        let mut held = Held::nothing();
        if !settings.is_empty() || fan_curve.is_some() {
            let request = Request::StartSession {
                session: SessionRequest {
                    purpose: SessionPurpose::Stability,
                    changes: if settings.is_empty() {
                        Vec::new()
                    } else {
                        vec![GpuChange {
                            gpu_uuid: gpu.identity.uuid.clone(),
                            settings: settings.to_vec(),
                        }]
                    },
                    fan_curves: fan_curve
                        .map(|curve| {
                            vec![crate::tuning::engine::GpuFanCurve {
                                gpu_uuid: gpu.identity.uuid.clone(),
                                curve: curve.clone(),
                            }]
                        })
                        .unwrap_or_default(),
                    job_pid: None,
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
                Err(error) => {
                    return Err(format!(
                        "The settings to check could not be applied to GPU {}: {error}",
                        gpu.identity.index
                    ));
                }
            }
        }
        let worker = match ComputeWorker::start(device, &gpu.identity.index.to_string()) {
            Ok(worker) => worker,
            Err(message) => {
                held.end(client);
                return Err(message);
            }
        };
        let mut run = CheckRun::start(worker, options, None);
        run.take_settings(SettingsSeen::of(&in_force));
        Ok(CardCheck {
            settings_text: describe_settings(&in_force, gpu.constraints.power_limit_default_mw),
            settings_now: None,
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
        // A session's settings are the check's own (nobody else may change them, and its
        // put-back is not what was checked).
        if self.held.session().is_none() && self.run.result().is_none() {
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
        let settings = match &self.settings_now {
            Some(now) => format!(
                "{now} (changed during the check by another program, from {})",
                self.settings_text
            ),
            None => self.settings_text.clone(),
        };
        self.report = Some(CheckReport::new(
            &self.gpu,
            settings,
            &self.options,
            result,
            self.held.take_put_back(),
        ));
    }
}
