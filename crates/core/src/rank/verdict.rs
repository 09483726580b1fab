//! The ranking from the measured phases: each card against the best, gpu-fryer's rule (more
//! than 10 % slower fails), the cause the evidence names, a power limit for a hot card, and
//! the box's pace (pace.rs).

use gputune_formats::card::Constraints;
use gputune_formats::reports::rank::{
    BoxPace, CardRank, PhaseFigures, PowerLimitRemedy, RankVerdict, SLOWER_THAN_BEST_FAILS_PCT,
    SlowCause,
};
use gputune_formats::reports::stability::Ending;

use super::pace::{box_pace, other_way_sentence, pace_sentence};
use super::remedy::{HeatEvidence, THERMAL_PCT, median, power_limit};
use super::watch::IdlePoint;

/// A card this much slower than the best gets a cause named.
pub const SLOWER_WORTH_A_CAUSE_PCT: f64 = 3.0;
/// This much hotter than the others' median: a hot slot, whatever it did alone.
const HOTTER_THAN_OTHERS_C: f64 = 5.0;

/// What was measured on one card.
#[derive(Debug, Clone)]
pub struct Measured {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub gpu_name: String,
    pub constraints: Constraints,
    pub idle: Option<IdlePoint>,
    pub alone: Option<PhaseFigures>,
    pub together: Option<PhaseFigures>,
}

impl Measured {
    fn failure(&self) -> Option<(String, &'static str)> {
        [(&self.alone, "alone"), (&self.together, "together")]
            .into_iter()
            .find_map(
                |(figures, phase)| match figures.as_ref().map(|f| &f.ending) {
                    Some(Ending::Unstable { finding }) => Some((finding.describe(), phase)),
                    _ => None,
                },
            )
    }

    /// Its GEMM rate where the box's job sees it: together, else alone.
    pub fn rate(&self) -> Option<f64> {
        let rate = |figures: &Option<PhaseFigures>| figures.as_ref().and_then(|f| f.gemm_tflops);
        rate(&self.together).or_else(|| rate(&self.alone))
    }

    fn evidence(&self) -> HeatEvidence<'_> {
        HeatEvidence {
            gpu_index: self.gpu_index,
            constraints: &self.constraints,
            idle: self.idle,
            alone: self.alone.as_ref(),
            together: self.together.as_ref(),
        }
    }

    fn late_temperature_c(&self) -> Option<f64> {
        self.together
            .as_ref()
            .or(self.alone.as_ref())
            .and_then(|f| f.late_temperature_mean_c)
    }
}

/// The ranked cards, the best one, and the box's pace.
pub struct Ranked {
    pub cards: Vec<CardRank>,
    pub best_gpu_index: Option<u32>,
    pub box_pace: Option<BoxPace>,
    pub summary: Vec<String>,
}

/// What every card is set against.
struct Context<'a> {
    best: Option<(u32, f64)>,
    best_alone: Option<f64>,
    /// The highest power limit a card ran at (only a ranking with --force has several).
    top_limit_w: Option<f64>,
    peers_heating: &'a [f64],
}

pub fn rank(measured: &[Measured]) -> Ranked {
    let healthy: Vec<&Measured> = measured.iter().filter(|m| m.failure().is_none()).collect();
    // The first of equals is the best.
    let best = healthy.iter().filter_map(|m| Some((m, m.rate()?))).fold(
        None,
        |top: Option<(&&Measured, f64)>, (m, rate)| match top {
            Some((_, top_rate)) if top_rate >= rate => top,
            _ => Some((m, rate)),
        },
    );
    let best_alone = healthy
        .iter()
        .filter_map(|m| m.alone.as_ref()?.gemm_tflops)
        .fold(None, |top: Option<f64>, rate| {
            Some(top.map_or(rate, |t| t.max(rate)))
        });
    let peers_heating: Vec<f64> = measured
        .iter()
        .filter_map(|m| m.evidence().own_heating().map(|(slope, _)| slope))
        .collect();
    let top_limit_w = healthy
        .iter()
        .filter_map(|m| m.together.as_ref().or(m.alone.as_ref())?.power_limit_w)
        .reduce(f64::max);
    let context = Context {
        best: best.map(|(m, rate)| (m.gpu_index, rate)),
        best_alone,
        top_limit_w,
        peers_heating: &peers_heating,
    };
    let cards = measured
        .iter()
        .map(|card| {
            let others: Vec<f64> = measured
                .iter()
                .filter(|other| other.gpu_index != card.gpu_index)
                .filter_map(Measured::late_temperature_c)
                .collect();
            rank_card(card, &context, median(&others))
        })
        .collect::<Vec<_>>();
    let box_pace = box_pace(&healthy);
    let mut summary = Vec::new();
    let rated = healthy.iter().filter(|m| m.rate().is_some()).count();
    if let Some(pace) = box_pace.as_ref().filter(|_| rated > 1) {
        summary.push(pace_sentence(pace, rated));
        summary.extend(other_way_sentence(pace));
    }
    let failing = cards
        .iter()
        .filter(|card| matches!(card.verdict, RankVerdict::Slow | RankVerdict::Failed))
        .count();
    if failing > 0 {
        summary.push(format!(
            "{failing} of {} cards fail: more than {SLOWER_THAN_BEST_FAILS_PCT:.0} % slower than the best (huggingface/gpu-fryer's rule), or a wrong result.",
            cards.len()
        ));
    }
    Ranked {
        cards,
        best_gpu_index: best.map(|(m, _)| m.gpu_index),
        box_pace,
        summary,
    }
}

fn rank_card(card: &Measured, context: &Context<'_>, others_c: Option<f64>) -> CardRank {
    let index = card.gpu_index;
    let best = context.best;
    let rate = card.rate();
    let vs_best_pct = match (rate, best) {
        // To a tenth of a percent: finer is the readings' noise.
        (Some(rate), Some((_, best))) if best > 0.0 => {
            // (+ 0.0: a rounded −0.0 reads 0.)
            Some(((rate / best - 1.0) * 1000.0).round() / 10.0 + 0.0)
        }
        _ => None,
    };
    let mut cause = None;
    let mut remedy = None;
    let mut sentence = format!("GPU {index}: ");
    let verdict = if let Some((finding, phase)) = card.failure() {
        sentence.push_str(&format!(
            "fails: {finding} under load {phase}; a card that computes wrong results has no place in the box"
        ));
        RankVerdict::Failed
    } else if let (Some(rate), Some(vs_best)) = (rate, vs_best_pct) {
        if best.is_some_and(|(best_index, _)| best_index == index) {
            sentence.push_str(&format!("the best, {rate:.0} TFLOP/s"));
        } else {
            sentence.push_str(&format!(
                "{} vs the best, {rate:.0} TFLOP/s",
                signed_pct(vs_best)
            ));
        }
        sentence.push_str(&conditions(card));
        let hot = card.late_temperature_c().zip(others_c);
        cause = find_cause(card, vs_best, context, hot);
        if let Some(found) = cause {
            sentence.push_str(&format!(": {}", describe_cause(found, card)));
        }
        if matches!(cause, Some(SlowCause::HotSlot | SlowCause::Cooling)) {
            match power_limit(&card.evidence(), context.peers_heating) {
                Ok(limit) => {
                    sentence.push_str(&remedy_words(&limit, rate));
                    remedy = Some(limit);
                }
                Err(why) => sentence.push_str(&format!("; no power limit suggested: {why}")),
            }
        }
        if vs_best < -SLOWER_THAN_BEST_FAILS_PCT {
            sentence.push_str(&format!(
                "; fails: more than {SLOWER_THAN_BEST_FAILS_PCT:.0} % slower than the best"
            ));
            RankVerdict::Slow
        } else {
            RankVerdict::Passes
        }
    } else {
        let why = [&card.together, &card.alone]
            .into_iter()
            .flatten()
            .find_map(|figures| match &figures.ending {
                Ending::NotRun { reason } | Ending::Stopped { reason } => Some(reason.clone()),
                _ => None,
            })
            .unwrap_or_else(|| "the ranking ended before its turn".to_string());
        sentence.push_str(&format!("not ranked: {why}"));
        RankVerdict::NotRanked
    };
    sentence.push('.');
    CardRank {
        gpu_index: index,
        gpu_uuid: card.gpu_uuid.clone(),
        gpu_name: card.gpu_name.clone(),
        alone: card.alone.clone(),
        together: card.together.clone(),
        vs_best_pct,
        verdict,
        cause,
        remedy,
        sentence,
    }
}

/// "; a power limit of 88 % (396 W) on GPU 3 keeps it under 83 °C at about 170 TFLOP/s: it
/// evens the box", or why it does not.
fn remedy_words(limit: &PowerLimitRemedy, rate_now: f64) -> String {
    let index = limit.gpu_index;
    let head = format!(
        "; a power limit of {} % ({}) on GPU {index} keeps it under {:.0} °C",
        limit.percent_of_default,
        gputune_formats::units::watts(limit.power_limit_mw),
        limit.target_c + 1.0
    );
    match limit.predicted_tflops {
        Some(predicted) if limit.evens_the_box => {
            format!(
                "{head} at about {predicted:.0} TFLOP/s, faster than it runs throttled: it evens the box"
            )
        }
        Some(predicted) => format!(
            "{head}, but at about {predicted:.0} TFLOP/s, slower than it runs throttled ({rate_now:.0}): give its slot more air (its fans, a gap to its neighbours) instead"
        ),
        None => format!("{head} (its rate there cannot be told: it throttled for heat alone too)"),
    }
}

/// ", 2745 MHz, 86 °C, thermal throttling 64 % of the time together (0 % alone)".
fn conditions(card: &Measured) -> String {
    let Some(shown) = card.together.as_ref().or(card.alone.as_ref()) else {
        return String::new();
    };
    let mut text = String::new();
    if let Some(clock) = shown.clock_mean_mhz {
        text.push_str(&format!(", {clock:.0} MHz"));
    }
    if let Some(peak) = shown.temperature_peak_c {
        text.push_str(&format!(", {peak} °C"));
    }
    let thermal = shown.thermal_pct();
    if thermal > 0.0 {
        let alone = match (&card.alone, &card.together) {
            (Some(alone), Some(_)) => format!(" ({:.0} % alone)", alone.thermal_pct()),
            _ => String::new(),
        };
        text.push_str(&format!(
            ", thermal throttling {thermal:.0} % of the time{alone}"
        ));
    }
    text
}

fn find_cause(
    card: &Measured,
    vs_best: f64,
    context: &Context<'_>,
    hot: Option<(f64, f64)>,
) -> Option<SlowCause> {
    let best_alone = context.best_alone;
    let thermal = |figures: &Option<PhaseFigures>| {
        figures
            .as_ref()
            .is_some_and(|f| f.thermal_pct() >= THERMAL_PCT)
    };
    let (together_hot, alone_hot) = (thermal(&card.together), thermal(&card.alone));
    let hotter = hot.is_some_and(|(own, others)| own - others >= HOTTER_THAN_OTHERS_C);
    if together_hot && (!alone_hot || hotter) {
        return Some(SlowCause::HotSlot);
    }
    if together_hot || alone_hot {
        return Some(if hotter {
            SlowCause::HotSlot
        } else {
            SlowCause::Cooling
        });
    }
    if vs_best > -SLOWER_WORTH_A_CAUSE_PCT {
        return None;
    }
    let limit = |figures: &Option<PhaseFigures>| figures.as_ref().and_then(|f| f.power_limit_w);
    let alone_rate = card.alone.as_ref().and_then(|f| f.gemm_tflops);
    let alone_slow = alone_rate
        .zip(best_alone)
        .is_some_and(|(rate, best)| (rate / best - 1.0) * 100.0 <= -SLOWER_WORTH_A_CAUSE_PCT);
    let together_rate = card.together.as_ref().and_then(|f| f.gemm_tflops);
    let slower_together = alone_rate
        .zip(together_rate)
        .is_some_and(|(alone, together)| {
            (together / alone - 1.0) * 100.0 <= -SLOWER_WORTH_A_CAUSE_PCT
        });
    if let (Some(own), Some(top)) = (
        limit(&card.together).or(limit(&card.alone)),
        context.top_limit_w,
    ) && own + 1.0 < top
    {
        return Some(SlowCause::PowerLimit);
    }
    if alone_slow {
        Some(SlowCause::Silicon)
    } else if slower_together {
        Some(SlowCause::Unexplained)
    } else {
        Some(SlowCause::Silicon)
    }
}

fn describe_cause(cause: SlowCause, card: &Measured) -> String {
    match cause {
        SlowCause::HotSlot => "a hot slot (it throttles for heat where the others do not)".to_string(),
        SlowCause::Cooling => "its cooling (it throttles for heat even alone)".to_string(),
        SlowCause::PowerLimit => format!(
            "its power limit ({:.0} W)",
            card.together
                .as_ref()
                .and_then(|f| f.power_limit_w)
                .unwrap_or_default()
        ),
        SlowCause::Silicon => {
            "its silicon (slower at cool temperatures, no thermal throttling: it needs more power for the same clock)".to_string()
        }
        SlowCause::Unexplained => {
            "slower together than alone with no throttle reason: the host (PCIe link, CPU) or the power supply".to_string()
        }
    }
}

/// "−12 %", "+3 %" (a true minus sign).
pub fn signed_pct(pct: f64) -> String {
    let rounded = pct.round();
    if rounded == 0.0 {
        "0 %".to_string()
    } else if rounded < 0.0 {
        format!("\u{2212}{:.0} %", -rounded)
    } else {
        format!("+{rounded:.0} %")
    }
}
