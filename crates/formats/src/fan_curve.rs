//! A fan curve: temperature → fan speed points the device-owner thread follows. Pure: the
//! curve computes a target; the sampler turns it into validated `FanSpeed` settings.

use serde::{Deserialize, Serialize};

use super::card::FanRangePct;

/// One point of a curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurvePoint {
    pub temperature_c: f64,
    pub speed_pct: f64,
}

/// A fan curve, kept sorted by temperature. Read from anywhere (a profile, a client of the
/// daemon) only through [`FanCurve::new`]'s checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FanCurveParts")]
pub struct FanCurve {
    points: Vec<CurvePoint>,
    /// Degrees the temperature must fall before the speed follows it down, so fans do not
    /// hunt around a point.
    pub hysteresis_c: f64,
}

/// A curve as written down, before its checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FanCurveParts {
    points: Vec<CurvePoint>,
    hysteresis_c: f64,
}

impl TryFrom<FanCurveParts> for FanCurve {
    type Error = FanCurveError;

    fn try_from(parts: FanCurveParts) -> Result<FanCurve, FanCurveError> {
        FanCurve::new(parts.points, parts.hysteresis_c)
    }
}

/// The most points a curve may have.
pub const MAX_POINTS: usize = 32;

/// How hot a card must be allowed to get before a curve has to run its fans hard.
pub const HOT_TEMPERATURE_C: f64 = 85.0;
/// The least a curve may ask for at [`HOT_TEMPERATURE_C`].
pub const LEAST_SPEED_WHEN_HOT_PCT: f64 = 70.0;

/// Why a curve cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FanCurveError {
    #[error("A fan curve needs at least 2 points, not {0}.")]
    TooFewPoints(usize),
    #[error("A fan curve has {0} points; at most {MAX_POINTS} are allowed.")]
    TooManyPoints(usize),
    #[error("A fan curve point at {0} °C is outside 0-110 °C.")]
    TemperatureOutOfRange(f64),
    #[error("A fan curve point of {0} % is outside 0-100 %.")]
    SpeedOutOfRange(f64),
    #[error(
        "A fan curve has two points at {0} °C: each temperature may appear once (temperatures must strictly increase)."
    )]
    RepeatedTemperature(f64),
    #[error(
        "A fan curve must not slow the fans as the card warms: {higher_c} °C asks for {higher_pct} %, less than the {lower_pct} % at {lower_c} °C."
    )]
    Falls {
        lower_c: f64,
        lower_pct: f64,
        higher_c: f64,
        higher_pct: f64,
    },
    #[error(
        "A fan curve must ask for at least {LEAST_SPEED_WHEN_HOT_PCT} % by {HOT_TEMPERATURE_C} °C (this one asks for {0:.0} %): a card that hot needs its fans."
    )]
    TooSlowWhenHot(f64),
}

impl Default for FanCurve {
    /// A quiet curve for a training box: minimum speed until 50 °C, full speed at 85 °C.
    fn default() -> FanCurve {
        let point = |temperature_c, speed_pct| CurvePoint {
            temperature_c,
            speed_pct,
        };
        FanCurve {
            points: vec![
                point(40.0, 30.0),
                point(60.0, 45.0),
                point(72.0, 65.0),
                point(85.0, 100.0),
            ],
            hysteresis_c: 3.0,
        }
    }
}

impl FanCurve {
    /// A curve from points in any order. Refuses a curve that cannot mean anything, or that
    /// would let a card cook: one that slows the fans as the card warms, or that asks for less
    /// than [`LEAST_SPEED_WHEN_HOT_PCT`] at [`HOT_TEMPERATURE_C`].
    pub fn new(mut points: Vec<CurvePoint>, hysteresis_c: f64) -> Result<FanCurve, FanCurveError> {
        if points.len() < 2 {
            return Err(FanCurveError::TooFewPoints(points.len()));
        }
        if points.len() > MAX_POINTS {
            return Err(FanCurveError::TooManyPoints(points.len()));
        }
        for point in &points {
            if !(0.0..=110.0).contains(&point.temperature_c) {
                return Err(FanCurveError::TemperatureOutOfRange(point.temperature_c));
            }
            if !(0.0..=100.0).contains(&point.speed_pct) {
                return Err(FanCurveError::SpeedOutOfRange(point.speed_pct));
            }
        }
        points.sort_by(|a, b| a.temperature_c.total_cmp(&b.temperature_c));
        for pair in points.windows(2) {
            let (lower, higher) = (pair[0], pair[1]);
            if lower.temperature_c == higher.temperature_c {
                return Err(FanCurveError::RepeatedTemperature(lower.temperature_c));
            }
            if higher.speed_pct < lower.speed_pct {
                return Err(FanCurveError::Falls {
                    lower_c: lower.temperature_c,
                    lower_pct: lower.speed_pct,
                    higher_c: higher.temperature_c,
                    higher_pct: higher.speed_pct,
                });
            }
        }
        let hysteresis_c = if hysteresis_c.is_finite() {
            hysteresis_c.clamp(0.0, 10.0)
        } else {
            0.0
        };
        let curve = FanCurve {
            points,
            hysteresis_c,
        };
        let when_hot = curve.speed_at(HOT_TEMPERATURE_C);
        if when_hot < LEAST_SPEED_WHEN_HOT_PCT {
            return Err(FanCurveError::TooSlowWhenHot(when_hot));
        }
        Ok(curve)
    }

    pub fn points(&self) -> &[CurvePoint] {
        &self.points
    }

    /// The speed the curve asks for at `temperature_c`, interpolated and held flat beyond the
    /// first and last points.
    pub fn speed_at(&self, temperature_c: f64) -> f64 {
        let (Some(first), Some(last)) = (self.points.first(), self.points.last()) else {
            return 100.0;
        };
        if !temperature_c.is_finite() {
            // An unreadable temperature must not slow the fans down.
            return 100.0;
        }
        if temperature_c <= first.temperature_c {
            return first.speed_pct;
        }
        for pair in self.points.windows(2) {
            let (low, high) = (pair[0], pair[1]);
            if temperature_c <= high.temperature_c {
                let span = (high.temperature_c - low.temperature_c).max(f64::EPSILON);
                let fraction = (temperature_c - low.temperature_c) / span;
                return low.speed_pct + fraction * (high.speed_pct - low.speed_pct);
            }
        }
        last.speed_pct
    }

    /// The whole-percent speed to set, clamped to what the card accepts, following `previous`
    /// down only once the temperature has fallen by the hysteresis.
    pub fn target_pct(
        &self,
        temperature_c: f64,
        previous_pct: Option<u32>,
        range: FanRangePct,
    ) -> u32 {
        let wanted = self.speed_at(temperature_c);
        let settled = match previous_pct {
            Some(previous) if wanted < f64::from(previous) => {
                let cooled = self.speed_at(temperature_c + self.hysteresis_c);
                // Only step down to what the curve asks a few degrees higher.
                cooled.min(f64::from(previous))
            }
            _ => wanted,
        };
        let clamped = settled
            .round()
            .clamp(f64::from(range.min_pct), f64::from(range.max_pct));
        clamped as u32
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const RTX4090_FANS: FanRangePct = FanRangePct {
        min_pct: 30,
        max_pct: 100,
    };

    #[test]
    fn interpolates_and_holds_flat_at_the_ends() {
        let curve = FanCurve::default();
        assert_eq!(curve.speed_at(20.0), 30.0);
        assert_eq!(curve.speed_at(50.0), 37.5);
        assert_eq!(curve.speed_at(95.0), 100.0);
        assert_eq!(curve.speed_at(f64::NAN), 100.0);
    }

    #[test]
    fn points_below_the_card_minimum_are_clamped_not_sent() {
        let curve = FanCurve::new(points(&[(30.0, 0.0), (80.0, 100.0)]), 0.0);
        let Ok(curve) = curve else {
            panic!("valid curve")
        };
        assert_eq!(curve.target_pct(30.0, None, RTX4090_FANS), 30);
    }

    #[test]
    fn hysteresis_holds_the_speed_until_the_card_has_cooled() {
        let curve = FanCurve::default();
        let at_72 = curve.target_pct(72.0, None, RTX4090_FANS);
        assert_eq!(at_72, 65);
        // One degree cooler: still 65 %, the hysteresis is 3 °C.
        assert_eq!(curve.target_pct(71.0, Some(at_72), RTX4090_FANS), 65);
        assert!(curve.target_pct(66.0, Some(at_72), RTX4090_FANS) < 65);
    }

    fn points(pairs: &[(f64, f64)]) -> Vec<CurvePoint> {
        pairs
            .iter()
            .map(|&(temperature_c, speed_pct)| CurvePoint {
                temperature_c,
                speed_pct,
            })
            .collect()
    }

    #[test]
    fn falling_zigzag_repeated_and_too_quiet_curves_are_refused() {
        let falling = FanCurve::new(points(&[(40.0, 80.0), (85.0, 30.0)]), 3.0);
        assert!(
            matches!(falling, Err(FanCurveError::Falls { .. })),
            "{falling:?}"
        );
        let zigzag = FanCurve::new(
            points(&[(40.0, 30.0), (60.0, 70.0), (70.0, 50.0), (85.0, 100.0)]),
            3.0,
        );
        let message = zigzag
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(message.contains("70 °C asks for 50 %"), "{message}");
        assert!(matches!(
            FanCurve::new(points(&[(60.0, 30.0), (60.0, 100.0)]), 3.0),
            Err(FanCurveError::RepeatedTemperature(_))
        ));
        let quiet = FanCurve::new(points(&[(40.0, 10.0), (85.0, 10.0)]), 3.0);
        let message = quiet
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(message.contains("at least 70 % by 85 °C"), "{message}");
        // Points in any order are fine as long as the curve rises.
        assert!(FanCurve::new(points(&[(85.0, 100.0), (40.0, 30.0)]), 3.0).is_ok());
    }

    #[test]
    fn nonsense_curves_are_refused_with_a_reason() {
        assert_eq!(
            FanCurve::new(vec![], 1.0),
            Err(FanCurveError::TooFewPoints(0))
        );
        let hot = vec![
            CurvePoint {
                temperature_c: 40.0,
                speed_pct: 30.0,
            },
            CurvePoint {
                temperature_c: 400.0,
                speed_pct: 100.0,
            },
        ];
        assert!(matches!(
            FanCurve::new(hot, 1.0),
            Err(FanCurveError::TemperatureOutOfRange(_))
        ));
    }

    #[test]
    fn a_curve_read_from_json_passes_the_same_checks() {
        let falling = r#"{"points":[{"temperature_c":40,"speed_pct":90},{"temperature_c":85,"speed_pct":30}],"hysteresis_c":3}"#;
        let error = serde_json::from_str::<FanCurve>(falling)
            .unwrap_err()
            .to_string();
        assert!(error.contains("must not slow the fans"), "{error}");
        let good = serde_json::to_string(&FanCurve::default()).unwrap();
        assert_eq!(
            serde_json::from_str::<FanCurve>(&good).unwrap(),
            FanCurve::default()
        );
    }

    proptest! {
        #[test]
        fn targets_always_lie_within_the_card_range(
            temperature_c in -50.0f64..200.0,
            previous in proptest::option::of(0u32..150),
            min_pct in 0u32..60,
            span in 0u32..60,
        ) {
            let range = FanRangePct { min_pct, max_pct: min_pct + span };
            let target = FanCurve::default().target_pct(temperature_c, previous, range);
            prop_assert!((range.min_pct..=range.max_pct).contains(&target));
        }
    }
}
