//! What else the card runs during a sweep. A clock lock or an offset left in force from before
//! changes every measurement (a lock throttles every row, an offset shifts every clock), so a
//! sweep starts clean: the locks and offsets its plan does not set itself are reset for the
//! sweep (put back when it ends, like everything a session changes), or, asked to keep them,
//! written again as part of every step so nothing changes them mid-sweep. Either way they are
//! said before the job starts and belong to every row and to the saved profile.

use crate::device::gate::validate;
use crate::tuning::in_force::Control;
use gputune_formats::card::{Constraints, Setting};
use gputune_formats::tuning::{ClockLockInForce, GpuInfo, SettingsInForce};

use super::runner::SweepCardPlan;
use super::steps::{SweepSpec, SweepStepsError, sweep_steps};
use gputune_formats::reports::sweep_step::SweepStep;

/// The steps of `spec` on a card running `in_force`, with what the sweep does with the locks
/// and offsets in force: one plan for every front end.
pub fn sweep_steps_with_base(
    spec: &SweepSpec,
    constraints: &Constraints,
    in_force: &SettingsInForce,
    keep_settings: bool,
) -> Result<(Vec<SweepStep>, SweepBase), SweepStepsError> {
    let steps = sweep_steps(spec, constraints)?;
    let base = SweepBase::new(&steps, in_force, constraints, keep_settings)?;
    Ok((base.apply_to(steps), base))
}

/// One card to sweep with the others: its index, what it is, and what it runs now.
pub struct CardToSweep<'a> {
    pub index: u32,
    pub gpu: &'a GpuInfo,
    pub in_force: &'a SettingsInForce,
}

/// Each card's plan of `spec` (in % of its own default power limit, with its own locks and
/// offsets in force reset or kept), for a sweep of the cards together, with each card's
/// base. A card that cannot be swept is named (the only card's refusal reads as it always did).
pub fn plan_for_cards(
    spec: &SweepSpec,
    cards: &[CardToSweep<'_>],
    keep_settings: bool,
) -> Result<Vec<(SweepCardPlan, SweepBase)>, SweepStepsError> {
    cards
        .iter()
        .map(|card| {
            let (plan, base) =
                sweep_steps_with_base(spec, &card.gpu.constraints, card.in_force, keep_settings)
                    .map_err(|SweepStepsError::Invalid(why)| {
                        SweepStepsError::Invalid(if cards.len() > 1 {
                            format!("GPU {}: {why}", card.index)
                        } else {
                            why
                        })
                    })?;
            let plan = SweepCardPlan {
                index: card.index,
                gpu: card.gpu.clone(),
                plan,
            };
            Ok((plan, base))
        })
        .collect()
}

/// What the sweep does with the locks and offsets in force that its plan does not set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepBase {
    /// Written with every step: the resets (`keep: false`) or the kept values (`keep: true`).
    pub settings: Vec<Setting>,
    /// Whether the settings in force were kept (`--keep-settings`) rather than reset.
    pub keep: bool,
    /// Each setting in force that affects the measurement, for people ("GPU clock lock
    /// 210-2520 MHz", "GPU clock offset +150 MHz").
    pub found: Vec<String>,
}

impl SweepBase {
    /// The base for a plan on a card running `in_force`. A lock gputune cannot read (set by
    /// another tool, or none at all) is left alone: resetting what is most likely nothing
    /// would only make the put-back say so.
    pub fn new(
        steps: &[SweepStep],
        in_force: &SettingsInForce,
        constraints: &Constraints,
        keep: bool,
    ) -> Result<SweepBase, SweepStepsError> {
        let touched: Vec<Control> = steps
            .iter()
            .flat_map(|step| step.settings.iter().map(Control::of))
            .collect();
        let free = |control: Control| !touched.contains(&control);
        let mut base = SweepBase {
            keep,
            ..SweepBase::default()
        };
        let locks = [
            (
                Control::GpuClockLock,
                in_force.gpu_clock_lock,
                "GPU",
                Setting::ResetGpuClocks,
            ),
            (
                Control::MemoryClockLock,
                in_force.memory_clock_lock,
                "memory",
                Setting::ResetMemoryClocks,
            ),
        ];
        for (control, lock, clock, reset) in locks {
            if let (true, ClockLockInForce::Locked { min_mhz, max_mhz }) = (free(control), lock) {
                base.found
                    .push(format!("{clock} clock lock {min_mhz}-{max_mhz} MHz"));
                base.settings.push(match (keep, control) {
                    (false, _) => reset,
                    (true, Control::GpuClockLock) => Setting::LockGpuClocks { min_mhz, max_mhz },
                    (true, _) => Setting::LockMemoryClocks { min_mhz, max_mhz },
                });
            }
        }
        let offsets = [
            (
                Control::GpuClockOffset,
                in_force.gpu_clock_offset_mhz,
                "GPU",
            ),
            (
                Control::MemoryClockOffset,
                in_force.memory_clock_offset_mhz,
                "memory",
            ),
        ];
        for (control, offset, clock) in offsets {
            let Some(offset_mhz) = offset.filter(|offset_mhz| *offset_mhz != 0) else {
                continue;
            };
            if !free(control) {
                continue;
            }
            base.found
                .push(format!("{clock} clock offset {offset_mhz:+} MHz"));
            let offset_mhz = if keep { offset_mhz } else { 0 };
            base.settings.push(match control {
                Control::GpuClockOffset => Setting::GpuClockOffset { offset_mhz },
                _ => Setting::MemoryClockOffset { offset_mhz },
            });
        }
        for setting in &base.settings {
            validate(constraints, *setting).map_err(|error| {
                SweepStepsError::Invalid(format!(
                    "{} cannot be part of the sweep: {error}",
                    setting.describe()
                ))
            })?;
        }
        Ok(base)
    }

    /// The plan with the base written at every step (and said in each label).
    pub fn apply_to(&self, steps: Vec<SweepStep>) -> Vec<SweepStep> {
        steps
            .into_iter()
            .map(|mut step| {
                step.settings.extend(self.settings.iter().copied());
                step.in_force_note = self.row_note();
                step
            })
            .collect()
    }

    /// What the card ran besides each step's own settings, for a row; empty when nothing.
    pub fn row_note(&self) -> String {
        if self.found.is_empty() {
            String::new()
        } else if self.keep {
            format!("{} kept", self.found.join(", "))
        } else {
            format!("{} reset for the sweep", self.found.join(", "))
        }
    }

    /// The sentence said before the job starts; `None` when nothing in force matters.
    pub fn sentence(&self) -> Option<String> {
        if self.found.is_empty() {
            return None;
        }
        let found = self.found.join(", ");
        Some(if self.keep {
            format!(
                "{found} in force: kept for every setting (--keep-settings), so every row is measured on top of it."
            )
        } else {
            format!(
                "{found} in force: reset for the sweep so it does not skew the measurements, and put back when the sweep ends (--keep-settings measures on top of it instead)."
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::{CardSpec, sim_constraints};

    fn tuned() -> SettingsInForce {
        SettingsInForce {
            power_limit_mw: Some(450_000),
            gpu_clock_lock: ClockLockInForce::Locked {
                min_mhz: 210,
                max_mhz: 2520,
            },
            memory_clock_lock: ClockLockInForce::Unknown,
            gpu_clock_offset_mhz: Some(150),
            memory_clock_offset_mhz: Some(0),
            fans: None,
            ..SettingsInForce::default()
        }
    }

    fn power_only() -> SweepSpec {
        SweepSpec {
            power_limits_pct: vec![100.0, 70.0],
            clock_caps_mhz: Vec::new(),
            undervolt_offset_mhz: None,
        }
    }

    #[test]
    fn a_lock_and_an_offset_in_force_are_reset_for_every_step_by_default() {
        let constraints = sim_constraints(&CardSpec::rtx4090());
        let steps = sweep_steps(&power_only(), &constraints).unwrap();
        let base = SweepBase::new(&steps, &tuned(), &constraints, false).unwrap();
        assert_eq!(
            base.settings,
            vec![
                Setting::ResetGpuClocks,
                Setting::GpuClockOffset { offset_mhz: 0 }
            ]
        );
        let steps = base.apply_to(steps);
        assert!(steps.iter().all(|step| step.settings.len() == 3));
        assert_eq!(
            steps[0].in_force_note,
            "GPU clock lock 210-2520 MHz, GPU clock offset +150 MHz reset for the sweep"
        );
        let sentence = base.sentence().unwrap();
        assert!(sentence.contains("reset for the sweep"), "{sentence}");
    }

    #[test]
    fn kept_settings_are_written_again_with_every_step() {
        let constraints = sim_constraints(&CardSpec::rtx4090());
        let steps = sweep_steps(&power_only(), &constraints).unwrap();
        let base = SweepBase::new(&steps, &tuned(), &constraints, true).unwrap();
        assert_eq!(
            base.settings,
            vec![
                Setting::LockGpuClocks {
                    min_mhz: 210,
                    max_mhz: 2520
                },
                Setting::GpuClockOffset { offset_mhz: 150 }
            ]
        );
        assert!(base.row_note().ends_with(" kept"), "{}", base.row_note());
    }

    #[test]
    fn what_the_plan_sets_itself_or_nobody_set_is_left_alone() {
        let constraints = sim_constraints(&CardSpec::rtx4090());
        let capped = SweepSpec {
            power_limits_pct: vec![100.0],
            clock_caps_mhz: vec![2400],
            undervolt_offset_mhz: Some(150),
        };
        let steps = sweep_steps(&capped, &constraints).unwrap();
        let base = SweepBase::new(&steps, &tuned(), &constraints, false).unwrap();
        assert!(base.settings.is_empty(), "{:?}", base.settings);
        assert_eq!(base.sentence(), None);
        let stock = SettingsInForce {
            gpu_clock_lock: ClockLockInForce::Unknown,
            gpu_clock_offset_mhz: Some(0),
            ..tuned()
        };
        let steps = sweep_steps(&power_only(), &constraints).unwrap();
        let base = SweepBase::new(&steps, &stock, &constraints, false).unwrap();
        assert!(base.settings.is_empty(), "{:?}", base.settings);
    }
}
