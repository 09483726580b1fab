//! The power limit that keeps a hot card under its throttle temperature, computed from its
//! measured heating: a card's temperature rises about linearly with its power above rest
//! (`T = T_idle + k · (P − P_idle)`, k in °C per watt, set by its cooler and its slot's
//! air), so the power at which it stays `margin` below the temperature where it began to
//! throttle is `P_load − (T_load − T_target) / k`.

use gputune_formats::card::Constraints;
use gputune_formats::reports::rank::{PhaseFigures, PowerLimitRemedy};

use super::watch::IdlePoint;

/// A phase throttled for heat this share of the time or more throttled.
pub const THERMAL_PCT: f64 = 10.0;
/// Degrees under the temperature where throttling began that the limit aims at.
pub const MARGIN_C: f64 = 2.0;
/// Two points closer than this in power give no usable slope.
const SHORTEST_POWER_SPAN_W: f64 = 20.0;

/// What the remedy is computed from for one card.
#[derive(Debug, Clone, Copy)]
pub struct HeatEvidence<'a> {
    pub gpu_index: u32,
    pub constraints: &'a Constraints,
    pub idle: Option<IdlePoint>,
    pub alone: Option<&'a PhaseFigures>,
    pub together: Option<&'a PhaseFigures>,
}

/// A phase's steady-ish point: the temperature and power of its second half.
fn load_point(figures: &PhaseFigures) -> Option<(f64, f64)> {
    Some((figures.late_temperature_mean_c?, figures.late_power_mean_w?))
}

/// The slope between two points (°C per W), when they are far enough apart and it is a
/// heating (positive).
fn slope((t_low, p_low): (f64, f64), (t_high, p_high): (f64, f64)) -> Option<f64> {
    let power_span = p_high - p_low;
    let slope = (t_high - t_low) / power_span;
    (power_span.abs() >= SHORTEST_POWER_SPAN_W && slope.is_finite() && slope > 0.0).then_some(slope)
}

impl HeatEvidence<'_> {
    /// The card's own heating: from its rest to its load, else between its two phases.
    pub fn own_heating(&self) -> Option<(f64, &'static str)> {
        let load = self.together.or(self.alone).and_then(load_point)?;
        if let Some(idle) = self.idle
            && let Some(slope) = slope((idle.temperature_c, idle.power_w), load)
        {
            return Some((slope, "its reading at rest and under load"));
        }
        let alone = self.alone.and_then(load_point)?;
        let together = self.together.and_then(load_point)?;
        slope(alone, together).map(|slope| (slope, "its load alone and together"))
    }
}

/// The power limit for `card` (which throttled for heat), or why there is none. `peers`: the
/// heating measured on the other cards, for one whose own could not be.
pub fn power_limit(card: &HeatEvidence<'_>, peers: &[f64]) -> Result<PowerLimitRemedy, String> {
    let index = card.gpu_index;
    let throttled = [card.together, card.alone]
        .into_iter()
        .flatten()
        .find(|figures| figures.thermal_throttle_from_c.is_some())
        .ok_or_else(|| format!("GPU {index} did not throttle for heat: no limit is needed"))?;
    let (Some(throttle_from_c), Some((load_c, load_w))) =
        (throttled.thermal_throttle_from_c, load_point(throttled))
    else {
        return Err(format!(
            "GPU {index} has too few readings to set a limit from"
        ));
    };
    let (heating, from) = match card.own_heating() {
        Some((slope, from)) => (slope, from.to_string()),
        None => match median(peers) {
            Some(slope) => (
                slope,
                "the other cards' (it was under load before the ranking began)".to_string(),
            ),
            None => {
                return Err(format!(
                    "GPU {index}'s heating could not be measured: no card was at rest before its load began (rank them from rest, with nothing else running)"
                ));
            }
        },
    };
    let target_c = f64::from(throttle_from_c) - MARGIN_C;
    let wanted_w = (load_w - (load_c - target_c).max(0.0) / heating).min(load_w);
    let Some((power_limit_mw, percent)) = limit_in_range(wanted_w, card.constraints) else {
        return Err(format!(
            "GPU {index} does not say its power limit's range: no limit can be set on it"
        ));
    };
    let limit_w = f64::from(power_limit_mw) / 1000.0;
    // Its rate at the limit, from its rate alone when heat did not hold it back there.
    let predicted_tflops = card
        .alone
        .filter(|alone| alone.thermal_pct() < THERMAL_PCT)
        .and_then(|alone| {
            Some(rate_at_power(
                alone.gemm_tflops?,
                alone.power_mean_w?,
                limit_w,
            ))
        });
    let throttled_tflops = card.together.and_then(|together| together.gemm_tflops);
    let evens_the_box = predicted_tflops
        .zip(throttled_tflops)
        .is_some_and(|(predicted, now)| predicted > now * 1.005);
    Ok(PowerLimitRemedy {
        gpu_index: index,
        power_limit_mw,
        percent_of_default: percent,
        target_c,
        heating_c_per_w: heating,
        heating_from: from,
        predicted_tflops,
        evens_the_box,
    })
}

/// `wanted_w` as a power limit the card takes: whole percent of its default, rounded down,
/// within its range; with that percent. `None` when the card does not say its range.
pub fn limit_in_range(wanted_w: f64, constraints: &Constraints) -> Option<(u32, u32)> {
    let (Some(default_mw), Some(min_mw), Some(max_mw)) = (
        constraints.power_limit_default_mw,
        constraints.power_limit_min_mw,
        constraints.power_limit_max_mw,
    ) else {
        return None;
    };
    let default_w = f64::from(default_mw) / 1000.0;
    let lowest_pct = (f64::from(min_mw) / 1000.0 / default_w * 100.0).ceil();
    let highest_pct = (f64::from(max_mw) / 1000.0 / default_w * 100.0).floor();
    let percent = (wanted_w / default_w * 100.0)
        .floor()
        .clamp(lowest_pct, highest_pct.max(lowest_pct));
    let power_limit_mw =
        ((percent / 100.0 * f64::from(default_mw)).round() as u32).clamp(min_mw, max_mw);
    Some((power_limit_mw, percent as u32))
}

/// A GEMM rate at another power, from one the card ran at unthrottled by heat: where boost
/// moves the clock, the voltage rises with it, so power grows about as clock³ (dynamic power
/// ∝ f·V²) and the rate as the clock. (The simulated hot slot: 157 TFLOP/s predicted at its
/// 320 W limit, 156 measured.)
pub fn rate_at_power(rate: f64, power_w: f64, at_w: f64) -> f64 {
    rate * (at_w / power_w).cbrt()
}

/// The power at which a card that ran `rate` at `power_w` runs `wanted_rate` (the inverse).
pub fn power_for_rate(rate: f64, power_w: f64, wanted_rate: f64) -> f64 {
    power_w * (wanted_rate / rate).powi(3)
}

/// The middle value (the mean of the two middle ones), finite values only.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        len if len % 2 == 1 => Some(sorted[middle]),
        _ => Some((sorted[middle - 1] + sorted[middle]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::reports::stability::Ending;

    fn phase(late_c: f64, late_w: f64, throttle_from_c: Option<u32>) -> PhaseFigures {
        PhaseFigures {
            ending: Ending::Completed,
            ran_s: 60.0,
            gemm_tflops: Some(160.0),
            results: 1,
            wrong: 0,
            readings: 120,
            clock_mean_mhz: Some(2600.0),
            clock_min_mhz: Some(2500),
            clock_max_mhz: Some(2700),
            power_mean_w: Some(late_w),
            power_limit_w: Some(450.0),
            temperature_start_c: Some(40),
            temperature_peak_c: Some(late_c as u32 + 1),
            temperature_end_c: Some(late_c as u32),
            late_temperature_mean_c: Some(late_c),
            late_power_mean_w: Some(late_w),
            thermal_throttle_from_c: throttle_from_c,
            throttled: Vec::new(),
        }
    }

    fn rtx4090() -> Constraints {
        Constraints {
            power_limit_min_mw: Some(150_000),
            power_limit_max_mw: Some(600_000),
            power_limit_default_mw: Some(450_000),
            ..Constraints::default()
        }
    }

    #[test]
    fn the_limit_keeps_the_card_a_margin_under_where_it_began_to_throttle() {
        let constraints = rtx4090();
        let together = phase(86.0, 430.0, Some(84));
        let card = HeatEvidence {
            gpu_index: 3,
            constraints: &constraints,
            // 36 °C at 30 W: 50 °C over 400 W, 0.125 °C per W.
            idle: Some(IdlePoint {
                temperature_c: 36.0,
                power_w: 30.0,
            }),
            alone: None,
            together: Some(&together),
        };
        let remedy = power_limit(&card, &[]).expect("a limit");
        // 82 °C: 4 °C less, 32 W less: 398 W, 88 % of 450 W (396 W).
        assert_eq!(remedy.target_c, 82.0);
        assert!((remedy.heating_c_per_w - 0.125).abs() < 1e-9);
        assert_eq!(remedy.percent_of_default, 88);
        assert_eq!(remedy.power_limit_mw, 396_000);
        assert_eq!(remedy.heating_from, "its reading at rest and under load");
    }

    #[test]
    fn without_a_reading_at_rest_the_others_heating_serves_and_the_range_holds() {
        let constraints = rtx4090();
        let together = phase(90.0, 440.0, Some(84));
        let card = HeatEvidence {
            gpu_index: 3,
            constraints: &constraints,
            idle: None,
            alone: Some(&together),
            together: Some(&together),
        };
        let remedy = power_limit(&card, &[0.1, 0.5, 0.12]).expect("a limit");
        assert_eq!(remedy.heating_c_per_w, 0.12);
        // 8 °C over 82: 66.7 W less: 373 W, 82 %.
        assert_eq!(remedy.percent_of_default, 82);
        // A card that would need less than its minimum gets the lowest whole percent in range.
        let remedy = power_limit(&card, &[0.01]).expect("a limit");
        assert_eq!(remedy.power_limit_mw, 153_000);
        assert_eq!(remedy.percent_of_default, 34);
        let error = power_limit(&card, &[]).expect_err("no heating");
        assert!(error.contains("rank them from rest"), "{error}");
    }

    #[test]
    fn a_card_that_never_throttled_for_heat_needs_no_limit() {
        let constraints = rtx4090();
        let cool = phase(70.0, 440.0, None);
        let card = HeatEvidence {
            gpu_index: 0,
            constraints: &constraints,
            idle: None,
            alone: Some(&cool),
            together: Some(&cool),
        };
        assert!(power_limit(&card, &[0.1]).is_err());
    }
}
