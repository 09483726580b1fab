//! What a check does and when: its options (checked before anything runs) and its schedule of
//! rounds, each a full GEMM load, a pulsed one, the FMA chains and a pass over the VRAM.
//!
//! Pulsed load matters: a card boosts highest, at its lowest voltage, around 40-60 % load,
//! and that is where a too-deep undervolt fails first (OCCT's finding). The pulses walk the
//! duty cycles below so the card moves through its whole voltage/frequency curve.

use super::compute::ComputeSetup;
use gputune_formats::reports::stability::LoadShape;

/// The shortest check accepted: a second still runs every part once.
pub const SHORTEST_CHECK_S: f64 = 1.0;
/// A day is longer than any check needs.
pub const LONGEST_CHECK_S: f64 = 86_400.0;
/// A round's length in a long check: every part runs at least this often.
const ROUND_S: f64 = 30.0;
/// Period of one pulse (busy, then idle).
const PULSE_PERIOD_S: f64 = 1.0;
/// The duty cycles the pulses walk, each for a quarter of the pulsed time.
pub const PULSE_DUTIES: [f64; 4] = [0.2, 0.4, 0.6, 0.8];

/// A check's options, valid by construction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckOptions {
    pub duration_s: f64,
    pub shape: LoadShape,
    pub setup: ComputeSetup,
}

impl CheckOptions {
    /// Options for `duration_s` brought into the accepted range (NaN: the shortest).
    pub fn clamped(duration_s: f64, shape: LoadShape) -> CheckOptions {
        let duration_s = if duration_s.is_nan() {
            SHORTEST_CHECK_S
        } else {
            duration_s.clamp(SHORTEST_CHECK_S, LONGEST_CHECK_S)
        };
        CheckOptions {
            duration_s,
            shape,
            setup: ComputeSetup::standard(),
        }
    }

    pub fn new(duration_s: f64, shape: LoadShape) -> Result<CheckOptions, String> {
        if !duration_s.is_finite() || !(SHORTEST_CHECK_S..=LONGEST_CHECK_S).contains(&duration_s) {
            return Err(format!(
                "--duration-s {duration_s}: give {SHORTEST_CHECK_S} to {LONGEST_CHECK_S} seconds (600, ten minutes, is a thorough check)."
            ));
        }
        Ok(CheckOptions {
            duration_s,
            shape,
            setup: ComputeSetup::standard(),
        })
    }
}

/// One part of a round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Part {
    /// GEMM passes back to back for `seconds`.
    FullLoad { seconds: f64 },
    /// GEMM in bursts of `duty` × the pulse period, idle in between, for `seconds`.
    Pulsed { duty: f64, seconds: f64 },
    /// FMA-chain passes for `seconds`.
    Fma { seconds: f64 },
    /// One pass of every memory pattern over the tested VRAM.
    Vram,
}

impl Part {
    pub fn describe(self) -> String {
        match self {
            Part::FullLoad { .. } => "full GEMM load".to_string(),
            Part::Pulsed { duty, .. } => format!("GEMM pulsed at {:.0} %", duty * 100.0),
            Part::Fma { .. } => "FMA chains".to_string(),
            Part::Vram => "VRAM patterns".to_string(),
        }
    }
}

/// The parts of one round of `round_s` seconds: GEMM (full, pulsed or both) for 80 % of it,
/// the FMA chains for 10 %, then the VRAM patterns (as long as they take).
pub fn round(shape: LoadShape, round_s: f64) -> Vec<Part> {
    let gemm_s = round_s * 0.8;
    let mut parts = Vec::new();
    let pulsed = |parts: &mut Vec<Part>, seconds: f64| {
        for duty in PULSE_DUTIES {
            parts.push(Part::Pulsed {
                duty,
                seconds: seconds / PULSE_DUTIES.len() as f64,
            });
        }
    };
    match shape {
        LoadShape::Full => parts.push(Part::FullLoad { seconds: gemm_s }),
        LoadShape::Pulsed => pulsed(&mut parts, gemm_s),
        LoadShape::Both => {
            parts.push(Part::FullLoad {
                seconds: gemm_s / 2.0,
            });
            pulsed(&mut parts, gemm_s / 2.0);
        }
    }
    parts.push(Part::Fma {
        seconds: round_s * 0.1,
    });
    parts.push(Part::Vram);
    parts
}

/// How long each round of a check of `duration_s` lasts: 30 s, or the whole check if shorter.
pub fn round_length_s(duration_s: f64) -> f64 {
    duration_s.clamp(SHORTEST_CHECK_S, ROUND_S)
}

/// Within a pulsed part, whether the card is in a burst `elapsed_s` after the part began.
pub fn in_burst(duty: f64, elapsed_s: f64) -> bool {
    (elapsed_s % PULSE_PERIOD_S) < duty * PULSE_PERIOD_S
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(part: &Part) -> f64 {
        match *part {
            Part::FullLoad { seconds } | Part::Pulsed { seconds, .. } | Part::Fma { seconds } => {
                seconds
            }
            Part::Vram => 0.0,
        }
    }

    #[test]
    fn a_round_of_both_splits_the_gemm_time_between_full_and_every_duty() {
        let parts = round(LoadShape::Both, 30.0);
        assert_eq!(parts.len(), 1 + 4 + 2);
        assert_eq!(parts[0], Part::FullLoad { seconds: 12.0 });
        assert_eq!(
            parts[1..5]
                .iter()
                .map(|part| match part {
                    Part::Pulsed { duty, .. } => *duty,
                    _ => -1.0,
                })
                .collect::<Vec<_>>(),
            PULSE_DUTIES.to_vec()
        );
        let timed: f64 = parts.iter().map(seconds).sum();
        assert!((timed - 27.0).abs() < 1e-9);
        assert_eq!(parts.last(), Some(&Part::Vram));
    }

    #[test]
    fn full_and_pulsed_rounds_have_only_their_own_load() {
        assert!(
            round(LoadShape::Full, 10.0)
                .iter()
                .all(|part| !matches!(part, Part::Pulsed { .. }))
        );
        assert!(
            round(LoadShape::Pulsed, 10.0)
                .iter()
                .all(|part| !matches!(part, Part::FullLoad { .. }))
        );
    }

    #[test]
    fn short_checks_are_one_round_and_long_ones_thirty_seconds_a_round() {
        assert_eq!(round_length_s(2.0), 2.0);
        assert_eq!(round_length_s(600.0), 30.0);
    }

    #[test]
    fn bursts_take_their_duty_of_each_period() {
        assert!(in_burst(0.4, 0.1));
        assert!(!in_burst(0.4, 0.5));
        assert!(in_burst(0.4, 1.2));
    }

    #[test]
    fn absurd_durations_are_refused_with_the_range() {
        for bad in [0.0, -5.0, f64::NAN, f64::INFINITY, 1e9] {
            let error = CheckOptions::new(bad, LoadShape::Both).err();
            assert!(
                error
                    .as_deref()
                    .is_some_and(|text| text.contains("1 to 86400")),
                "{bad}: {error:?}"
            );
        }
        assert!(CheckOptions::new(60.0, LoadShape::Full).is_ok());
    }
}
