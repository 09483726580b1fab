//! What one card did in one phase of the ranking, from the service's readings: its clocks,
//! power, temperature (at the start, its peak, at the end, and over the phase's second half,
//! nearest its steady state) and how long each throttle reason held it back, weighted by the
//! time between readings; with the checked GEMM's rate from the run's tally.

use gputune_formats::card::Telemetry;
use gputune_formats::reports::rank::{PhaseFigures, ThrottleShare};
use gputune_formats::reports::stability::RunResult;
use gputune_formats::throttle::{ThrottleReason, ThrottleReasons};

/// A reading's reasons stand for at most this long: a gap in the readings is not throttled
/// time.
const LONGEST_READING_MS: u64 = 2_000;

/// One reading, as far as the ranking cares.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    at_ms: u64,
    clock_mhz: Option<u32>,
    power_w: Option<f64>,
    limit_w: Option<f64>,
    temperature_c: Option<u32>,
    reasons: ThrottleReasons,
}

/// The readings of one card in one phase.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseWatch {
    samples: Vec<Sample>,
}

/// A card at rest, read before its load began: where its heating is counted from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdlePoint {
    pub temperature_c: f64,
    pub power_w: f64,
}

impl IdlePoint {
    /// `reading` when it shows a card at rest (at most 10 % busy), else `None`.
    pub fn of(reading: &Telemetry) -> Option<IdlePoint> {
        let busy_pct = reading.utilization_gpu_pct?;
        (busy_pct <= 10).then_some(IdlePoint {
            temperature_c: f64::from(reading.temperature_c?),
            power_w: f64::from(reading.power_draw_mw?) / 1000.0,
        })
    }
}

impl PhaseWatch {
    pub fn take(&mut self, reading: &Telemetry) {
        // The service's samples come in order; one delivered twice counts once.
        if self
            .samples
            .last()
            .is_some_and(|last| last.at_ms >= reading.sampled_at_ms)
        {
            return;
        }
        self.samples.push(Sample {
            at_ms: reading.sampled_at_ms,
            clock_mhz: reading.sm_clock_mhz.or(reading.gpu_clock_mhz),
            power_w: reading.power_draw_mw.map(|mw| f64::from(mw) / 1000.0),
            limit_w: reading.power_limit_mw.map(|mw| f64::from(mw) / 1000.0),
            temperature_c: reading.temperature_c,
            reasons: reading.throttle_reasons.unwrap_or_default(),
        });
    }

    pub fn readings(&self) -> usize {
        self.samples.len()
    }

    /// The phase's figures, with the run's ending and its GEMM tally.
    pub fn figures(&self, result: &RunResult) -> PhaseFigures {
        let samples = &self.samples;
        let temperatures: Vec<u32> = samples.iter().filter_map(|s| s.temperature_c).collect();
        let late = self.late();
        let thermal_reasons = [
            ThrottleReason::SwThermalSlowdown,
            ThrottleReason::HwThermalSlowdown,
        ];
        PhaseFigures {
            ending: result.ending.clone(),
            ran_s: result.ran_s,
            gemm_tflops: result.tally.gemm_tflops(),
            results: result.tally.gemm.results,
            wrong: result.tally.gemm.wrong,
            readings: samples.len() as u32,
            clock_mean_mhz: mean(samples.iter().filter_map(|s| s.clock_mhz.map(f64::from))),
            clock_min_mhz: samples.iter().filter_map(|s| s.clock_mhz).min(),
            clock_max_mhz: samples.iter().filter_map(|s| s.clock_mhz).max(),
            power_mean_w: mean(samples.iter().filter_map(|s| s.power_w)),
            power_limit_w: samples.iter().rev().find_map(|s| s.limit_w),
            temperature_start_c: temperatures.first().copied(),
            temperature_peak_c: temperatures.iter().max().copied(),
            temperature_end_c: temperatures.last().copied(),
            late_temperature_mean_c: mean(
                late.iter().filter_map(|s| s.temperature_c.map(f64::from)),
            ),
            late_power_mean_w: mean(late.iter().filter_map(|s| s.power_w)),
            thermal_throttle_from_c: samples
                .iter()
                .filter(|s| thermal_reasons.iter().any(|r| s.reasons.contains(*r)))
                .filter_map(|s| s.temperature_c)
                .min(),
            throttled: self.throttled(),
        }
    }

    /// The readings of the phase's second half (by time).
    fn late(&self) -> &[Sample] {
        let (Some(first), Some(last)) = (self.samples.first(), self.samples.last()) else {
            return &[];
        };
        let middle_ms = first.at_ms + (last.at_ms - first.at_ms) / 2;
        let from = self
            .samples
            .iter()
            .position(|s| s.at_ms >= middle_ms)
            .unwrap_or(0);
        &self.samples[from..]
    }

    /// Each reason's share of the time: each reading's reasons hold until the next reading
    /// (the last one's for the mean interval), at most [`LONGEST_READING_MS`].
    fn throttled(&self) -> Vec<ThrottleShare> {
        let samples = &self.samples;
        let span_ms = match (samples.first(), samples.last()) {
            (Some(first), Some(last)) => last.at_ms - first.at_ms,
            _ => return Vec::new(),
        };
        let typical_ms = if samples.len() > 1 {
            span_ms / (samples.len() as u64 - 1)
        } else {
            1
        };
        let held_ms = |index: usize| -> u64 {
            let next = samples.get(index + 1).map(|next| next.at_ms);
            next.map_or(typical_ms, |next| next - samples[index].at_ms)
                .min(LONGEST_READING_MS)
        };
        let total_ms: u64 = (0..samples.len()).map(held_ms).sum();
        if total_ms == 0 {
            return Vec::new();
        }
        ThrottleReason::ALL
            .into_iter()
            .filter(|reason| {
                !matches!(
                    reason,
                    ThrottleReason::GpuIdle | ThrottleReason::ApplicationsClocksSetting
                )
            })
            .filter_map(|reason| {
                let throttled_ms: u64 = (0..samples.len())
                    .filter(|&index| samples[index].reasons.contains(reason))
                    .map(held_ms)
                    .sum();
                (throttled_ms > 0).then(|| ThrottleShare {
                    reason,
                    time_pct: 100.0 * throttled_ms as f64 / total_ms as f64,
                })
            })
            .collect()
    }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, count) = values.fold((0.0, 0u32), |(sum, count), value| (sum + value, count + 1));
    (count > 0).then(|| sum / f64::from(count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::reports::stability::{Checked, Ending, Tally};

    fn reading(
        at_ms: u64,
        temperature_c: u32,
        power_w: u32,
        reasons: &[ThrottleReason],
    ) -> Telemetry {
        Telemetry {
            sampled_at_ms: at_ms,
            sm_clock_mhz: Some(2700),
            temperature_c: Some(temperature_c),
            power_draw_mw: Some(power_w * 1000),
            power_limit_mw: Some(450_000),
            throttle_reasons: Some(reasons.iter().copied().collect()),
            utilization_gpu_pct: Some(100),
            ..Telemetry::default()
        }
    }

    fn result() -> RunResult {
        RunResult {
            ending: Ending::Completed,
            ran_s: 2.0,
            tally: Tally {
                gemm: Checked {
                    results: 100,
                    wrong: 0,
                    flop: 330e12,
                    bytes: 0,
                    elapsed_s: 2.0,
                },
                ..Tally::default()
            },
            watched: Default::default(),
            prepared: None,
        }
    }

    #[test]
    fn throttle_reasons_count_as_shares_of_the_time_and_gaps_do_not_count() {
        let mut watch = PhaseWatch::default();
        let thermal = [
            ThrottleReason::SwThermalSlowdown,
            ThrottleReason::SwPowerCap,
        ];
        watch.take(&reading(0, 80, 440, &[ThrottleReason::SwPowerCap]));
        watch.take(&reading(500, 84, 430, &thermal));
        watch.take(&reading(500, 84, 430, &thermal)); // delivered twice
        watch.take(&reading(1_000, 85, 420, &thermal));
        // A gap of 10 s counts as 2 s at most.
        watch.take(&reading(11_000, 82, 445, &[ThrottleReason::SwPowerCap]));
        let figures = watch.figures(&result());
        assert_eq!(figures.readings, 4);
        // Held: 500, 500, 2000 (the gap), 2000 (the last: the mean interval, capped).
        let total = 5_000.0;
        assert!((figures.thermal_pct() - 100.0 * 2_500.0 / total).abs() < 1e-9);
        assert!((figures.power_pct() - 100.0).abs() < 1e-9);
        assert_eq!(figures.thermal_throttle_from_c, Some(84));
        assert_eq!(figures.temperature_start_c, Some(80));
        assert_eq!(figures.temperature_peak_c, Some(85));
        assert_eq!(figures.temperature_end_c, Some(82));
        assert_eq!(figures.gemm_tflops, Some(165.0));
        // The second half (from 5.5 s) is the last reading alone.
        assert_eq!(figures.late_temperature_mean_c, Some(82.0));
    }

    #[test]
    fn only_a_reading_of_a_card_at_rest_is_an_idle_point() {
        let mut busy = reading(0, 60, 300, &[]);
        assert_eq!(IdlePoint::of(&busy), None);
        busy.utilization_gpu_pct = Some(0);
        assert_eq!(
            IdlePoint::of(&busy),
            Some(IdlePoint {
                temperature_c: 60.0,
                power_w: 300.0
            })
        );
    }
}
