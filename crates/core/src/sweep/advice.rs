//! When one card of a box needs its own setting: at the recommended step, a card that throttles
//! for heat while the others do not, or runs more than [`HOTTER_BY_C`] hotter than them, is a
//! hot slot (a sandwiched card, a blocked intake). A DDP job waits for it every step, so it
//! gets a power limit of its own: the highest one the sweep tried (at or under the
//! recommended one, at the same clock cap) at which that card ran cool enough. The
//! suggestion is read from the sweep's own rows, never guessed.

use crate::sweep::cards::thermal_throttle_s;
use crate::text::number;
use gputune_formats::reports::sweep_box::{CardAdvice, CardAdviceReason, CardStepStats};
use gputune_formats::reports::sweep_step::StepResult;

/// A card this much hotter than the median of the others (°C) needs its own setting.
pub const HOTTER_BY_C: f64 = 10.0;
/// Less time than this throttled for heat (s) is a blip, not a hot slot.
const THROTTLED_S: f64 = 1.0;

/// The cards that need a setting of their own at step `chosen` of `results` (empty for a sweep
/// of one card, or when every card runs alike).
pub fn card_advice(results: &[StepResult], chosen: usize) -> Vec<CardAdvice> {
    let Some(at) = results.get(chosen).filter(|at| at.cards.len() > 1) else {
        return Vec::new();
    };
    let mut advice = Vec::new();
    for card in &at.cards {
        let others: Vec<&CardStepStats> = at
            .cards
            .iter()
            .filter(|other| other.gpu_index != card.gpu_index)
            .collect();
        let others_c = median(
            others
                .iter()
                .filter_map(|other| other.stats.average_temperature_c)
                .collect(),
        );
        let temperature_c = card.stats.average_temperature_c;
        let throttled_s = thermal_throttle_s(&card.stats);
        let others_throttle = others
            .iter()
            .any(|other| thermal_throttle_s(&other.stats) >= THROTTLED_S);
        let above_c = match (temperature_c, others_c) {
            (Some(own), Some(others)) => own - others,
            _ => 0.0,
        };
        let reason = if throttled_s >= THROTTLED_S && !others_throttle {
            CardAdviceReason::ThermalThrottle { throttled_s }
        } else if above_c > HOTTER_BY_C {
            CardAdviceReason::Hotter {
                above_others_c: above_c,
            }
        } else {
            continue;
        };
        let ceiling_c = others_c.map(|others| others + HOTTER_BY_C);
        let cool = coolest_limit(results, at, card.gpu_index, ceiling_c);
        advice.push(CardAdvice {
            gpu_index: card.gpu_index,
            reason,
            temperature_c,
            power_limit_pct: cool.map(|(result, _)| result.step.power_limit_pct),
            power_limit_mw: cool.map(|(result, _)| result.step.power_limit_mw),
            sentence: sentence(
                results,
                at,
                card.gpu_index,
                reason,
                temperature_c,
                others_c,
                cool,
            ),
        });
    }
    advice
}

/// The row with the highest power limit at or under `at`'s (same clock cap and offset) at which
/// card `gpu_index` neither throttled for heat nor ran over `ceiling_c`, with that card's stats.
fn coolest_limit<'a>(
    results: &'a [StepResult],
    at: &StepResult,
    gpu_index: u32,
    ceiling_c: Option<f64>,
) -> Option<(&'a StepResult, &'a CardStepStats)> {
    results
        .iter()
        .filter(|result| {
            !result.step.is_repeat
                && result.unstable.is_none()
                && result.step.power_limit_pct < at.step.power_limit_pct
                && result.step.clock_cap_mhz == at.step.clock_cap_mhz
                && result.step.gpu_clock_offset_mhz == at.step.gpu_clock_offset_mhz
        })
        .filter_map(|result| {
            let card = result
                .cards
                .iter()
                .find(|card| card.gpu_index == gpu_index)?;
            let cool_enough = thermal_throttle_s(&card.stats) < THROTTLED_S
                && match (card.stats.average_temperature_c, ceiling_c) {
                    (Some(celsius), Some(ceiling)) => celsius <= ceiling,
                    (_, None) => true,
                    (None, Some(_)) => false,
                };
            cool_enough.then_some((result, card))
        })
        .max_by(|a, b| {
            a.0.step
                .power_limit_pct
                .total_cmp(&b.0.step.power_limit_pct)
        })
}

/// "GPU 3 throttles for heat at 90 % (405 W) (12 s of 40 s measured) while the others do
/// not: a hot slot. Give it its own power limit of 70 % (315 W): ...".
fn sentence(
    results: &[StepResult],
    at: &StepResult,
    gpu_index: u32,
    reason: CardAdviceReason,
    temperature_c: Option<f64>,
    others_c: Option<f64>,
    cool: Option<(&StepResult, &CardStepStats)>,
) -> String {
    let own = temperature_c.map_or_else(String::new, |celsius| format!("{celsius:.0} °C"));
    let others = others_c.map_or_else(String::new, |celsius| {
        format!("the others' {celsius:.0} °C")
    });
    let what = match reason {
        CardAdviceReason::ThermalThrottle { throttled_s } => format!(
            "GPU {gpu_index} throttles for heat at {} ({throttled_s:.0} s of {:.0} s measured, {own} against {others}) while the others do not",
            at.step.label, at.measured_s
        ),
        CardAdviceReason::Hotter { above_others_c } => format!(
            "GPU {gpu_index} runs {above_others_c:.0} °C hotter than the others at {} ({own} against {others})",
            at.step.label
        ),
    };
    let advice = match cool {
        Some((result, card)) => format!(
            "give it its own power limit of {} % ({}), the highest setting tried at which it ran {} without throttling for heat",
            number(result.step.power_limit_pct),
            gputune_formats::units::watts_exact(result.step.power_limit_mw),
            card.stats.average_temperature_c.map_or_else(
                || "cool enough".to_string(),
                |celsius| format!("{celsius:.0} °C")
            )
        ),
        None => {
            let lowest = results
                .iter()
                .filter(|result| !result.step.is_repeat)
                .map(|result| result.step.power_limit_pct)
                .fold(f64::INFINITY, f64::min);
            format!(
                "no setting tried (down to {} %) kept it cool: sweep lower power limits (--power-limits) or give the slot more air",
                number(lowest)
            )
        }
    };
    format!("{what}: a hot slot; {advice}.")
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|value| value.is_finite());
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() {
        0 => None,
        length if length % 2 == 1 => Some(values[middle]),
        _ => Some((values[middle - 1] + values[middle]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::reports::sweep_step::SweepStep;
    use gputune_formats::throttle::ThrottleReason;
    use gputune_formats::tuning::{ThrottleTime, TrialStats};

    /// A row of four cards at `percent`, card 3 at `hot_c` (throttled `hot_throttle_s`).
    fn row(percent: f64, cool_c: f64, hot_c: f64, hot_throttle_s: f64) -> StepResult {
        let stats = |celsius: f64, thermal_s: f64| TrialStats {
            average_temperature_c: Some(celsius),
            throttle_s: vec![ThrottleTime {
                reason: ThrottleReason::SwThermalSlowdown,
                seconds: thermal_s,
            }],
            ..TrialStats::default()
        };
        let mut result = StepResult::unmeasured(
            &SweepStep {
                label: format!("{percent} % ({} W)", percent * 4.5),
                power_limit_pct: percent,
                power_limit_mw: (percent * 4_500.0) as u32,
                clock_cap_mhz: None,
                gpu_clock_offset_mhz: None,
                settings: Vec::new(),
                is_repeat: false,
                in_force_note: String::new(),
            },
            String::new(),
        );
        result.unstable = None;
        result.measured_s = 40.0;
        result.cards = (0..4u32)
            .map(|gpu_index| CardStepStats {
                gpu_index,
                stats: if gpu_index == 3 {
                    stats(hot_c, hot_throttle_s)
                } else {
                    stats(cool_c + f64::from(gpu_index), 0.0)
                },
            })
            .collect();
        result
    }

    #[test]
    fn a_card_throttling_alone_gets_the_highest_limit_at_which_it_ran_cool() {
        let results = vec![
            row(100.0, 74.0, 88.0, 30.0),
            row(90.0, 72.0, 86.0, 12.0),
            row(80.0, 70.0, 83.0, 0.0),
            row(70.0, 67.0, 78.0, 0.0),
        ];
        let advice = card_advice(&results, 1);
        assert_eq!(advice.len(), 1, "{advice:?}");
        let hot = &advice[0];
        assert_eq!(hot.gpu_index, 3);
        assert_eq!(
            hot.reason,
            CardAdviceReason::ThermalThrottle { throttled_s: 12.0 }
        );
        // At 80 % it did not throttle but ran 83 °C, within 10 °C of the others' 73 °C at 90 %.
        assert_eq!(hot.power_limit_pct, Some(80.0));
        assert_eq!(hot.power_limit_mw, Some(360_000));
        assert!(
            hot.sentence.starts_with(
                "GPU 3 throttles for heat at 90 % (405 W) (12 s of 40 s measured, 86 °C against the others' 73 °C) while the others do not: a hot slot; give it its own power limit of 80 % (360 W)"
            ),
            "{}",
            hot.sentence
        );
    }

    #[test]
    fn a_card_much_hotter_without_throttling_is_named_and_a_box_running_alike_is_not() {
        let results = vec![row(100.0, 70.0, 86.0, 0.0), row(70.0, 62.0, 79.0, 0.0)];
        let advice = card_advice(&results, 0);
        assert_eq!(advice.len(), 1);
        assert!(matches!(
            advice[0].reason,
            CardAdviceReason::Hotter { above_others_c } if (above_others_c - 15.0).abs() < 1e-9
        ));
        // 79 °C at 70 % is within 10 °C of the others' 71 °C at 100 %.
        assert_eq!(advice[0].power_limit_pct, Some(70.0));
        // Nothing cooler was tried: the sentence says what to do instead.
        let only = card_advice(&results, 1);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].power_limit_pct, None);
        assert!(
            only[0]
                .sentence
                .contains("no setting tried (down to 70 %) kept it cool"),
            "{}",
            only[0].sentence
        );
        let alike = vec![row(100.0, 70.0, 74.0, 0.0)];
        assert!(card_advice(&alike, 0).is_empty());
        // Every card throttling is the room's heat, not one slot's.
        let mut all_hot = vec![row(100.0, 80.0, 84.0, 20.0)];
        for card in &mut all_hot[0].cards {
            card.stats.throttle_s[0].seconds = 20.0;
        }
        assert!(card_advice(&all_hot, 0).is_empty());
    }
}
