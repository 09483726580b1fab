//! The device-owner thread's side of tuning: applies settings (every one through
//! `device::gate`), follows fan curves, and hands the fans back to the driver when it stops.

use crate::device::gate::{ValidatedSetting, validate};
use crate::device::{Backend, Constraints, DeviceError, Setting, Telemetry};
use crate::tuning::fan_curve::FanCurve;
use crate::tuning::gui_trial::{GuiTrials, TrialStatus};
use crate::units::watts_exact;

/// What the UI asks the device-owner thread to change.
#[derive(Debug, Clone, PartialEq)]
pub enum TuneCommand {
    /// Write these settings to one GPU, all or nothing at validation, in order.
    Apply {
        gpu_index: u32,
        settings: Vec<Setting>,
    },
    /// Follow this curve on every fan of one GPU; `None` hands the fans back to the driver.
    SetFanCurve {
        gpu_index: u32,
        curve: Option<FanCurve>,
    },
    /// Try settings for a while, then revert unless kept (see `tuning::gui_trial`).
    StartTrial {
        gpu_index: u32,
        settings: Vec<Setting>,
        duration_s: u64,
    },
    KeepTrial,
    RevertTrial,
}

/// What happened to an `Apply`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplyOutcome {
    pub gpu_index: u32,
    /// Everything that was asked for.
    pub requested: Vec<Setting>,
    /// The settings the card accepted, in order.
    pub applied: Vec<Setting>,
    /// Why the rest was not written: a refused value (nothing written) or a driver error
    /// (what came before it was written, what came after was not).
    pub error: Option<String>,
    /// The limit the card enforces after the writes, read back.
    pub enforced_power_limit_mw: Option<u32>,
    /// The driver refused for lack of administrator rights (the UI offers `pkexec`).
    pub permission_denied: bool,
}

impl ApplyOutcome {
    /// One sentence for the user.
    pub fn summary(&self) -> String {
        let applied: Vec<String> = self.applied.iter().map(Setting::describe).collect();
        let enforced = self
            .enforced_power_limit_mw
            .map(|mw| format!(" The card enforces {}.", watts_exact(mw)))
            .unwrap_or_default();
        match (&self.error, applied.is_empty()) {
            (None, _) => format!("Applied {}.{enforced}", applied.join(", ")),
            (Some(error), true) => format!("Nothing was changed. {error}"),
            (Some(error), false) => format!(
                "Applied {} before an error; the rest was not applied. {error}{enforced}",
                applied.join(", ")
            ),
        }
    }
}

/// Tuning state the device-owner thread keeps per GPU.
pub struct Controller {
    trials: GuiTrials,
    constraints: Vec<Constraints>,
    fan_curves: Vec<Option<FanCurve>>,
    /// The last speed written per GPU by a curve, to write only on change.
    fan_targets: Vec<Option<u32>>,
}

impl Controller {
    pub fn new(constraints: Vec<Constraints>) -> Controller {
        let count = constraints.len();
        Controller {
            trials: GuiTrials::default(),
            constraints,
            fan_curves: vec![None; count],
            fan_targets: vec![None; count],
        }
    }

    fn constraints(&self, gpu_index: u32) -> Result<&Constraints, String> {
        self.constraints
            .get(gpu_index as usize)
            .ok_or_else(|| format!("There is no GPU {gpu_index}."))
    }

    /// Validates every setting first (nothing is written if one is refused), then writes them in
    /// order and reads back the enforced power limit.
    pub fn apply(
        &mut self,
        backend: &mut dyn Backend,
        gpu_index: u32,
        settings: &[Setting],
    ) -> ApplyOutcome {
        let mut outcome = ApplyOutcome {
            gpu_index,
            requested: settings.to_vec(),
            applied: Vec::new(),
            error: None,
            enforced_power_limit_mw: None,
            permission_denied: false,
        };
        let validated: Result<Vec<ValidatedSetting>, String> = match self.constraints(gpu_index) {
            Ok(constraints) => settings
                .iter()
                .map(|setting| validate(constraints, *setting).map_err(|error| error.to_string()))
                .collect(),
            Err(error) => Err(error),
        };
        let validated = match validated {
            Ok(validated) => validated,
            Err(error) => {
                outcome.error = Some(error);
                return outcome;
            }
        };
        for setting in &validated {
            match backend.apply(gpu_index, setting) {
                Ok(()) => outcome.applied.push(*setting.setting()),
                Err(error) => {
                    outcome.permission_denied = matches!(error, DeviceError::NoPermission { .. });
                    outcome.error = Some(error.to_string());
                    break;
                }
            }
        }
        outcome.enforced_power_limit_mw = backend
            .telemetry(gpu_index)
            .ok()
            .and_then(|reading| reading.power_limit_mw);
        outcome
    }

    /// Starts or stops following a fan curve on one GPU.
    pub fn set_fan_curve(
        &mut self,
        backend: &mut dyn Backend,
        gpu_index: u32,
        curve: Option<FanCurve>,
    ) -> Result<(), String> {
        let constraints = self.constraints(gpu_index)?.clone();
        if constraints.fan_count == 0 || constraints.fan_speed_range.is_none() {
            return Err("This GPU has no fans to control.".to_string());
        }
        let index = gpu_index as usize;
        match curve {
            Some(curve) => {
                if let Some(slot) = self.fan_curves.get_mut(index) {
                    *slot = Some(curve);
                }
                if let Some(target) = self.fan_targets.get_mut(index) {
                    *target = None;
                }
                Ok(())
            }
            None => {
                if let Some(slot) = self.fan_curves.get_mut(index) {
                    *slot = None;
                }
                if let Some(target) = self.fan_targets.get_mut(index) {
                    *target = None;
                }
                self.fans_automatic(backend, gpu_index, &constraints)
                    .map_err(|error| error.to_string())
            }
        }
    }

    fn fans_automatic(
        &self,
        backend: &mut dyn Backend,
        gpu_index: u32,
        constraints: &Constraints,
    ) -> Result<(), DeviceError> {
        for fan_index in 0..constraints.fan_count {
            if let Ok(setting) = validate(constraints, Setting::FanAutomatic { fan_index }) {
                backend.apply(gpu_index, &setting)?;
            }
        }
        Ok(())
    }

    /// After each sample: every GPU with a curve gets the speed its temperature asks for.
    /// Returns the errors, per GPU, of writes that failed.
    pub fn drive_fans(
        &mut self,
        backend: &mut dyn Backend,
        samples: &[Result<Telemetry, DeviceError>],
    ) -> Vec<(u32, String)> {
        let mut errors = Vec::new();
        for (index, sample) in samples.iter().enumerate() {
            let (Some(Some(curve)), Some(constraints)) =
                (self.fan_curves.get(index), self.constraints.get(index))
            else {
                continue;
            };
            let Some(range) = constraints.fan_speed_range else {
                continue;
            };
            // No temperature: run the fans at full speed rather than guess.
            let temperature_c = match sample {
                Ok(reading) => reading.temperature_c.map_or(f64::INFINITY, f64::from),
                Err(_) => continue,
            };
            let previous = self.fan_targets.get(index).copied().flatten();
            let target = curve.target_pct(temperature_c, previous, range);
            if previous == Some(target) {
                continue;
            }
            let gpu_index = index as u32;
            let mut failed = None;
            for fan_index in 0..constraints.fan_count {
                let setting = Setting::FanSpeed {
                    fan_index,
                    speed_pct: target,
                };
                let result = validate(constraints, setting)
                    .map_err(|error| error.to_string())
                    .and_then(|setting| {
                        backend
                            .apply(gpu_index, &setting)
                            .map_err(|error| error.to_string())
                    });
                if let Err(error) = result {
                    failed = Some(error);
                    break;
                }
            }
            match failed {
                None => {
                    if let Some(slot) = self.fan_targets.get_mut(index) {
                        *slot = Some(target);
                    }
                }
                Some(error) => errors.push((gpu_index, error)),
            }
        }
        errors
    }

    /// Starts a trial of `settings`: validated first, journal written, then applied.
    pub fn start_trial(
        &mut self,
        backend: &mut dyn Backend,
        gpu_index: u32,
        settings: &[Setting],
        duration_s: u64,
    ) -> TrialStatus {
        // Refused values never reach the journal or the card.
        let refused = match self.constraints(gpu_index) {
            Ok(constraints) => settings.iter().find_map(|setting| {
                validate(constraints, *setting)
                    .err()
                    .map(|error| error.to_string())
            }),
            Err(error) => Some(error),
        };
        let constraints = self.constraints.clone();
        let mut trials = std::mem::take(&mut self.trials);
        let status = match refused {
            Some(message) => TrialStatus {
                gpu_index,
                what: crate::tuning::journal::describe_all(settings),
                remaining_s: None,
                baseline: Default::default(),
                during: Default::default(),
                message: Some(format!("Nothing was changed. {message}")),
            },
            None => trials.start(backend, gpu_index, settings, duration_s, |backend| {
                let mut applier = Controller::new(constraints);
                let outcome = applier.apply(backend, gpu_index, settings);
                match outcome.error {
                    None => Ok(()),
                    Some(error) => Err(error),
                }
            }),
        };
        self.trials = trials;
        status
    }

    /// Keeps or reverts the running trial.
    pub fn finish_trial(&mut self, backend: &mut dyn Backend, keep: bool) -> TrialStatus {
        let reason = if keep { "Kept" } else { "Reverted" };
        self.trials.finish(backend, keep, reason)
    }

    /// Feeds a trial its samples; its status while one runs or as it ends.
    pub fn observe_trial(
        &mut self,
        backend: &mut dyn Backend,
        samples: &[Result<Telemetry, DeviceError>],
    ) -> Option<TrialStatus> {
        self.trials.observe(backend, samples)
    }

    /// Hands every fan a curve was driving back to the driver, and reverts a running trial (on
    /// exit).
    pub fn release(&mut self, backend: &mut dyn Backend) {
        self.trials.release(backend);
        for index in 0..self.fan_curves.len() {
            if self.fan_curves[index].take().is_some()
                && let Some(constraints) = self.constraints.get(index).cloned()
                && let Err(error) = self.fans_automatic(backend, index as u32, &constraints)
            {
                tracing::warn!(
                    "GPU {index}: the fans could not be handed back to the driver: {error}"
                );
            }
        }
    }
}
