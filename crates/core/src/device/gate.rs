//! The one validation gate for hardware writes. A `Backend` only accepts a
//! [`ValidatedSetting`], and only [`validate`] makes one: nothing reaches a card unchecked.

use gputune_formats::card::{Constraints, Setting};
use gputune_formats::units::{power_limit_range, watts_exact};

/// A setting that passed [`validate`] against the card it is meant for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidatedSetting {
    setting: Setting,
}

impl ValidatedSetting {
    pub fn setting(&self) -> &Setting {
        &self.setting
    }
}

/// Why a requested setting was refused. Each message names the value and the allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("A power limit of {} is outside this GPU's range of {}.", watts_exact(*requested_mw), power_limit_range(*min_mw, *max_mw, *default_mw))]
    PowerLimitOutOfRange {
        requested_mw: u32,
        min_mw: u32,
        max_mw: u32,
        /// The card's default limit, to say the range in % too.
        default_mw: Option<u32>,
    },
    #[error("This GPU does not let its power limit be changed.")]
    PowerLimitNotSupported,
    #[error("The {clock} clock lock {min_mhz}-{max_mhz} MHz has its minimum above its maximum.")]
    ClockRangeInverted {
        clock: &'static str,
        min_mhz: u32,
        max_mhz: u32,
    },
    #[error(
        "The {clock} clock lock {min_mhz}-{max_mhz} MHz is outside this GPU's supported range of {supported_min_mhz}-{supported_max_mhz} MHz."
    )]
    ClockOutOfRange {
        clock: &'static str,
        min_mhz: u32,
        max_mhz: u32,
        supported_min_mhz: u32,
        supported_max_mhz: u32,
    },
    #[error(
        "This GPU does not report a supported {clock} clock range, so its {clock} clocks cannot be locked."
    )]
    ClockLockNotSupported { clock: &'static str },
    #[error(
        "A {clock} clock offset of {offset_mhz:+} MHz is outside this GPU's range of {min_mhz:+} to {max_mhz:+} MHz."
    )]
    OffsetOutOfRange {
        clock: &'static str,
        offset_mhz: i32,
        min_mhz: i32,
        max_mhz: i32,
    },
    #[error(
        "This GPU or driver does not support {clock} clock offsets (they need a consumer card and driver 555 or newer)."
    )]
    OffsetNotSupported { clock: &'static str },
    #[error("This GPU does not offer a {clock} clock offset in P-state P{pstate}.")]
    OffsetNotSupportedInPstate { clock: &'static str, pstate: u32 },
    #[error("This GPU has no controllable fans.")]
    NoFans,
    #[error("Fan {fan_index} does not exist: this GPU has {fan_count} fan(s), numbered from 0.")]
    NoSuchFan { fan_index: u32, fan_count: u32 },
    #[error(
        "A fan speed of {speed_pct} % is outside this GPU's range of {min_pct}-{max_pct} %. Use \"auto\" to hand the fans back to the driver."
    )]
    FanSpeedOutOfRange {
        speed_pct: u32,
        min_pct: u32,
        max_pct: u32,
    },
}

/// Checks `setting` against the card's `constraints`; the only way to make a `ValidatedSetting`.
pub fn validate(
    constraints: &Constraints,
    setting: Setting,
) -> Result<ValidatedSetting, LimitError> {
    match setting {
        Setting::PowerLimit { power_limit_mw } => {
            let (Some(min_mw), Some(max_mw)) = (
                constraints.power_limit_min_mw,
                constraints.power_limit_max_mw,
            ) else {
                return Err(LimitError::PowerLimitNotSupported);
            };
            if !(min_mw..=max_mw).contains(&power_limit_mw) {
                return Err(LimitError::PowerLimitOutOfRange {
                    requested_mw: power_limit_mw,
                    min_mw,
                    max_mw,
                    default_mw: constraints.power_limit_default_mw,
                });
            }
        }
        Setting::LockGpuClocks { min_mhz, max_mhz } => {
            check_clock_lock("GPU", constraints.gpu_clock_range, min_mhz, max_mhz)?;
        }
        Setting::LockMemoryClocks { min_mhz, max_mhz } => {
            check_clock_lock("memory", constraints.memory_clock_range, min_mhz, max_mhz)?;
        }
        Setting::ResetGpuClocks | Setting::ResetMemoryClocks => {}
        Setting::GpuClockOffset { offset_mhz } => {
            check_offset("GPU", constraints.gpu_clock_offset_range, offset_mhz)?;
        }
        Setting::MemoryClockOffset { offset_mhz } => {
            check_offset("memory", constraints.memory_clock_offset_range, offset_mhz)?;
        }
        Setting::GpuClockOffsetAt { pstate, offset_mhz } => {
            let range = pstate_range(
                "GPU",
                &constraints.gpu_clock_offset_pstates,
                constraints.gpu_clock_offset_range,
                pstate,
            )?;
            check_offset("GPU", Some(range), offset_mhz)?;
        }
        Setting::MemoryClockOffsetAt { pstate, offset_mhz } => {
            let range = pstate_range(
                "memory",
                &constraints.memory_clock_offset_pstates,
                constraints.memory_clock_offset_range,
                pstate,
            )?;
            check_offset("memory", Some(range), offset_mhz)?;
        }
        Setting::FanSpeed {
            fan_index,
            speed_pct,
        } => {
            check_fan(constraints, fan_index)?;
            let Some(range) = constraints.fan_speed_range else {
                return Err(LimitError::NoFans);
            };
            if !(range.min_pct..=range.max_pct).contains(&speed_pct) {
                return Err(LimitError::FanSpeedOutOfRange {
                    speed_pct,
                    min_pct: range.min_pct,
                    max_pct: range.max_pct,
                });
            }
        }
        Setting::FanAutomatic { fan_index } => check_fan(constraints, fan_index)?,
    }
    Ok(ValidatedSetting { setting })
}

fn check_clock_lock(
    clock: &'static str,
    supported: Option<gputune_formats::card::ClockRangeMhz>,
    min_mhz: u32,
    max_mhz: u32,
) -> Result<(), LimitError> {
    let Some(supported) = supported else {
        return Err(LimitError::ClockLockNotSupported { clock });
    };
    if min_mhz > max_mhz {
        return Err(LimitError::ClockRangeInverted {
            clock,
            min_mhz,
            max_mhz,
        });
    }
    if min_mhz < supported.min_mhz || max_mhz > supported.max_mhz {
        return Err(LimitError::ClockOutOfRange {
            clock,
            min_mhz,
            max_mhz,
            supported_min_mhz: supported.min_mhz,
            supported_max_mhz: supported.max_mhz,
        });
    }
    Ok(())
}

fn check_offset(
    clock: &'static str,
    range: Option<gputune_formats::card::OffsetRangeMhz>,
    offset_mhz: i32,
) -> Result<(), LimitError> {
    let Some(range) = range else {
        return Err(LimitError::OffsetNotSupported { clock });
    };
    if !(range.min_mhz..=range.max_mhz).contains(&offset_mhz) {
        return Err(LimitError::OffsetOutOfRange {
            clock,
            offset_mhz,
            min_mhz: range.min_mhz,
            max_mhz: range.max_mhz,
        });
    }
    Ok(())
}

/// P-state `pstate`'s own offset range; P0's is the card's one range on a driver that does
/// not say per P-state.
fn pstate_range(
    clock: &'static str,
    pstates: &[gputune_formats::card::PstateOffsetRange],
    compute_range: Option<gputune_formats::card::OffsetRangeMhz>,
    pstate: u32,
) -> Result<gputune_formats::card::OffsetRangeMhz, LimitError> {
    let own = pstates.iter().find(|range| range.pstate == pstate);
    match (own, compute_range) {
        (Some(range), _) => Ok(range.range()),
        (None, Some(range)) if pstates.is_empty() && pstate == 0 => Ok(range),
        (None, None) if pstates.is_empty() => Err(LimitError::OffsetNotSupported { clock }),
        _ => Err(LimitError::OffsetNotSupportedInPstate { clock, pstate }),
    }
}

fn check_fan(constraints: &Constraints, fan_index: u32) -> Result<(), LimitError> {
    if constraints.fan_count == 0 {
        return Err(LimitError::NoFans);
    }
    if fan_index >= constraints.fan_count {
        return Err(LimitError::NoSuchFan {
            fan_index,
            fan_count: constraints.fan_count,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::device::sim::{CardSpec, sim_constraints};

    fn rtx4090() -> Constraints {
        sim_constraints(&CardSpec::rtx4090())
    }

    #[test]
    fn power_limit_inside_range_passes_and_outside_is_refused_with_the_range() {
        let constraints = rtx4090();
        assert!(
            validate(
                &constraints,
                Setting::PowerLimit {
                    power_limit_mw: 315_000
                }
            )
            .is_ok()
        );
        let error = validate(
            &constraints,
            Setting::PowerLimit {
                power_limit_mw: 700_000,
            },
        )
        .err()
        .map(|error| error.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "A power limit of 700 W is outside this GPU's range of 150 W to 600 W (33 % to 133 % of its 450 W default)."
            )
        );
    }

    #[test]
    fn fanless_card_refuses_fan_settings() {
        let constraints = sim_constraints(&CardSpec::h100_sxm());
        assert_eq!(
            validate(&constraints, Setting::FanAutomatic { fan_index: 0 }),
            Err(LimitError::NoFans)
        );
        assert_eq!(
            validate(&constraints, Setting::GpuClockOffset { offset_mhz: 100 }),
            Err(LimitError::OffsetNotSupported { clock: "GPU" })
        );
    }

    #[test]
    fn inverted_and_out_of_range_clock_locks_are_refused() {
        let constraints = rtx4090();
        assert!(matches!(
            validate(
                &constraints,
                Setting::LockGpuClocks {
                    min_mhz: 2000,
                    max_mhz: 1000
                }
            ),
            Err(LimitError::ClockRangeInverted { .. })
        ));
        assert!(matches!(
            validate(
                &constraints,
                Setting::LockGpuClocks {
                    min_mhz: 100,
                    max_mhz: 1000
                }
            ),
            Err(LimitError::ClockOutOfRange { .. })
        ));
        assert!(
            validate(
                &constraints,
                Setting::LockGpuClocks {
                    min_mhz: 210,
                    max_mhz: 2550
                }
            )
            .is_ok()
        );
    }

    #[test]
    fn each_p_state_s_offset_is_checked_against_its_own_range() {
        let constraints = rtx4090();
        let at = |pstate, offset_mhz| Setting::GpuClockOffsetAt { pstate, offset_mhz };
        assert!(validate(&constraints, at(2, 500)).is_ok());
        assert!(matches!(
            validate(&constraints, at(8, 15)),
            Err(LimitError::OffsetOutOfRange {
                min_mhz: 0,
                max_mhz: 0,
                ..
            })
        ));
        assert_eq!(
            validate(&constraints, at(5, 0)),
            Err(LimitError::OffsetNotSupportedInPstate {
                clock: "GPU",
                pstate: 5
            })
        );
        // A driver that does not say per P-state: P0 is the one range it gave.
        let old_driver = Constraints {
            gpu_clock_offset_pstates: Vec::new(),
            ..rtx4090()
        };
        assert!(validate(&old_driver, at(0, 500)).is_ok());
        assert!(validate(&old_driver, at(2, 500)).is_err());
        let h100 = sim_constraints(&CardSpec::h100_sxm());
        assert_eq!(
            validate(&h100, at(0, 0)),
            Err(LimitError::OffsetNotSupported { clock: "GPU" })
        );
    }

    proptest! {
        /// Whatever is asked, what passes the gate lies inside the card's constraints.
        #[test]
        fn anything_that_passes_is_inside_the_constraints(
            power_limit_mw in 0u32..1_000_000,
            fan_speed_pct in 0u32..200,
            offset_mhz in -5_000i32..5_000,
        ) {
            let constraints = rtx4090();
            if validate(&constraints, Setting::PowerLimit { power_limit_mw }).is_ok() {
                prop_assert!((150_000..=600_000).contains(&power_limit_mw));
            }
            if validate(&constraints, Setting::FanSpeed { fan_index: 0, speed_pct: fan_speed_pct }).is_ok() {
                prop_assert!((30..=100).contains(&fan_speed_pct));
            }
            if validate(&constraints, Setting::GpuClockOffset { offset_mhz }).is_ok() {
                prop_assert!((-1000..=1000).contains(&offset_mhz));
            }
        }
    }
}
