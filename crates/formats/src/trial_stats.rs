//! A run of samples summed up (`tuning::TrialStats`): averages, peaks, energy, throttle time
//! and whether the temperature settled. Every before / during comparison starts here.

use crate::card::Telemetry;
use crate::throttle::ThrottleReason;
use crate::tuning::{TemperatureTrend, ThrottleTime, TrialStats};

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
