//! What a GPU did over a run of samples, for every before / during comparison (a trial, a run,
//! a sweep step): one statistics type, and one comparison table that the window draws as a grid
//! and the terminal prints as text.

use gputune_formats::throttle::ThrottleReason;
use gputune_formats::tuning::{TemperatureTrend, TrialStats};

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
    let mut rows: Vec<ComparisonRow> = MEASURES
        .iter()
        .filter(|measure| {
            !measure.only_where_read
                || (measure.value)(before).is_some()
                || (measure.value)(during).is_some()
        })
        .map(|measure| measure.row(before, during))
        .collect();
    rows.extend(throttle_rows(before, during));
    rows.push(ComparisonRow {
        label: "Measured".to_string(),
        before: format!("{:.0} s ({} samples)", before.duration_s, before.samples),
        during: format!("{:.0} s ({} samples)", during.duration_s, during.samples),
        change: String::new(),
    });
    rows
}

/// One measured quantity of the table: how it is read from the statistics and shown.
struct Measure {
    label: &'static str,
    unit: &'static str,
    decimals: usize,
    /// Show the difference itself beside the percentage (temperatures, fan speed).
    with_difference: bool,
    /// Left out when neither span read it (fans, on a card without them).
    only_where_read: bool,
    value: fn(&TrialStats) -> Option<f64>,
}

const MEASURES: [Measure; 7] = [
    Measure {
        label: "Power, average",
        unit: "W",
        decimals: 0,
        with_difference: false,
        only_where_read: false,
        value: |stats| stats.average_power_w,
    },
    Measure {
        label: "SM clock, average",
        unit: "MHz",
        decimals: 0,
        with_difference: false,
        only_where_read: false,
        value: |stats| stats.average_sm_clock_mhz,
    },
    Measure {
        label: "SM clock, minimum",
        unit: "MHz",
        decimals: 0,
        with_difference: false,
        only_where_read: false,
        value: |stats| stats.min_sm_clock_mhz.map(f64::from),
    },
    Measure {
        label: "Temperature, average",
        unit: "°C",
        decimals: 1,
        with_difference: true,
        only_where_read: false,
        value: |stats| stats.average_temperature_c,
    },
    Measure {
        label: "Temperature, peak",
        unit: "°C",
        decimals: 0,
        with_difference: true,
        only_where_read: false,
        value: |stats| stats.peak_temperature_c.map(f64::from),
    },
    Measure {
        label: "Fan speed, average",
        unit: "%",
        decimals: 0,
        with_difference: true,
        only_where_read: true,
        value: |stats| stats.average_fan_speed_pct,
    },
    Measure {
        label: "Energy per minute",
        unit: "Wh",
        decimals: 2,
        with_difference: false,
        only_where_read: false,
        value: |stats| stats.energy_wh_per_min,
    },
];

impl Measure {
    fn row(&self, before: &TrialStats, during: &TrialStats) -> ComparisonRow {
        let (before, during) = ((self.value)(before), (self.value)(during));
        let decimals = self.decimals;
        let percent = match (before, during) {
            (Some(before), Some(during)) if before != 0.0 => {
                Some(format!("{:+.1} %", (during - before) / before * 100.0))
            }
            _ => None,
        };
        let change = match (percent, before.zip(during)) {
            (Some(percent), Some((before, during))) if self.with_difference => {
                // A difference of percentages is in points, not in percent.
                let unit = if self.unit == "%" {
                    "points"
                } else {
                    self.unit
                };
                format!("{:+.decimals$} {unit} ({percent})", during - before)
            }
            (Some(percent), _) => percent,
            (None, Some((before, during))) => {
                format!("{:+.decimals$} {}", during - before, self.unit)
            }
            (None, None) => String::new(),
        };
        let show = |value: Option<f64>| {
            value.map_or_else(
                || "n/a".to_string(),
                |value| format!("{value:.decimals$} {}", self.unit),
            )
        };
        ComparisonRow {
            label: self.label.to_string(),
            before: show(before),
            during: show(during),
            change,
        }
    }
}

/// A row for each throttle reason seen before or during: seconds, their share of the span,
/// and the change in points.
fn throttle_rows(before: &TrialStats, during: &TrialStats) -> Vec<ComparisonRow> {
    let share = |seconds: f64, total: f64| {
        if total > 0.0 {
            format!("{seconds:.0} s ({:.0} %)", seconds / total * 100.0)
        } else {
            format!("{seconds:.0} s")
        }
    };
    ThrottleReason::ALL
        .into_iter()
        .filter_map(|reason| {
            let (before_s, during_s) = (before.throttled_s(reason), during.throttled_s(reason));
            if before_s <= 0.0 && during_s <= 0.0 {
                return None;
            }
            Some(ComparisonRow {
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
            })
        })
        .collect()
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
    use gputune_formats::{
        card::{FanReading, Telemetry},
        throttle::ThrottleReasons,
    };

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
