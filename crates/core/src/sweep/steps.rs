//! Which settings a sweep steps through, in order. Every step names every control the sweep
//! touches, so moving from one step to the next never leaves a control of the step before.
//! The first step is the card's stock behaviour for those controls (the reference every other
//! step is compared with) and it is measured again at the end, so drift shows as noise.

use crate::device::gate::validate;
use gputune_formats::card::{Constraints, Setting};
use gputune_formats::reports::sweep_step::SweepStep;
use gputune_formats::units::watts_exact;

/// The power limits a sweep tries when none are given, in % of the card's default.
pub const DEFAULT_POWER_LIMITS_PCT: [f64; 5] = [100.0, 90.0, 80.0, 70.0, 60.0];
/// The offset of `--undervolt` without a value: three boost bins on a 4090, a shift most cards
/// hold under a clock cap.
pub const DEFAULT_UNDERVOLT_OFFSET_MHZ: i32 = 150;
/// More steps than this is a day-long sweep; the user most likely mistyped a list.
pub const MAX_STEPS: usize = 60;

/// What the user asked to sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepSpec {
    /// Power limits in % of the card's default, in the order tried; empty means the default
    /// list (or 100 % alone when clock caps are given).
    pub power_limits_pct: Vec<f64>,
    /// Highest GPU clocks to try, MHz; each is tried at every power limit, after the uncapped
    /// setting.
    pub clock_caps_mhz: Vec<u32>,
    /// With a clock cap, also try it with this GPU clock offset ("undervolt-style": the capped
    /// clock is reached at a lower voltage).
    pub undervolt_offset_mhz: Option<i32>,
}

/// Why a sweep cannot be planned on this card.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepStepsError {
    #[error("{0}")]
    Invalid(String),
}

fn invalid(message: impl Into<String>) -> SweepStepsError {
    SweepStepsError::Invalid(message.into())
}

/// The steps of `spec` on a card with `constraints`, first setting repeated last.
pub fn sweep_steps(
    spec: &SweepSpec,
    constraints: &Constraints,
) -> Result<Vec<SweepStep>, SweepStepsError> {
    let default_mw = constraints
        .power_limit_default_mw
        .filter(|default_mw| *default_mw > 0)
        .ok_or_else(|| {
            invalid("This GPU does not report a default power limit, so it cannot be swept.")
        })?;
    let power_limits_pct: Vec<f64> = if !spec.power_limits_pct.is_empty() {
        spec.power_limits_pct.clone()
    } else if spec.clock_caps_mhz.is_empty() {
        DEFAULT_POWER_LIMITS_PCT.to_vec()
    } else {
        vec![100.0]
    };
    for percent in &power_limits_pct {
        if !percent.is_finite() || *percent <= 0.0 || *percent > 200.0 {
            return Err(invalid(format!(
                "A power limit of {percent} % of the default makes no sense: give percentages such as 100,90,80,70,60."
            )));
        }
    }
    let offset = spec.undervolt_offset_mhz;
    if offset.is_some() && spec.clock_caps_mhz.is_empty() {
        return Err(invalid(
            "--undervolt shifts the clock/voltage curve under a clock cap: give --clock-caps too (e.g. --clock-caps 2400,2200).",
        ));
    }
    let gpu_range = constraints.gpu_clock_range;
    if !spec.clock_caps_mhz.is_empty() && gpu_range.is_none() {
        return Err(invalid(
            "This GPU does not report a supported clock range, so its clocks cannot be capped.",
        ));
    }
    // Per power limit: uncapped, then each cap, each followed by its undervolt variant.
    let mut shapes: Vec<(Option<u32>, Option<i32>)> = vec![(None, offset.map(|_| 0))];
    for cap in &spec.clock_caps_mhz {
        shapes.push((Some(*cap), offset.map(|_| 0)));
        if let Some(offset_mhz) = offset {
            shapes.push((Some(*cap), Some(offset_mhz)));
        }
    }
    let touches_clocks = !spec.clock_caps_mhz.is_empty();
    let mut steps = Vec::new();
    for percent in &power_limits_pct {
        let watts = (percent / 100.0 * f64::from(default_mw) / 1000.0).round();
        let power_limit_mw = (watts * 1000.0) as u32;
        for (cap, offset_mhz) in &shapes {
            let mut settings = vec![Setting::PowerLimit { power_limit_mw }];
            if touches_clocks {
                settings.push(match (cap, gpu_range) {
                    (Some(cap), Some(range)) => Setting::LockGpuClocks {
                        min_mhz: range.min_mhz,
                        max_mhz: *cap,
                    },
                    _ => Setting::ResetGpuClocks,
                });
            }
            if let Some(offset_mhz) = offset_mhz {
                settings.push(Setting::GpuClockOffset {
                    offset_mhz: *offset_mhz,
                });
            }
            for setting in &settings {
                validate(constraints, *setting).map_err(|error| {
                    invalid(format!("{} cannot be swept: {error}", setting.describe()))
                })?;
            }
            steps.push(SweepStep {
                label: label(*percent, power_limit_mw, *cap, *offset_mhz),
                power_limit_pct: *percent,
                power_limit_mw,
                clock_cap_mhz: *cap,
                gpu_clock_offset_mhz: *offset_mhz,
                settings,
                is_repeat: false,
                in_force_note: String::new(),
            });
        }
    }
    if steps.len() > MAX_STEPS {
        return Err(invalid(format!(
            "{} settings is too many for one sweep (at most {MAX_STEPS}): give fewer power limits or clock caps.",
            steps.len()
        )));
    }
    if let Some(first) = steps.first().cloned()
        && steps.len() > 1
    {
        steps.push(SweepStep {
            is_repeat: true,
            label: format!("{} again", first.label),
            ..first
        });
    }
    Ok(steps)
}

fn label(percent: f64, power_limit_mw: u32, cap: Option<u32>, offset: Option<i32>) -> String {
    let mut label = format!(
        "{} % ({})",
        crate::text::number(percent),
        watts_exact(power_limit_mw)
    );
    if let Some(cap) = cap {
        label.push_str(&format!(", cap {cap} MHz"));
    }
    if let Some(offset) = offset.filter(|offset| *offset != 0) {
        label.push_str(&format!(", {offset:+} MHz"));
    }
    label
}

/// Parses "100,90,80" (spaces and a trailing % allowed) into numbers.
pub fn parse_list<T: std::str::FromStr>(option: &str, text: &str) -> Result<Vec<T>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let number = item.trim_end_matches('%').trim();
            number.parse::<T>().map_err(|_| {
                format!("{option}: {item:?} is not a number (give a comma-separated list such as 100,90,80).")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::card::{ClockRangeMhz, OffsetRangeMhz};

    fn rtx4090() -> Constraints {
        Constraints {
            power_limit_min_mw: Some(150_000),
            power_limit_max_mw: Some(600_000),
            power_limit_default_mw: Some(450_000),
            gpu_clock_range: Some(ClockRangeMhz {
                min_mhz: 210,
                max_mhz: 3105,
            }),
            gpu_clock_offset_range: Some(OffsetRangeMhz {
                min_mhz: -1000,
                max_mhz: 1000,
            }),
            ..Constraints::default()
        }
    }

    #[test]
    fn the_default_sweep_is_five_power_limits_and_the_first_again() {
        let steps = sweep_steps(
            &SweepSpec {
                power_limits_pct: vec![],
                clock_caps_mhz: vec![],
                undervolt_offset_mhz: None,
            },
            &rtx4090(),
        )
        .unwrap();
        let watts: Vec<u32> = steps
            .iter()
            .map(|step| step.power_limit_mw / 1000)
            .collect();
        assert_eq!(watts, vec![450, 405, 360, 315, 270, 450]);
        assert!(steps[5].is_repeat && steps[5].same_setting(&steps[0]));
        assert_eq!(steps[3].label, "70 % (315 W)");
        assert_eq!(
            steps[3].settings,
            vec![Setting::PowerLimit {
                power_limit_mw: 315_000
            }]
        );
    }

    #[test]
    fn caps_and_undervolt_name_every_touched_control_in_every_step() {
        let steps = sweep_steps(
            &SweepSpec {
                power_limits_pct: vec![100.0, 80.0],
                clock_caps_mhz: vec![2400],
                undervolt_offset_mhz: Some(150),
            },
            &rtx4090(),
        )
        .unwrap();
        // Per power limit: uncapped, capped, capped + offset; then the first again.
        assert_eq!(steps.len(), 7);
        assert_eq!(
            steps[0].settings,
            vec![
                Setting::PowerLimit {
                    power_limit_mw: 450_000
                },
                Setting::ResetGpuClocks,
                Setting::GpuClockOffset { offset_mhz: 0 },
            ]
        );
        assert_eq!(
            steps[5].settings,
            vec![
                Setting::PowerLimit {
                    power_limit_mw: 360_000
                },
                Setting::LockGpuClocks {
                    min_mhz: 210,
                    max_mhz: 2400
                },
                Setting::GpuClockOffset { offset_mhz: 150 },
            ]
        );
        assert_eq!(steps[5].label, "80 % (360 W), cap 2400 MHz, +150 MHz");
        // Caps alone sweep at 100 %.
        let caps = sweep_steps(
            &SweepSpec {
                power_limits_pct: vec![],
                clock_caps_mhz: vec![2400, 2100],
                undervolt_offset_mhz: None,
            },
            &rtx4090(),
        )
        .unwrap();
        assert_eq!(caps.len(), 4);
        assert!(caps.iter().all(|step| step.power_limit_mw == 450_000));
    }

    #[test]
    fn impossible_sweeps_are_refused_with_the_reason() {
        let refused = |spec: SweepSpec, constraints: &Constraints, words: &str| {
            let error = sweep_steps(&spec, constraints).unwrap_err().to_string();
            assert!(error.contains(words), "{error}");
        };
        let spec = |power: Vec<f64>, caps: Vec<u32>, offset: Option<i32>| SweepSpec {
            power_limits_pct: power,
            clock_caps_mhz: caps,
            undervolt_offset_mhz: offset,
        };
        refused(spec(vec![20.0], vec![], None), &rtx4090(), "outside");
        refused(spec(vec![-5.0], vec![], None), &rtx4090(), "makes no sense");
        refused(
            spec(vec![f64::NAN], vec![], None),
            &rtx4090(),
            "makes no sense",
        );
        refused(spec(vec![], vec![], Some(150)), &rtx4090(), "--clock-caps");
        refused(spec(vec![], vec![9000], None), &rtx4090(), "outside");
        let no_offsets = Constraints {
            gpu_clock_offset_range: None,
            ..rtx4090()
        };
        refused(spec(vec![], vec![2400], Some(150)), &no_offsets, "offsets");
        refused(
            spec(vec![100.0], vec![], None),
            &Constraints::default(),
            "default power limit",
        );
        let many: Vec<f64> = (0..70).map(|step| 100.0 - f64::from(step) * 0.5).collect();
        refused(spec(many, vec![], None), &rtx4090(), "too many");
    }

    #[test]
    fn lists_parse_with_percent_signs_and_spaces() {
        assert_eq!(
            parse_list::<f64>("--power-limits", "100, 90%,80 ,").unwrap(),
            vec![100.0, 90.0, 80.0]
        );
        let error = parse_list::<u32>("--clock-caps", "2400,fast").unwrap_err();
        assert!(error.contains("\"fast\""), "{error}");
    }
}
