//! What a data-parallel job on the box gets: every step waits for the slowest card, so the box
//! runs at its pace; and the other way to even it, the faster cards at power limits that run
//! them at that pace (power ∝ clock³ from each card's own rate and draw), no slower and
//! drawing less.

use gputune_formats::reports::rank::{BoxPace, PaceLimit};

use super::remedy::{limit_in_range, power_for_rate};
use super::verdict::{Measured, SLOWER_WORTH_A_CAUSE_PCT, signed_pct};

pub fn box_pace(healthy: &[&Measured]) -> Option<BoxPace> {
    let mut rates: Vec<(&Measured, f64)> = healthy
        .iter()
        .filter_map(|m| Some((*m, m.rate()?)))
        .collect();
    rates.sort_by(|a, b| a.1.total_cmp(&b.1));
    let &(slowest_card, slowest) = rates.first()?;
    let best = rates.last().map_or(slowest, |(_, rate)| *rate);
    let count = rates.len() as f64;
    let mut at_the_slowest_pace = Vec::new();
    let mut saves_w = 0.0;
    if (slowest / best - 1.0) * 100.0 <= -SLOWER_WORTH_A_CAUSE_PCT {
        for (card, rate) in &rates[1..] {
            let Some(power_w) = card.together.as_ref().and_then(|f| f.power_mean_w) else {
                continue;
            };
            let wanted_w = power_for_rate(*rate, power_w, slowest);
            let Some((power_limit_mw, percent_of_default)) =
                limit_in_range(wanted_w, &card.constraints)
            else {
                continue;
            };
            saves_w += (power_w - f64::from(power_limit_mw) / 1000.0).max(0.0);
            at_the_slowest_pace.push(PaceLimit {
                gpu_index: card.gpu_index,
                power_limit_mw,
                percent_of_default,
            });
        }
    }
    at_the_slowest_pace.sort_by_key(|limit| limit.gpu_index);
    Some(BoxPace {
        slowest_gpu_index: slowest_card.gpu_index,
        box_tflops: slowest * count,
        sum_tflops: rates.iter().map(|(_, rate)| rate).sum(),
        box_tflops_evened: rates.get(1).map(|(_, next)| next * count),
        at_the_slowest_pace_saves_w: (!at_the_slowest_pace.is_empty()).then_some(saves_w),
        at_the_slowest_pace,
    })
}

/// "Or even it the other way: GPUs 0, 1, 2 at power limits of 87-88 % run at GPU 3's pace, the
/// box no slower, drawing about 150 W less."
pub fn other_way_sentence(pace: &BoxPace) -> Option<String> {
    let saves_w = pace.at_the_slowest_pace_saves_w?;
    let cards: Vec<String> = pace
        .at_the_slowest_pace
        .iter()
        .map(|limit| limit.gpu_index.to_string())
        .collect();
    let lowest = pace
        .at_the_slowest_pace
        .iter()
        .map(|l| l.percent_of_default)
        .min()?;
    let highest = pace
        .at_the_slowest_pace
        .iter()
        .map(|l| l.percent_of_default)
        .max()?;
    let percent = if lowest == highest {
        format!("a power limit of {lowest} %")
    } else {
        format!("power limits of {lowest}-{highest} %")
    };
    Some(format!(
        "Or even it the other way: GPU{} {} at {percent} run at GPU {}'s pace, the box no slower, drawing about {saves_w:.0} W less.",
        if cards.len() == 1 { "" } else { "s" },
        cards.join(", "),
        pace.slowest_gpu_index
    ))
}

pub fn pace_sentence(pace: &BoxPace, cards: usize) -> String {
    let slowest = pace.box_tflops / cards.max(1) as f64;
    let mut text = format!(
        "In a data-parallel job the box is as fast as its slowest card, GPU {}: {cards} × {slowest:.0} = {:.0} TFLOP/s of the {:.0} its cards give on their own",
        pace.slowest_gpu_index, pace.box_tflops, pace.sum_tflops
    );
    if let Some(evened) = pace
        .box_tflops_evened
        .filter(|evened| *evened >= pace.box_tflops * 1.005)
    {
        text.push_str(&format!(
            "; GPU {} as fast as the next slowest would make it {evened:.0} ({}).",
            pace.slowest_gpu_index,
            signed_pct((evened / pace.box_tflops - 1.0) * 100.0)
        ));
    } else {
        text.push('.');
    }
    text
}
