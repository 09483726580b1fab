//! What one step of a sweep measured: the job's throughput (from its own progress, or a
//! GPU-side proxy when it prints none), its spread within the step, and the card's power,
//! clocks, temperature, fans and throttling over the same seconds.

use crate::job::progress::{ProgressReading, ProgressValue};
use crate::sweep::cards::box_stats;
use gputune_formats::card::Telemetry;
use gputune_formats::reports::sweep_box::CardStepStats;
use gputune_formats::reports::sweep_step::SweepStep;
use gputune_formats::reports::sweep_step::{MeasuredBy, StepResult, Throughput};
use gputune_formats::reports::sweep_step::{ProgressSource, WorkUnit};
use gputune_formats::tuning::TrialStats;

/// A step's measured seconds are cut in this many parts; the spread of their throughputs is
/// the step's own noise.
const PARTS: usize = 4;
/// Counts must cover this share of the measured seconds to be trusted over rates.
const COUNTS_COVER: f64 = 0.4;

/// Readings gathered over one step's measured seconds.
#[derive(Debug, Clone, Default)]
pub struct StepMeasurement {
    pub start_ms: u64,
    pub progress: Vec<ProgressReading>,
    /// Readings of each swept card (in the sweep's order) with the sweep's time of arrival, ms.
    pub samples: Vec<Vec<(u64, Telemetry)>>,
}

impl StepMeasurement {
    /// A measurement of `cards` cards from `start_ms`.
    pub fn new(start_ms: u64, cards: usize) -> StepMeasurement {
        StepMeasurement {
            start_ms,
            progress: Vec::new(),
            samples: vec![Vec::new(); cards],
        }
    }

    /// The unit with the most readings, and its source: what the sweep measures in.
    pub fn dominant_unit(&self) -> Option<(ProgressSource, WorkUnit)> {
        let mut counted: Vec<(ProgressSource, WorkUnit, usize)> = Vec::new();
        for reading in &self.progress {
            match counted
                .iter_mut()
                .find(|(_, unit, _)| *unit == reading.unit)
            {
                Some(entry) => entry.2 += 1,
                None => counted.push((reading.source, reading.unit.clone(), 1)),
            }
        }
        counted
            .into_iter()
            .max_by_key(|(_, _, count)| *count)
            .map(|(source, unit, _)| (source, unit))
    }

    /// The step's result over `[start_ms, end_ms)`, measured `by`, for the cards
    /// `gpu_indices` (in the order of `samples`). Over several cards the throughput is still
    /// the job's (the proxy's: the slowest card's, which a data-parallel job waits for) and
    /// the power is the box's, each card's kept beside it.
    pub fn result(
        &self,
        step: &SweepStep,
        end_ms: u64,
        by: &MeasuredBy,
        gpu_indices: &[u32],
    ) -> StepResult {
        let per_card: Vec<TrialStats> = self
            .samples
            .iter()
            .map(|card| {
                let samples: Vec<Telemetry> = card
                    .iter()
                    .filter(|(at_ms, _)| (self.start_ms..end_ms).contains(at_ms))
                    .map(|(_, sample)| sample.clone())
                    .collect();
                TrialStats::from_samples(&samples)
            })
            .collect();
        let throughput = match by {
            MeasuredBy::Progress { unit, .. } => {
                progress_throughput(&self.progress, unit, self.start_ms, end_ms)
            }
            MeasuredBy::Proxy => self
                .samples
                .iter()
                .filter_map(|card| proxy_throughput(card, self.start_ms, end_ms))
                .min_by(|a, b| a.units_per_s.total_cmp(&b.units_per_s)),
        };
        let (stats, cards) = match per_card.as_slice() {
            [one] => (one.clone(), Vec::new()),
            several => (
                box_stats(several),
                gpu_indices
                    .iter()
                    .zip(several)
                    .map(|(gpu_index, stats)| CardStepStats {
                        gpu_index: *gpu_index,
                        stats: stats.clone(),
                    })
                    .collect(),
            ),
        };
        let average_power_w = stats.average_power_w;
        let energy_per_unit_j = match (average_power_w, throughput) {
            (Some(watts), Some(throughput)) if throughput.units_per_s > 0.0 => {
                Some(watts / throughput.units_per_s)
            }
            _ => None,
        };
        StepResult {
            step: step.clone(),
            throughput,
            average_power_w,
            energy_per_unit_j,
            stats,
            measured_s: end_ms.saturating_sub(self.start_ms) as f64 / 1000.0,
            unstable: None,
            noisy: None,
            cards,
        }
    }
}

/// The job's speed in `unit` over `[start_ms, end_ms)`: from the cadence of its counter when
/// that covers enough of the time (tqdm's own rate is a moving average that lags a change of
/// setting), else from the rates it printed.
pub fn progress_throughput(
    readings: &[ProgressReading],
    unit: &WorkUnit,
    start_ms: u64,
    end_ms: u64,
) -> Option<Throughput> {
    let inside = |reading: &&ProgressReading| {
        reading.unit == *unit && (start_ms..end_ms).contains(&reading.at_ms)
    };
    let counts: Vec<(u64, f64)> = readings
        .iter()
        .filter(inside)
        .filter_map(|reading| match reading.value {
            ProgressValue::Count { units_done } => Some((reading.at_ms, units_done)),
            ProgressValue::Rate { .. } => None,
        })
        .collect();
    let rates: Vec<(u64, f64)> = readings
        .iter()
        .filter(inside)
        .filter_map(|reading| match reading.value {
            ProgressValue::Rate { units_per_s } => Some((reading.at_ms, units_per_s)),
            ProgressValue::Count { .. } => None,
        })
        .collect();
    let span_ms = end_ms.saturating_sub(start_ms).max(1);
    let counts_span = match (counts.first(), counts.last()) {
        (Some(first), Some(last)) => last.0.saturating_sub(first.0),
        _ => 0,
    };
    let parts = part_bounds(start_ms, end_ms);
    if counts.len() >= 3 && counts_span as f64 >= COUNTS_COVER * span_ms as f64 {
        let units_per_s = count_rate(&counts)?;
        let part_rates: Vec<f64> = parts
            .iter()
            .filter_map(|(from, to)| {
                let part: Vec<(u64, f64)> = counts
                    .iter()
                    .copied()
                    .filter(|(at_ms, _)| (*from..*to).contains(at_ms))
                    .collect();
                count_rate(&part)
            })
            .collect();
        return Some(Throughput {
            units_per_s,
            spread_pct: spread_pct(&part_rates),
        });
    }
    if rates.is_empty() {
        return None;
    }
    let units_per_s = mean(rates.iter().map(|(_, rate)| *rate))?;
    let part_rates: Vec<f64> = parts
        .iter()
        .filter_map(|(from, to)| {
            mean(
                rates
                    .iter()
                    .filter(|(at_ms, _)| (*from..*to).contains(at_ms))
                    .map(|(_, rate)| *rate),
            )
        })
        .collect();
    Some(Throughput {
        units_per_s,
        spread_pct: spread_pct(&part_rates),
    })
}

/// Units per second from a counter's readings: the work done (a counter that starts again, as
/// a new epoch's bar does, adds from its new start) over the time between the first and last.
fn count_rate(counts: &[(u64, f64)]) -> Option<f64> {
    let (first, last) = (counts.first()?, counts.last()?);
    let span_s = last.0.saturating_sub(first.0) as f64 / 1000.0;
    if counts.len() < 2 || span_s <= 0.0 {
        return None;
    }
    let done: f64 = counts
        .windows(2)
        .map(|pair| {
            let step = pair[1].1 - pair[0].1;
            if step >= 0.0 {
                step
            } else {
                pair[1].1.max(0.0)
            }
        })
        .sum();
    let rate = done / span_s;
    (rate.is_finite() && rate > 0.0).then_some(rate)
}

/// The proxy for a job that prints no progress: SM clock (MHz) × GPU utilization.
pub fn proxy_throughput(
    samples: &[(u64, Telemetry)],
    start_ms: u64,
    end_ms: u64,
) -> Option<Throughput> {
    let values: Vec<(u64, f64)> = samples
        .iter()
        .filter(|(at_ms, _)| (start_ms..end_ms).contains(at_ms))
        .filter_map(|(at_ms, sample)| {
            let clock = f64::from(sample.sm_clock_mhz?);
            let busy = f64::from(sample.utilization_gpu_pct?) / 100.0;
            Some((*at_ms, clock * busy))
        })
        .collect();
    let units_per_s = mean(values.iter().map(|(_, value)| *value))?;
    if units_per_s <= 0.0 {
        return None;
    }
    let part_values: Vec<f64> = part_bounds(start_ms, end_ms)
        .iter()
        .filter_map(|(from, to)| {
            mean(
                values
                    .iter()
                    .filter(|(at_ms, _)| (*from..*to).contains(at_ms))
                    .map(|(_, value)| *value),
            )
        })
        .collect();
    Some(Throughput {
        units_per_s,
        spread_pct: spread_pct(&part_values),
    })
}

fn part_bounds(start_ms: u64, end_ms: u64) -> Vec<(u64, u64)> {
    let span = end_ms.saturating_sub(start_ms);
    (0..PARTS as u64)
        .map(|part| {
            (
                start_ms + span * part / PARTS as u64,
                start_ms + span * (part + 1) / PARTS as u64,
            )
        })
        .collect()
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, count) = values
        .filter(|value| value.is_finite())
        .fold((0.0, 0usize), |(sum, count), value| {
            (sum + value, count + 1)
        });
    (count > 0).then(|| sum / count as f64)
}

/// Sample standard deviation over the mean, %.
fn spread_pct(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let average = mean(values.iter().copied())?;
    if average <= 0.0 {
        return None;
    }
    let variance = values
        .iter()
        .map(|value| (value - average).powi(2))
        .sum::<f64>()
        / (values.len() - 1) as f64;
    Some(variance.sqrt() / average * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at_ms: u64, value: ProgressValue) -> ProgressReading {
        ProgressReading {
            at_ms,
            value,
            unit: WorkUnit::Step,
            source: ProgressSource::Tqdm,
        }
    }

    #[test]
    fn a_counter_gives_the_rate_and_survives_a_restart() {
        // 10 steps a second for 10 s; the bar starts again at 50 (a new epoch).
        let mut readings = Vec::new();
        for tick in 0..=100u64 {
            let done = if tick <= 50 { tick } else { tick - 50 };
            readings.push(reading(
                1_000 + tick * 100,
                ProgressValue::Count {
                    units_done: done as f64,
                },
            ));
            // tqdm's lagging average says something else; the counter wins.
            readings.push(reading(
                1_000 + tick * 100,
                ProgressValue::Rate { units_per_s: 7.0 },
            ));
        }
        let throughput = progress_throughput(&readings, &WorkUnit::Step, 1_000, 11_100).unwrap();
        assert!(
            (throughput.units_per_s - 10.0).abs() < 0.2,
            "{throughput:?}"
        );
        assert!(throughput.spread_pct.unwrap() < 2.0, "{throughput:?}");
    }

    #[test]
    fn rates_alone_are_averaged_and_their_spread_reported() {
        let readings: Vec<ProgressReading> = (0..40u64)
            .map(|tick| {
                let rate = if tick < 20 { 9.0 } else { 11.0 };
                reading(tick * 250, ProgressValue::Rate { units_per_s: rate })
            })
            .collect();
        let throughput = progress_throughput(&readings, &WorkUnit::Step, 0, 10_000).unwrap();
        assert!((throughput.units_per_s - 10.0).abs() < 1e-9);
        // Parts of 9, 9, 11, 11: a standard deviation of 1.15 over 10.
        let spread = throughput.spread_pct.unwrap();
        assert!((spread - 11.547).abs() < 0.01, "{spread}");
        // Readings outside the window, or in another unit, do not count.
        assert_eq!(
            progress_throughput(&readings, &WorkUnit::Sample, 0, 10_000),
            None
        );
        assert_eq!(
            progress_throughput(&readings, &WorkUnit::Step, 20_000, 30_000),
            None
        );
    }

    #[test]
    fn the_proxy_is_clock_times_utilization() {
        let samples: Vec<(u64, Telemetry)> = (0..10u64)
            .map(|tick| {
                (
                    tick * 1_000,
                    Telemetry {
                        sm_clock_mhz: Some(2_000),
                        utilization_gpu_pct: Some(if tick % 2 == 0 { 100 } else { 90 }),
                        ..Telemetry::default()
                    },
                )
            })
            .collect();
        let throughput = proxy_throughput(&samples, 0, 10_000).unwrap();
        assert!((throughput.units_per_s - 1_900.0).abs() < 1e-9);
        assert_eq!(proxy_throughput(&samples, 50_000, 60_000), None);
    }

    #[test]
    fn energy_per_unit_is_power_over_throughput() {
        let mut measurement = StepMeasurement::new(0, 1);
        for tick in 0..=20u64 {
            measurement.samples[0].push((
                tick * 500,
                Telemetry {
                    sampled_at_ms: tick * 500,
                    power_draw_mw: Some(300_000),
                    ..Telemetry::default()
                },
            ));
            measurement.progress.push(reading(
                tick * 500,
                ProgressValue::Count {
                    units_done: tick as f64 * 2.5,
                },
            ));
        }
        let step = gputune_formats::reports::sweep_step::SweepStep {
            label: "100 % (300 W)".to_string(),
            power_limit_pct: 100.0,
            power_limit_mw: 300_000,
            clock_cap_mhz: None,
            gpu_clock_offset_mhz: None,
            settings: Vec::new(),
            is_repeat: false,
            in_force_note: String::new(),
        };
        let by = MeasuredBy::Progress {
            source: ProgressSource::Tqdm,
            unit: WorkUnit::Step,
        };
        assert_eq!(
            measurement.dominant_unit(),
            Some((ProgressSource::Tqdm, WorkUnit::Step))
        );
        let result = measurement.result(&step, 10_001, &by, &[0]);
        let throughput = result.throughput.unwrap();
        assert!((throughput.units_per_s - 5.0).abs() < 1e-9);
        assert!((result.average_power_w.unwrap() - 300.0).abs() < 1e-9);
        assert!((result.energy_per_unit_j.unwrap() - 60.0).abs() < 1e-9);
        assert!((result.measured_s - 10.001).abs() < 1e-9);
    }
}
