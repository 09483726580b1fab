//! What a GPU did over a run of samples, for every before / during comparison (a trial, a run,
//! a sweep step): one statistics type, and one comparison table that the window draws as a grid
//! and the terminal prints as text.

use crate::device::{Telemetry, ThrottleReason};
pub use crate::formats::tuning::{TemperatureTrend, ThrottleTime, TrialStats};

/// The span over which the temperature must hold still to count as settled.
const SETTLE_WINDOW_MS: u64 = 30_000;
/// Settled: the temperature moved less than this over the settle window.
const SETTLED_WITHIN_C: f64 = 1.5;

impl TrialStats {
    /// Summarizes `samples` (oldest first). Readings a card does not report stay `None`.
    pub fn from_samples(samples: &[Telemetry]) -> TrialStats {
        let duration_s = match (samples.first(), samples.last()) {
            (Some(first), Some(last)) => {
                last.sampled_at_ms.saturating_sub(first.sampled_at_ms) as f64 / 1000.0
            }
            _ => 0.0,
        };
        let counted = energy_counted(samples);
        let mean_power_w = average(samples.iter().filter_map(|sample| sample.power_draw_mw))
            .map(|milliwatts| milliwatts / 1000.0);
        let average_power_w = match counted {
            Some((joules, seconds)) if seconds > 0.0 => Some(joules / seconds),
            _ => mean_power_w,
        };
        let energy_wh_per_min = match counted {
            Some((joules, seconds)) if seconds > 0.0 => Some(joules / 3600.0 / (seconds / 60.0)),
            _ => mean_power_w.map(|watts| watts / 60.0),
        };
        let mut throttle_s = Vec::new();
        for reason in ThrottleReason::ALL {
            let milliseconds: u64 = samples
                .windows(2)
                .filter(|pair| {
                    pair[1]
                        .throttle_reasons
                        .is_some_and(|reasons| reasons.contains(reason))
                })
                .map(|pair| pair[1].sampled_at_ms.saturating_sub(pair[0].sampled_at_ms))
                .sum();
            if milliseconds > 0 {
                throttle_s.push(ThrottleTime {
                    reason,
                    seconds: milliseconds as f64 / 1000.0,
                });
            }
        }
        let fan_speeds = samples
            .iter()
            .flat_map(|sample| sample.fans.iter().flatten().filter_map(|fan| fan.speed_pct));
        TrialStats {
            samples: samples.len(),
            duration_s,
            average_power_w,
            average_sm_clock_mhz: average(samples.iter().filter_map(|sample| sample.sm_clock_mhz)),
            min_sm_clock_mhz: samples
                .iter()
                .filter_map(|sample| sample.sm_clock_mhz)
                .min(),
            average_temperature_c: average(
                samples.iter().filter_map(|sample| sample.temperature_c),
            ),
            peak_temperature_c: samples
                .iter()
                .filter_map(|sample| sample.temperature_c)
                .max(),
            average_fan_speed_pct: average(fan_speeds),
            energy_wh: counted.map(|(joules, _)| joules / 3600.0),
            energy_wh_per_min,
            throttle_s,
            temperature_trend: temperature_trend(samples),
        }
    }

    /// Seconds under `reason` (0 when it never showed).
    pub fn throttled_s(&self, reason: ThrottleReason) -> f64 {
        self.throttle_s
            .iter()
            .find(|time| time.reason == reason)
            .map_or(0.0, |time| time.seconds)
    }

    /// "Duration 12.3 s, energy 1.234 Wh, average power 361 W, peak temperature 71 °C." (what
    /// `gputune run` prints at the end).
    pub fn run_line(&self, duration_s: f64) -> String {
        let energy = self
            .energy_wh
            .map_or_else(|| "n/a".to_string(), |wh| format!("{wh:.3} Wh"));
        let power = self
            .average_power_w
            .map_or_else(|| "n/a".to_string(), |watts| format!("{watts:.0} W"));
        let temperature = self
            .peak_temperature_c
            .map_or_else(|| "n/a".to_string(), |celsius| format!("{celsius} °C"));
        format!(
            "Duration {duration_s:.1} s, energy {energy}, average power {power}, peak temperature {temperature}."
        )
    }
}

fn average(values: impl Iterator<Item = u32>) -> Option<f64> {
    let (sum, count) = values.fold((0.0, 0u32), |(sum, count), value| {
        (sum + f64::from(value), count + 1)
    });
    (count > 0).then(|| sum / f64::from(count))
}

/// Joules and seconds between the energy counter's first and last readings; `None` without a
/// counter, or when it went backwards (driver reload).
fn energy_counted(samples: &[Telemetry]) -> Option<(f64, f64)> {
    let mut with_energy = samples.iter().filter_map(|sample| {
        sample
            .energy_total_mj
            .map(|energy| (sample.sampled_at_ms, energy))
    });
    let first = with_energy.next()?;
    let last = with_energy.next_back()?;
    if last.1 < first.1 {
        return None;
    }
    let joules = (last.1 - first.1) as f64 / 1000.0;
    let seconds = last.0.saturating_sub(first.0) as f64 / 1000.0;
    Some((joules, seconds))
}

/// Settled, still moving, or too short to say, from the last 30 s of temperatures.
fn temperature_trend(samples: &[Telemetry]) -> Option<TemperatureTrend> {
    let last_ms = samples.last()?.sampled_at_ms;
    let first_ms = samples.first()?.sampled_at_ms;
    if last_ms.saturating_sub(first_ms) < SETTLE_WINDOW_MS {
        return Some(TemperatureTrend::TooShort);
    }
    let window: Vec<(f64, f64)> = samples
        .iter()
        .filter(|sample| last_ms.saturating_sub(sample.sampled_at_ms) <= SETTLE_WINDOW_MS)
        .filter_map(|sample| {
            sample.temperature_c.map(|celsius| {
                (
                    sample.sampled_at_ms.saturating_sub(first_ms) as f64 / 60_000.0,
                    f64::from(celsius),
                )
            })
        })
        .collect();
    if window.len() < 3 {
        return None;
    }
    let (lowest, highest) = window
        .iter()
        .fold((f64::MAX, f64::MIN), |(low, high), point| {
            (low.min(point.1), high.max(point.1))
        });
    if highest - lowest <= SETTLED_WITHIN_C {
        return Some(TemperatureTrend::Settled);
    }
    // Least-squares slope, degrees per minute.
    let count = window.len() as f64;
    let mean_x = window.iter().map(|point| point.0).sum::<f64>() / count;
    let mean_y = window.iter().map(|point| point.1).sum::<f64>() / count;
    let (covariance, variance) = window.iter().fold((0.0, 0.0), |(cov, var), point| {
        let dx = point.0 - mean_x;
        (cov + dx * (point.1 - mean_y), var + dx * dx)
    });
    let c_per_min = if variance > 0.0 {
        covariance / variance
    } else {
        0.0
    };
    Some(TemperatureTrend::Moving { c_per_min })
}

/// One row of a before / during comparison, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComparisonRow {
    pub label: String,
    pub before: String,
    pub during: String,
    /// The change: a percentage, and the difference in the unit where a percentage alone
    /// would mislead (temperatures, fan speeds, throttle time).
    pub change: String,
}

/// The rows of a before / during comparison, every value with its unit and the change in %.
pub fn comparison_rows(before: &TrialStats, during: &TrialStats) -> Vec<ComparisonRow> {
    let mut rows = Vec::new();
    let show = |value: Option<f64>, unit: &str, decimals: usize| {
        value.map_or_else(
            || "n/a".to_string(),
            |value| format!("{value:.decimals$} {unit}"),
        )
    };
    let percent = |before: Option<f64>, during: Option<f64>| match (before, during) {
        (Some(before), Some(during)) if before != 0.0 => {
            Some(format!("{:+.1} %", (during - before) / before * 100.0))
        }
        _ => None,
    };
    let mut row = |label: &str,
                   before: Option<f64>,
                   during: Option<f64>,
                   unit: &str,
                   decimals: usize,
                   with_difference: bool| {
        let change = match (percent(before, during), before.zip(during)) {
            (Some(percent), Some((before, during))) if with_difference => {
                // A difference of percentages is in points, not in percent.
                let unit = if unit == "%" { "points" } else { unit };
                format!("{:+.decimals$} {unit} ({percent})", during - before)
            }
            (Some(percent), _) => percent,
            (None, Some((before, during))) => format!("{:+.decimals$} {unit}", during - before),
            (None, None) => String::new(),
        };
        rows.push(ComparisonRow {
            label: label.to_string(),
            before: show(before, unit, decimals),
            during: show(during, unit, decimals),
            change,
        });
    };
    row(
        "Power, average",
        before.average_power_w,
        during.average_power_w,
        "W",
        0,
        false,
    );
    row(
        "SM clock, average",
        before.average_sm_clock_mhz,
        during.average_sm_clock_mhz,
        "MHz",
        0,
        false,
    );
    row(
        "SM clock, minimum",
        before.min_sm_clock_mhz.map(f64::from),
        during.min_sm_clock_mhz.map(f64::from),
        "MHz",
        0,
        false,
    );
    row(
        "Temperature, average",
        before.average_temperature_c,
        during.average_temperature_c,
        "°C",
        1,
        true,
    );
    row(
        "Temperature, peak",
        before.peak_temperature_c.map(f64::from),
        during.peak_temperature_c.map(f64::from),
        "°C",
        0,
        true,
    );
    if before.average_fan_speed_pct.is_some() || during.average_fan_speed_pct.is_some() {
        row(
            "Fan speed, average",
            before.average_fan_speed_pct,
            during.average_fan_speed_pct,
            "%",
            0,
            true,
        );
    }
    row(
        "Energy per minute",
        before.energy_wh_per_min,
        during.energy_wh_per_min,
        "Wh",
        2,
        false,
    );
    for reason in ThrottleReason::ALL {
        let (before_s, during_s) = (before.throttled_s(reason), during.throttled_s(reason));
        if before_s > 0.0 || during_s > 0.0 {
            let share = |seconds: f64, total: f64| {
                if total > 0.0 {
                    format!("{seconds:.0} s ({:.0} %)", seconds / total * 100.0)
                } else {
                    format!("{seconds:.0} s")
                }
            };
            rows.push(ComparisonRow {
                label: format!("Throttled: {}", reason.label()),
                before: share(before_s, before.duration_s),
                during: share(during_s, during.duration_s),
                change: match (before.duration_s > 0.0, during.duration_s > 0.0) {
                    (true, true) => format!(
                        "{:+.0} points",
                        (during_s / during.duration_s - before_s / before.duration_s) * 100.0
                    ),
                    _ => String::new(),
                },
            });
        }
    }
    rows.push(ComparisonRow {
        label: "Measured".to_string(),
        before: format!("{:.0} s ({} samples)", before.duration_s, before.samples),
        during: format!("{:.0} s ({} samples)", during.duration_s, during.samples),
        change: String::new(),
    });
    rows
}

/// One sentence on whether the temperature had settled by the end of the trial, when it says
/// something worth knowing.
pub fn settling_note(during: &TrialStats) -> Option<String> {
    match during.temperature_trend? {
        TemperatureTrend::Settled => {
            Some("The temperature had settled by the end of the trial.".to_string())
        }
        TemperatureTrend::TooShort => Some(
            "The trial was too short to tell whether the temperature had settled (30 s or more are needed).".to_string(),
        ),
        TemperatureTrend::Moving { c_per_min } => Some(format!(
            "The temperature was still {} ({c_per_min:+.1} °C per minute) when the trial ended: try it for longer to see where it settles.",
            if c_per_min >= 0.0 { "rising" } else { "falling" }
        )),
    }
}

/// The comparison as text for the terminal, numbers aligned on the right:
///
/// ```text
///                          Before      During      Change
/// Power, average           431 W       315 W       -26.9 %
/// ```
pub fn comparison_table(before: &TrialStats, during: &TrialStats) -> String {
    let header = ComparisonRow {
        label: String::new(),
        before: "Before".to_string(),
        during: "During".to_string(),
        change: "Change".to_string(),
    };
    let rows: Vec<ComparisonRow> = std::iter::once(header)
        .chain(comparison_rows(before, during))
        .collect();
    let cells = |row: &ComparisonRow| {
        [
            row.label.clone(),
            row.before.clone(),
            row.during.clone(),
            row.change.clone(),
        ]
    };
    let widths: Vec<usize> = (0..4)
        .map(|column| {
            rows.iter()
                .map(|row| cells(row)[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut table = String::new();
    for row in &rows {
        let mut line = String::new();
        for (column, cell) in cells(row).iter().enumerate() {
            let padding = widths[column] - cell.chars().count();
            if column == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(padding));
            } else {
                line.push_str("   ");
                line.push_str(&" ".repeat(padding));
                line.push_str(cell);
            }
        }
        table.push_str(line.trim_end());
        table.push('\n');
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{FanReading, ThrottleReasons};

    fn sample(at_s: u64, power_w: u32, clock_mhz: u32, temperature_c: u32) -> Telemetry {
        Telemetry {
            sampled_at_ms: 1_000_000 + at_s * 1000,
            power_draw_mw: Some(power_w * 1000),
            sm_clock_mhz: Some(clock_mhz),
            temperature_c: Some(temperature_c),
            fans: Some(vec![
                FanReading {
                    speed_pct: Some(40),
                    speed_rpm: None,
                },
                FanReading {
                    speed_pct: Some(50),
                    speed_rpm: None,
                },
            ]),
            ..Telemetry::default()
        }
    }

    #[test]
    fn averages_minimum_peak_fans_and_energy_from_power() {
        let samples = [
            sample(0, 400, 2700, 60),
            sample(1, 300, 2500, 64),
            sample(2, 350, 2600, 62),
        ];
        let stats = TrialStats::from_samples(&samples);
        assert_eq!(stats.samples, 3);
        assert_eq!(stats.duration_s, 2.0);
        assert_eq!(stats.average_power_w, Some(350.0));
        assert_eq!(stats.average_sm_clock_mhz, Some(2600.0));
        assert_eq!(stats.min_sm_clock_mhz, Some(2500));
        assert_eq!(stats.peak_temperature_c, Some(64));
        assert_eq!(stats.average_fan_speed_pct, Some(45.0));
        assert_eq!(stats.energy_wh_per_min, Some(350.0 / 60.0));
        assert_eq!(stats.energy_wh, None);
        assert_eq!(stats.temperature_trend, Some(TemperatureTrend::TooShort));
    }

    #[test]
    fn energy_and_average_power_come_from_the_counter_when_there_is_one() {
        let power_cap = ThrottleReasons::from_bits(ThrottleReason::SwPowerCap.bit());
        let mut samples: Vec<Telemetry> = (0..=4).map(|s| sample(s * 2, 300, 2500, 70)).collect();
        for (index, sample) in samples.iter_mut().enumerate() {
            // 360 J every 2 s = 180 W = 3 Wh per minute.
            sample.energy_total_mj = Some(5_000_000 + index as u64 * 360_000);
        }
        samples[1].throttle_reasons = Some(power_cap);
        samples[2].throttle_reasons = Some(power_cap);
        let stats = TrialStats::from_samples(&samples);
        assert!((stats.energy_wh_per_min.unwrap_or_default() - 3.0).abs() < 1e-9);
        assert_eq!(stats.average_power_w, Some(180.0));
        assert!((stats.energy_wh.unwrap_or_default() - 0.4).abs() < 1e-9);
        assert_eq!(stats.throttled_s(ThrottleReason::SwPowerCap), 4.0);
        assert_eq!(
            stats.run_line(8.0),
            "Duration 8.0 s, energy 0.400 Wh, average power 180 W, peak temperature 70 °C."
        );
    }

    #[test]
    fn the_temperature_trend_tells_settled_from_still_rising() {
        let flat: Vec<Telemetry> = (0..=60).map(|s| sample(s, 300, 2500, 70)).collect();
        assert_eq!(
            TrialStats::from_samples(&flat).temperature_trend,
            Some(TemperatureTrend::Settled)
        );
        let rising: Vec<Telemetry> = (0..=60)
            .map(|s| sample(s, 300, 2500, 60 + (s / 6) as u32))
            .collect();
        let Some(TemperatureTrend::Moving { c_per_min }) =
            TrialStats::from_samples(&rising).temperature_trend
        else {
            panic!("rising")
        };
        assert!((8.0..12.0).contains(&c_per_min), "{c_per_min}");
        let note = settling_note(&TrialStats::from_samples(&rising)).unwrap_or_default();
        assert!(note.contains("still rising"), "{note}");
    }

    #[test]
    fn every_row_has_units_and_a_change_in_percent() {
        let before: Vec<Telemetry> = (0..=10).map(|s| sample(s, 400, 2700, 60)).collect();
        let mut during: Vec<Telemetry> = (0..=10).map(|s| sample(s, 300, 2400, 57)).collect();
        during[5].throttle_reasons =
            Some(ThrottleReasons::from_bits(ThrottleReason::SwPowerCap.bit()));
        let table = comparison_table(
            &TrialStats::from_samples(&before),
            &TrialStats::from_samples(&during),
        );
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("Before") && lines[0].contains("Change"),
            "{table}"
        );
        assert!(
            lines[1].starts_with("Power, average") && lines[1].ends_with("-25.0 %"),
            "{table}"
        );
        assert!(table.contains("-3.0 °C (-5.0 %)"), "{table}");
        assert!(table.contains("Fan speed, average"), "{table}");
        assert!(table.contains("Throttled: Power cap"), "{table}");
        assert!(table.contains("+10 points"), "{table}");
        assert!(table.contains("10 s (11 samples)"), "{table}");
    }

    #[test]
    fn missing_readings_stay_missing() {
        let samples = [Telemetry::default(), Telemetry::default()];
        let stats = TrialStats::from_samples(&samples);
        assert_eq!(stats.average_power_w, None);
        assert_eq!(stats.energy_wh_per_min, None);
        assert_eq!(stats.average_fan_speed_pct, None);
        assert_eq!(TrialStats::from_samples(&[]).samples, 0);
        let rows = comparison_rows(&stats, &stats);
        assert!(rows.iter().all(|row| !row.before.contains("NaN")));
    }
}
