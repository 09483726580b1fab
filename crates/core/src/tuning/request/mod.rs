//! What a user asks to change, before validation: parsed from the command line ("70%",
//! "210,2520", "auto") or filled in by the window, then turned into settings that passed
//! `device::gate`, all or nothing. Parsing the command line's text is `parse.rs`.

pub mod parse;

use crate::device::gate::{LimitError, ValidatedSetting, validate};
/// A user's number as they would write it: "312.5", "-5", "1e300" (never 300 digits).
use crate::text::number;
use gputune_formats::card::{Constraints, Setting};
use gputune_formats::units::{power_limit_range, watts_exact};

/// A power limit as asked for: a share of the card's default limit, or watts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PowerLimitRequest {
    /// Percent of the card's default power limit (`power_limit_default_mw`).
    Percent(f64),
    Watts(f64),
    /// A number without a unit ("315"): watts when the card takes that many, else refused
    /// with both readings spelled out ("70" is 70 % or 70 W?).
    Unitless(f64),
}

/// A fan speed as asked for, for every fan of the card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanRequest {
    Percent(u32),
    /// Hand the fans back to the driver's own curve.
    Automatic,
}

/// Everything one request may change on one GPU. `None` / `false` leaves a control alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TuneRequest {
    pub power_limit: Option<PowerLimitRequest>,
    /// Lock the GPU clocks to (min, max) MHz.
    pub lock_gpu_clocks: Option<(u32, u32)>,
    pub reset_gpu_clocks: bool,
    /// Lock the memory clocks to (min, max) MHz.
    pub lock_memory_clocks: Option<(u32, u32)>,
    pub reset_memory_clocks: bool,
    pub gpu_clock_offset_mhz: Option<i32>,
    pub memory_clock_offset_mhz: Option<i32>,
    pub fan: Option<FanRequest>,
}

/// Why a request cannot be applied. Every message is one sentence naming the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("{option} \"{text}\" is not understood: expected {expected}.")]
    Unparsable {
        option: &'static str,
        text: String,
        expected: &'static str,
    },
    #[error("A power limit of {requested} is not a number.")]
    PowerLimitNotANumber { requested: String },
    #[error(
        "A power limit of {requested} is outside this GPU's range of {}.",
        power_limit_range(*min_mw, *max_mw, *default_mw)
    )]
    PowerLimitOutOfRange {
        /// As the user gave it, e.g. "150 % (675 W)" or "700 W".
        requested: String,
        min_mw: u32,
        max_mw: u32,
        default_mw: Option<u32>,
    },
    #[error(
        "A power limit of {number} has no unit: did you mean {number} % ({}) or {number} W? Write \"{number}%\" or \"{number}W\"; this GPU takes {}.",
        watts_exact(*percent_mw),
        power_limit_range(*min_mw, *max_mw, Some(*default_mw))
    )]
    PowerLimitUnitless {
        number: String,
        /// What the number means as a percentage of the default.
        percent_mw: u32,
        min_mw: u32,
        max_mw: u32,
        default_mw: u32,
    },
    #[error(
        "A power limit of {requested} % cannot be worked out: this GPU does not report its default power limit, so give watts instead."
    )]
    PowerLimitDefaultUnknown { requested: String },
    #[error("The {clock} clocks cannot be locked and reset in one request: choose one of the two.")]
    LockAndReset { clock: &'static str },
    #[error("{0}")]
    Refused(#[from] LimitError),
}

impl TuneRequest {
    /// Whether the request changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == TuneRequest::default()
    }

    /// The power limit in milliwatts that `power_limit` asks for on a card with these
    /// constraints. Percentages are of the default limit, rounded to whole watts.
    pub fn power_limit_mw(
        request: PowerLimitRequest,
        constraints: &Constraints,
    ) -> Result<u32, RequestError> {
        let range = (
            constraints.power_limit_min_mw,
            constraints.power_limit_max_mw,
            constraints.power_limit_default_mw,
        );
        let request = match (request, range) {
            (PowerLimitRequest::Unitless(value), (Some(min_mw), Some(max_mw), default_mw)) => {
                let as_watts_mw = value * 1000.0;
                let as_percent_mw = default_mw.map(|default_mw| {
                    (value / 100.0 * f64::from(default_mw) / 1000.0).round() * 1000.0
                });
                let takes = |mw: f64| (f64::from(min_mw)..=f64::from(max_mw)).contains(&mw);
                match (default_mw, as_percent_mw) {
                    (Some(default_mw), Some(percent_mw))
                        if !takes(as_watts_mw) && takes(percent_mw) =>
                    {
                        return Err(RequestError::PowerLimitUnitless {
                            number: number(value),
                            // In range, so whole milliwatts within u32.
                            percent_mw: percent_mw as u32,
                            min_mw,
                            max_mw,
                            default_mw,
                        });
                    }
                    _ => PowerLimitRequest::Watts(value),
                }
            }
            (PowerLimitRequest::Unitless(value), _) => PowerLimitRequest::Watts(value),
            (request, _) => request,
        };
        let (requested_mw, described) = match request {
            PowerLimitRequest::Watts(watts) | PowerLimitRequest::Unitless(watts) => {
                (watts * 1000.0, format!("{} W", number(watts)))
            }
            PowerLimitRequest::Percent(percent) => {
                let Some(default_mw) = constraints.power_limit_default_mw else {
                    return Err(RequestError::PowerLimitDefaultUnknown {
                        requested: number(percent),
                    });
                };
                let watts = (percent / 100.0 * f64::from(default_mw) / 1000.0).round();
                (watts * 1000.0, format!("{} %", number(percent)))
            }
        };
        if !requested_mw.is_finite() {
            return Err(RequestError::PowerLimitNotANumber {
                requested: described,
            });
        }
        let requested_mw = requested_mw.round();
        if (0.0..=f64::from(u32::MAX)).contains(&requested_mw) {
            // In range of u32 and whole: the cast is exact.
            return Ok(requested_mw as u32);
        }
        match (
            constraints.power_limit_min_mw,
            constraints.power_limit_max_mw,
        ) {
            (Some(min_mw), Some(max_mw)) => Err(RequestError::PowerLimitOutOfRange {
                requested: described,
                min_mw,
                max_mw,
                default_mw: constraints.power_limit_default_mw,
            }),
            _ => Err(LimitError::PowerLimitNotSupported.into()),
        }
    }

    /// The settings this request asks for, in the order they are written, before validation.
    pub fn settings(&self, constraints: &Constraints) -> Result<Vec<Setting>, RequestError> {
        if self.lock_gpu_clocks.is_some() && self.reset_gpu_clocks {
            return Err(RequestError::LockAndReset { clock: "GPU" });
        }
        if self.lock_memory_clocks.is_some() && self.reset_memory_clocks {
            return Err(RequestError::LockAndReset { clock: "memory" });
        }
        let mut settings = Vec::new();
        if let Some(power_limit) = self.power_limit {
            settings.push(Setting::PowerLimit {
                power_limit_mw: TuneRequest::power_limit_mw(power_limit, constraints)?,
            });
        }
        if self.reset_gpu_clocks {
            settings.push(Setting::ResetGpuClocks);
        }
        if let Some((min_mhz, max_mhz)) = self.lock_gpu_clocks {
            settings.push(Setting::LockGpuClocks { min_mhz, max_mhz });
        }
        if self.reset_memory_clocks {
            settings.push(Setting::ResetMemoryClocks);
        }
        if let Some((min_mhz, max_mhz)) = self.lock_memory_clocks {
            settings.push(Setting::LockMemoryClocks { min_mhz, max_mhz });
        }
        if let Some(offset_mhz) = self.gpu_clock_offset_mhz {
            settings.push(Setting::GpuClockOffset { offset_mhz });
        }
        if let Some(offset_mhz) = self.memory_clock_offset_mhz {
            settings.push(Setting::MemoryClockOffset { offset_mhz });
        }
        if let Some(fan) = self.fan {
            // A card without fans still gets one setting, so the gate says why it is refused.
            for fan_index in 0..constraints.fan_count.max(1) {
                settings.push(match fan {
                    FanRequest::Percent(speed_pct) => Setting::FanSpeed {
                        fan_index,
                        speed_pct,
                    },
                    FanRequest::Automatic => Setting::FanAutomatic { fan_index },
                });
            }
        }
        Ok(settings)
    }

    /// Every setting of the request, each passed through `device::gate::validate` against
    /// `constraints`: all of them, or the first refusal and nothing.
    pub fn validated(
        &self,
        constraints: &Constraints,
    ) -> Result<Vec<ValidatedSetting>, RequestError> {
        let settings = self.settings(constraints)?;
        let mut validated = Vec::with_capacity(settings.len());
        for setting in settings {
            match validate(constraints, setting) {
                Ok(setting) => validated.push(setting),
                Err(error) => return Err(self.explain(error)),
            }
        }
        Ok(validated)
    }

    /// A refused power limit is named as the user gave it (a percentage says which watts).
    fn explain(&self, error: LimitError) -> RequestError {
        match (error, self.power_limit) {
            (
                LimitError::PowerLimitOutOfRange {
                    min_mw,
                    max_mw,
                    default_mw,
                    ..
                },
                Some(PowerLimitRequest::Percent(percent)),
            ) => RequestError::PowerLimitOutOfRange {
                requested: format!("{} %", number(percent)),
                min_mw,
                max_mw,
                default_mw,
            },
            (error, _) => error.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::device::sim::{CardSpec, sim_constraints};

    fn rtx4090() -> Constraints {
        sim_constraints(&CardSpec::rtx4090())
    }

    fn fanless() -> Constraints {
        sim_constraints(&CardSpec::h100_sxm())
    }

    fn settings_of(request: &TuneRequest, constraints: &Constraints) -> Vec<Setting> {
        match request.validated(constraints) {
            Ok(validated) => validated.iter().map(|setting| *setting.setting()).collect(),
            Err(error) => panic!("{request:?}: {error}"),
        }
    }

    pub(super) fn message(result: Result<impl std::fmt::Debug, RequestError>) -> String {
        match result {
            Ok(value) => panic!("expected a refusal, got {value:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn percent_is_of_the_default_limit_rounded_to_whole_watts() {
        let constraints = rtx4090();
        let limit_of = |asked| {
            let request = TuneRequest {
                power_limit: Some(asked),
                ..TuneRequest::default()
            };
            settings_of(&request, &constraints)
        };
        let limit = |power_limit_mw| vec![Setting::PowerLimit { power_limit_mw }];
        assert_eq!(limit_of(PowerLimitRequest::Percent(70.0)), limit(315_000));
        assert_eq!(limit_of(PowerLimitRequest::Percent(70.05)), limit(315_000));
        assert_eq!(limit_of(PowerLimitRequest::Watts(312.5)), limit(312_500));
    }

    #[test]
    fn a_number_without_a_unit_is_watts_the_card_takes_or_a_question() {
        let constraints = rtx4090();
        let power = |value| TuneRequest {
            power_limit: Some(PowerLimitRequest::Unitless(value)),
            ..TuneRequest::default()
        };
        assert_eq!(
            settings_of(&power(315.0), &constraints),
            vec![Setting::PowerLimit {
                power_limit_mw: 315_000
            }]
        );
        assert_eq!(
            message(power(70.0).validated(&constraints)),
            "A power limit of 70 has no unit: did you mean 70 % (315 W) or 70 W? Write \"70%\" or \"70W\"; this GPU takes 150 W to 600 W (33 % to 133 % of its 450 W default)."
        );
        // Neither reading fits: the watts reading's range refusal.
        assert!(
            message(power(5.0).validated(&constraints)).contains("A power limit of 5 W is outside")
        );
    }

    #[test]
    fn refusals_name_the_value_and_the_range() {
        let constraints = rtx4090();
        let power = |power_limit| TuneRequest {
            power_limit: Some(power_limit),
            ..TuneRequest::default()
        };
        assert_eq!(
            message(power(PowerLimitRequest::Percent(150.0)).validated(&constraints)),
            "A power limit of 150 % is outside this GPU's range of 150 W to 600 W (33 % to 133 % of its 450 W default)."
        );
        assert_eq!(
            message(power(PowerLimitRequest::Watts(-5.0)).validated(&constraints)),
            "A power limit of -5 W is outside this GPU's range of 150 W to 600 W (33 % to 133 % of its 450 W default)."
        );
        assert_eq!(
            message(power(PowerLimitRequest::Watts(1e300)).validated(&constraints)),
            "A power limit of 1e300 W is outside this GPU's range of 150 W to 600 W (33 % to 133 % of its 450 W default)."
        );
        assert!(
            message(power(PowerLimitRequest::Percent(f64::NAN)).validated(&constraints))
                .contains("not a number")
        );
        let fan = TuneRequest {
            fan: Some(FanRequest::Percent(10)),
            ..TuneRequest::default()
        };
        assert_eq!(
            message(fan.validated(&constraints)),
            "A fan speed of 10 % is outside this GPU's range of 30-100 %. Use \"auto\" to hand the fans back to the driver."
        );
    }

    #[test]
    fn one_refused_value_refuses_the_whole_request() {
        let request = TuneRequest {
            power_limit: Some(PowerLimitRequest::Watts(315.0)),
            gpu_clock_offset_mhz: Some(100),
            fan: Some(FanRequest::Percent(60)),
            ..TuneRequest::default()
        };
        assert_eq!(settings_of(&request, &rtx4090()).len(), 4);
        assert_eq!(
            request.validated(&fanless()),
            Err(RequestError::Refused(LimitError::OffsetNotSupported {
                clock: "GPU"
            }))
        );
    }

    #[test]
    fn fans_expand_to_every_fan_and_a_fanless_card_refuses_them() {
        let request = TuneRequest {
            fan: Some(FanRequest::Automatic),
            ..TuneRequest::default()
        };
        assert_eq!(
            settings_of(&request, &rtx4090()),
            vec![
                Setting::FanAutomatic { fan_index: 0 },
                Setting::FanAutomatic { fan_index: 1 }
            ]
        );
        assert_eq!(
            request.validated(&fanless()),
            Err(RequestError::Refused(LimitError::NoFans))
        );
    }

    #[test]
    fn locking_and_resetting_the_same_clock_conflict() {
        let request = TuneRequest {
            lock_memory_clocks: Some((405, 10_501)),
            reset_memory_clocks: true,
            ..TuneRequest::default()
        };
        assert_eq!(
            message(request.validated(&rtx4090())),
            "The memory clocks cannot be locked and reset in one request: choose one of the two."
        );
        assert!(TuneRequest::default().is_empty());
        assert!(!request.is_empty());
    }

    proptest! {
        /// Any numbers: either every validated setting lies inside the card's constraints, or
        /// the request is refused with a message.
        #[test]
        fn validated_settings_are_inside_the_constraints(
            watts in prop_oneof![Just(f64::NAN), Just(f64::INFINITY), -1e12f64..1e12, 100f64..700.0],
            percent in prop::bool::ANY,
            fan in prop::option::of(0u32..300),
            offset_mhz in prop::option::of(any::<i32>()),
            clocks in prop::option::of((0u32..4000, 0u32..4000)),
        ) {
            let constraints = rtx4090();
            let request = TuneRequest {
                power_limit: Some(if percent { PowerLimitRequest::Percent(watts / 4.5) } else { PowerLimitRequest::Watts(watts) }),
                lock_gpu_clocks: clocks,
                gpu_clock_offset_mhz: offset_mhz,
                fan: fan.map(FanRequest::Percent),
                ..TuneRequest::default()
            };
            match request.validated(&constraints) {
                Ok(settings) => {
                    for setting in settings {
                        match *setting.setting() {
                            Setting::PowerLimit { power_limit_mw } => prop_assert!((150_000..=600_000).contains(&power_limit_mw)),
                            Setting::LockGpuClocks { min_mhz, max_mhz } => prop_assert!(210 <= min_mhz && min_mhz <= max_mhz && max_mhz <= 3105),
                            Setting::GpuClockOffset { offset_mhz } => prop_assert!((-1000..=1000).contains(&offset_mhz)),
                            Setting::FanSpeed { fan_index, speed_pct } => prop_assert!(fan_index < 2 && (30..=100).contains(&speed_pct)),
                            other => prop_assert!(false, "unexpected {other:?}"),
                        }
                    }
                }
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
        }
    }
}
