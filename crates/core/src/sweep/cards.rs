//! A sweep over several cards at once (one data-parallel job across them): the box's figures
//! from each card's, and which card is the slowest or the hottest. A DDP job waits for its
//! slowest card every step, so the box runs at that card's clock, and its energy is every
//! card's summed.

use gputune_formats::reports::sweep_box::CardStepStats;
use gputune_formats::throttle::ThrottleReason;
use gputune_formats::tuning::{ThrottleTime, TrialStats};

/// The box's figures over a step: power and energy summed (unknown when any card's is), the
/// slowest card's clocks, the hottest card's temperature, trend and fans, the longest any
/// card spent under each throttle reason, and the fewest samples any card gave.
pub fn box_stats(cards: &[TrialStats]) -> TrialStats {
    let sum = |value: fn(&TrialStats) -> Option<f64>| -> Option<f64> {
        cards.iter().map(value).sum::<Option<f64>>()
    };
    let slowest = cards
        .iter()
        .filter(|stats| stats.average_sm_clock_mhz.is_some())
        .min_by(|a, b| mean(a.average_sm_clock_mhz).total_cmp(&mean(b.average_sm_clock_mhz)));
    let hottest = cards
        .iter()
        .filter(|stats| stats.average_temperature_c.is_some())
        .max_by(|a, b| mean(a.average_temperature_c).total_cmp(&mean(b.average_temperature_c)));
    let throttle_s = ThrottleReason::ALL
        .iter()
        .filter_map(|reason| {
            let seconds = cards
                .iter()
                .flat_map(|stats| &stats.throttle_s)
                .filter(|time| time.reason == *reason)
                .map(|time| time.seconds)
                .fold(None, |most: Option<f64>, seconds| {
                    Some(most.map_or(seconds, |most| most.max(seconds)))
                })?;
            Some(ThrottleTime {
                reason: *reason,
                seconds,
            })
        })
        .collect();
    TrialStats {
        samples: cards.iter().map(|stats| stats.samples).min().unwrap_or(0),
        duration_s: cards
            .iter()
            .map(|stats| stats.duration_s)
            .fold(0.0, f64::max),
        average_power_w: sum(|stats| stats.average_power_w),
        average_sm_clock_mhz: slowest.and_then(|stats| stats.average_sm_clock_mhz),
        min_sm_clock_mhz: cards
            .iter()
            .filter_map(|stats| stats.min_sm_clock_mhz)
            .min(),
        average_temperature_c: hottest.and_then(|stats| stats.average_temperature_c),
        peak_temperature_c: cards
            .iter()
            .filter_map(|stats| stats.peak_temperature_c)
            .max(),
        average_fan_speed_pct: hottest.and_then(|stats| stats.average_fan_speed_pct),
        energy_wh: sum(|stats| stats.energy_wh),
        energy_wh_per_min: sum(|stats| stats.energy_wh_per_min),
        throttle_s,
        temperature_trend: hottest.and_then(|stats| stats.temperature_trend),
    }
}

/// The card with the lowest mean SM clock over the step: the one the job waits for.
pub fn slowest(cards: &[CardStepStats]) -> Option<&CardStepStats> {
    cards
        .iter()
        .filter(|card| card.stats.average_sm_clock_mhz.is_some())
        .min_by(|a, b| {
            mean(a.stats.average_sm_clock_mhz).total_cmp(&mean(b.stats.average_sm_clock_mhz))
        })
}

/// The card with the highest mean temperature over the step.
pub fn hottest(cards: &[CardStepStats]) -> Option<&CardStepStats> {
    cards
        .iter()
        .filter(|card| card.stats.average_temperature_c.is_some())
        .max_by(|a, b| {
            mean(a.stats.average_temperature_c).total_cmp(&mean(b.stats.average_temperature_c))
        })
}

/// A mean that is there (the callers filter out the cards without it).
fn mean(value: Option<f64>) -> f64 {
    value.unwrap_or(0.0)
}

/// Seconds a card spent throttled for heat (the driver's or the hardware's slowdown).
pub fn thermal_throttle_s(stats: &TrialStats) -> f64 {
    stats
        .throttle_s
        .iter()
        .filter(|time| {
            matches!(
                time.reason,
                ThrottleReason::SwThermalSlowdown | ThrottleReason::HwThermalSlowdown
            )
        })
        .map(|time| time.seconds)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(watts: f64, clock: f64, celsius: f64, thermal_s: f64) -> TrialStats {
        TrialStats {
            samples: 10,
            duration_s: 9.0,
            average_power_w: Some(watts),
            average_sm_clock_mhz: Some(clock),
            min_sm_clock_mhz: Some(clock as u32 - 30),
            average_temperature_c: Some(celsius),
            peak_temperature_c: Some(celsius as u32 + 2),
            average_fan_speed_pct: Some(celsius),
            energy_wh: Some(watts / 400.0),
            energy_wh_per_min: Some(watts / 60.0 / 60.0),
            throttle_s: if thermal_s > 0.0 {
                vec![
                    ThrottleTime {
                        reason: ThrottleReason::SwPowerCap,
                        seconds: 2.0,
                    },
                    ThrottleTime {
                        reason: ThrottleReason::SwThermalSlowdown,
                        seconds: thermal_s,
                    },
                ]
            } else {
                vec![ThrottleTime {
                    reason: ThrottleReason::SwPowerCap,
                    seconds: 5.0,
                }]
            },
            temperature_trend: None,
        }
    }

    #[test]
    fn the_box_sums_power_and_takes_the_slowest_clock_and_the_hottest_temperature() {
        let cards = [
            card(300.0, 2600.0, 70.0, 0.0),
            card(310.0, 2400.0, 84.0, 6.0),
            card(290.0, 2550.0, 72.0, 0.0),
        ];
        let stats = box_stats(&cards);
        assert_eq!(stats.average_power_w, Some(900.0));
        assert_eq!(stats.average_sm_clock_mhz, Some(2400.0));
        assert_eq!(stats.min_sm_clock_mhz, Some(2370));
        assert_eq!(stats.average_temperature_c, Some(84.0));
        assert_eq!(stats.peak_temperature_c, Some(86));
        assert_eq!(
            stats.throttle_s,
            vec![
                ThrottleTime {
                    reason: ThrottleReason::SwPowerCap,
                    seconds: 5.0
                },
                ThrottleTime {
                    reason: ThrottleReason::SwThermalSlowdown,
                    seconds: 6.0
                },
            ]
        );
        assert_eq!(thermal_throttle_s(&cards[1]), 6.0);
        // One card without a power reading: the box's power is unknown, never a part of it.
        let mut blind = cards.clone();
        blind[2].average_power_w = None;
        assert_eq!(box_stats(&blind).average_power_w, None);
        let named: Vec<CardStepStats> = cards
            .iter()
            .enumerate()
            .map(|(index, stats)| CardStepStats {
                gpu_index: index as u32,
                stats: stats.clone(),
            })
            .collect();
        assert_eq!(slowest(&named).map(|card| card.gpu_index), Some(1));
        assert_eq!(hottest(&named).map(|card| card.gpu_index), Some(1));
    }
}
