//! The run's closing figures: duration, energy, average power and peak temperature over the
//! command's own window, and what that energy cost.

use crate::job_energy::cost::{COST_HINT, Price, cost_line};
use gputune_formats::card::Telemetry;

/// "Duration 2.10 s, energy 0.1834 Wh, average power 314 W, peak temperature 71 °C.": every
/// figure over the command's window (from `started_ms`, `duration_s` long), so the energy is
/// the average power times the duration. The energy counter is read between two readings
/// by straight lines; without a counter, or readings that do not span the window, the power
/// of the readings there is and the line says the energy is estimated. Over several cards
/// (each card's readings in `cards`) the power and energy are the box's, summed.
pub(crate) fn run_line(cards: &[&[Telemetry]], started_ms: u64, duration_s: f64) -> String {
    let duration_s = duration_s.max(0.0);
    let (average_power_w, exact) = box_power_w(cards, started_ms, duration_s);
    let energy = average_power_w.map_or_else(
        || "n/a".to_string(),
        |watts| {
            let wh = watts * duration_s / 3600.0;
            let digits = if wh < 0.1 { 4 } else { 3 };
            format!(
                "{wh:.digits$} Wh{}",
                if exact { "" } else { " (estimated)" }
            )
        },
    );
    let power = average_power_w.map_or_else(
        || "n/a".to_string(),
        |watts| match cards.len() {
            1 => format!("{watts:.0} W"),
            count => format!("{watts:.0} W ({count} cards summed)"),
        },
    );
    let temperature = cards
        .iter()
        .flat_map(|samples| samples.iter())
        .filter_map(|sample| sample.temperature_c)
        .max()
        .map_or_else(|| "n/a".to_string(), |celsius| format!("{celsius} °C"));
    let duration = if duration_s < 10.0 {
        format!("{duration_s:.2} s")
    } else {
        format!("{duration_s:.1} s")
    };
    format!(
        "Duration {duration}, energy {energy}, average power {power}, peak temperature {temperature}."
    )
}

/// The cards' average power summed over the command's window (unknown when any card's is),
/// and whether every card's is its energy counter's over the whole window.
fn box_power_w(cards: &[&[Telemetry]], started_ms: u64, duration_s: f64) -> (Option<f64>, bool) {
    cards
        .iter()
        .fold((Some(0.0), true), |(sum, exact), samples| {
            let (watts, card_exact) = average_power_w(samples, started_ms, duration_s);
            (
                sum.zip(watts).map(|(sum, watts)| sum + watts),
                exact && card_exact,
            )
        })
}

/// The average power over the command's window, and whether it is the energy counter's over
/// the whole window (else the readings' mean power: estimated).
fn average_power_w(samples: &[Telemetry], started_ms: u64, duration_s: f64) -> (Option<f64>, bool) {
    let ended_ms = started_ms.saturating_add((duration_s * 1000.0).round() as u64);
    match window_power_w(samples, started_ms, ended_ms) {
        Some((watts, exact)) => (Some(watts), exact),
        None => {
            let draws: Vec<f64> = samples
                .iter()
                .filter_map(|sample| sample.power_draw_mw)
                .map(|milliwatts| f64::from(milliwatts) / 1000.0)
                .collect();
            let mean = (!draws.is_empty()).then(|| draws.iter().sum::<f64>() / draws.len() as f64);
            (mean, false)
        }
    }
}

/// "0.0021 kWh, €0.0007, 0.8 g CO₂ at your ~/.config/gputune/cost.toml.": the command's
/// energy (as `run_line` counts it) at `price`; without a price, how to set one; `None`
/// without a power reading.
pub(crate) fn cost_sentence(
    cards: &[&[Telemetry]],
    started_ms: u64,
    duration_s: f64,
    price: Option<&Price>,
) -> Option<String> {
    let duration_s = duration_s.max(0.0);
    let (Some(watts), exact) = box_power_w(cards, started_ms, duration_s) else {
        return None;
    };
    let energy_j = watts * duration_s;
    let estimated = if exact { "" } else { " (estimated)" };
    Some(match price {
        Some(price) => format!(
            "{}{estimated} at {}.",
            cost_line(energy_j, Some(&price.job_cost(energy_j))),
            price.from
        ),
        None => format!(
            "{}{estimated}; no price is set: {COST_HINT}.",
            cost_line(energy_j, None)
        ),
    })
}

/// The average power over `[started_ms, ended_ms]` from the energy counter (millijoules per
/// millisecond are watts), and whether readings spanned the whole window; `None` without a
/// counter that rose over at least two readings (a driver reload resets it).
fn window_power_w(samples: &[Telemetry], started_ms: u64, ended_ms: u64) -> Option<(f64, bool)> {
    let mut points: Vec<(u64, u64)> = samples
        .iter()
        .filter_map(|sample| Some((sample.sampled_at_ms, sample.energy_total_mj?)))
        .collect();
    points.sort_unstable();
    points.dedup_by_key(|point| point.0);
    if points.windows(2).any(|pair| pair[1].1 < pair[0].1) {
        return None;
    }
    let (first, last) = (*points.first()?, *points.last()?);
    if last.0 <= first.0 {
        return None;
    }
    let exact = first.0 <= started_ms && ended_ms <= last.0;
    let from_ms = started_ms.clamp(first.0, last.0);
    let to_ms = ended_ms.clamp(first.0, last.0);
    if to_ms <= from_ms {
        // A window of no length, or outside the readings: the readings' own average.
        let watts = (last.1 - first.1) as f64 / (last.0 - first.0) as f64;
        return Some((watts, exact && started_ms == ended_ms));
    }
    let watts =
        (energy_at_mj(&points, to_ms) - energy_at_mj(&points, from_ms)) / (to_ms - from_ms) as f64;
    Some((watts, exact))
}

/// The counter at `at_ms`, on the straight line between the readings around it (`points`
/// sorted by time, `at_ms` within them).
fn energy_at_mj(points: &[(u64, u64)], at_ms: u64) -> f64 {
    let after = points.partition_point(|point| point.0 < at_ms);
    match (
        after.checked_sub(1).and_then(|before| points.get(before)),
        points.get(after),
    ) {
        (Some(&(t0, e0)), Some(&(t1, e1))) if t1 > t0 => {
            e0 as f64 + (e1 as f64 - e0 as f64) * (at_ms - t0) as f64 / (t1 - t0) as f64
        }
        (_, Some(&(_, energy))) | (Some(&(_, energy)), None) => energy as f64,
        (None, None) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at_ms: u64, energy_mj: u64, power_w: u32) -> Telemetry {
        Telemetry {
            sampled_at_ms: at_ms,
            energy_total_mj: Some(energy_mj),
            power_draw_mw: Some(power_w * 1000),
            temperature_c: Some(60),
            ..Telemetry::default()
        }
    }

    #[test]
    fn the_cost_sentence_says_kwh_cost_and_co2_at_whose_price_or_how_to_set_one() {
        // 3,600 W for an hour by the counter: 3.6 kWh.
        let samples = [
            reading(0, 0, 3_600),
            reading(3_600_000, 12_960_000_000, 3_600),
        ];
        let price = Price {
            config: gputune_formats::jobs::CostConfig {
                price_per_kwh: Some(0.25),
                currency: Some("€".to_string()),
                co2_grams_per_kwh: Some(350.0),
            },
            from: "your /home/alice/.config/gputune/cost.toml".to_string(),
        };
        assert_eq!(
            cost_sentence(&[&samples], 0, 3_600.0, Some(&price)).as_deref(),
            Some("3.60 kWh, €0.90, 1.3 kg CO₂ at your /home/alice/.config/gputune/cost.toml.")
        );
        let without = cost_sentence(&[&samples], 0, 3_600.0, None).unwrap_or_default();
        assert!(
            without.starts_with("3.60 kWh; no price is set: set a price in cost.toml"),
            "{without}"
        );
        assert_eq!(cost_sentence(&[&[]], 0, 1.0, Some(&price)), None);
    }

    #[test]
    fn a_short_command_between_two_readings_gets_their_power_times_its_own_duration() {
        // 300 W between the readings (300 J over 1 s); the command runs 0.1 s inside them.
        let samples = [
            reading(10_000, 1_000_000, 280),
            reading(11_000, 1_300_000, 320),
        ];
        let line = run_line(&[&samples], 10_400, 0.1);
        assert_eq!(
            line,
            "Duration 0.10 s, energy 0.0083 Wh, average power 300 W, peak temperature 60 °C."
        );
        // A longer one spanning three readings at different powers: the counter decides.
        let samples = [
            reading(0, 0, 100),
            reading(1_000, 100_000, 100),
            reading(2_000, 400_000, 300),
        ];
        // 0.5 s at 100 W, then 1 s at 300 W: 350 J over 1.5 s, 233 W.
        let line = run_line(&[&samples], 500, 1.5);
        assert!(
            line.starts_with("Duration 1.50 s, energy 0.0972 Wh, average power 233 W"),
            "{line}"
        );
    }

    #[test]
    fn readings_that_miss_part_of_the_window_or_no_counter_say_the_energy_is_estimated() {
        let samples = [reading(1_000, 0, 200), reading(2_000, 200_000, 200)];
        let line = run_line(&[&samples], 1_500, 2.0);
        assert!(
            line.starts_with("Duration 2.00 s, energy 0.111 Wh (estimated), average power 200 W"),
            "{line}"
        );
        let mut without_counter = samples.clone();
        for sample in &mut without_counter {
            sample.energy_total_mj = None;
        }
        assert!(
            run_line(&[&without_counter], 1_000, 1.0).contains("energy 0.0556 Wh (estimated)"),
            "{}",
            run_line(&[&without_counter], 1_000, 1.0)
        );
        // A counter that went backwards (driver reload) is not trusted.
        let reloaded = [reading(0, 500_000, 250), reading(1_000, 1_000, 250)];
        assert!(run_line(&[&reloaded], 0, 1.0).contains("average power 250 W"));
        assert_eq!(
            run_line(&[&[]], 0, 1.0),
            "Duration 1.00 s, energy n/a, average power n/a, peak temperature n/a."
        );
    }
}
