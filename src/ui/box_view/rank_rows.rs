//! The last ranking in the Box view: each card's place against the best and its GEMM rate in
//! the table, the ranking's sentences below it.

use eframe::egui::{self, RichText};

use super::cells::{Cell, Tone, drawable};
use super::columns::Table;
use gputune_formats::reports::rank::{CardRank, RankReport, RankVerdict};

/// "the best" (one card: the report's best), "0 % vs best", "−12 % vs best", with the verdict's
/// tone and the card's sentence on hover.
pub fn place(card: &CardRank, best_gpu_index: Option<u32>) -> Cell {
    let tone = match card.verdict {
        RankVerdict::Passes => Tone::Good,
        RankVerdict::Slow => Tone::Warning,
        RankVerdict::Failed => Tone::Bad,
        RankVerdict::NotRanked => Tone::Plain,
    };
    let text = match (card.verdict, card.vs_best_pct) {
        (RankVerdict::Failed, _) => "failed".to_string(),
        (RankVerdict::NotRanked, _) | (_, None) => "not ranked".to_string(),
        (_, Some(_)) if best_gpu_index == Some(card.gpu_index) => "the best".to_string(),
        (_, Some(pct)) => format!("{} % vs best", signed(pct)),
    };
    Cell {
        text,
        tone,
        hover: Some(drawable(&card.sentence)),
    }
}

/// A whole percentage with a real minus sign: "−12", "+3", "0" (never "−0").
fn signed(pct: f64) -> String {
    let rounded = pct.round();
    if rounded == 0.0 {
        "0".to_string()
    } else if rounded < 0.0 {
        format!("−{}", -rounded)
    } else {
        format!("+{rounded}")
    }
}

/// The GEMM rate together (alone when it has none), both on hover.
pub fn rate(card: &CardRank) -> Cell {
    let alone = card.alone.as_ref().and_then(|figures| figures.gemm_tflops);
    let together = card
        .together
        .as_ref()
        .and_then(|figures| figures.gemm_tflops);
    let text = together
        .or(alone)
        .map_or_else(|| "—".to_string(), |tflops| format!("{tflops:.1} TFLOP/s"));
    let hover = |rate: Option<f64>| rate.map_or_else(|| "—".to_string(), |r| format!("{r:.1}"));
    Cell {
        text,
        tone: Tone::Plain,
        hover: Some(format!(
            "Checked GEMM, TFLOP/s: {} alone, {} with every card loaded",
            hover(alone),
            hover(together)
        )),
    }
}

/// The ranking's rows in the table.
pub fn rank_rows(table: &mut Table<'_>, report: &RankReport) {
    let card_of = |gpu_index: u32| report.cards.iter().find(|card| card.gpu_index == gpu_index);
    table.row(
        "Rank",
        "Its GEMM rate against the best card's with all loaded (more than 10 % slower fails, \
         as gpu-fryer has it)",
        |gpu| {
            card_of(gpu.info.identity.index).map_or_else(
                || Cell::plain("—"),
                |card| place(card, report.best_gpu_index),
            )
        },
    );
    table.row("GEMM rate", "", |gpu| {
        card_of(gpu.info.identity.index).map_or_else(|| Cell::plain("—"), rate)
    });
}

/// The ranking's sentences: the cards that are slow or failed, the box's, and a stop.
pub fn rank_sentences_ui(ui: &mut egui::Ui, report: &RankReport) {
    ui.label(
        RichText::new(format!(
            "Ranking at {} ({}, {})",
            report.settings,
            gputune_formats::units::local_time(report.ended_at_ms, "%H:%M"),
            gputune_formats::units::duration_s(report.ran_s)
        ))
        .strong(),
    );
    for card in &report.cards {
        if card.verdict != RankVerdict::Passes {
            let cell = place(card, report.best_gpu_index);
            super::columns::cell_ui(
                ui,
                &Cell {
                    text: drawable(&card.sentence),
                    hover: None,
                    ..cell
                },
            );
        }
    }
    for sentence in &report.summary {
        ui.label(drawable(sentence));
    }
    if let Some(stopped) = &report.stopped {
        ui.label(RichText::new(format!("Stopped: {}.", drawable(stopped))).weak());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(verdict: RankVerdict, vs_best_pct: Option<f64>) -> CardRank {
        CardRank {
            gpu_index: 3,
            gpu_uuid: "GPU-3".to_string(),
            gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
            alone: None,
            together: None,
            vs_best_pct,
            verdict,
            cause: None,
            remedy: None,
            sentence: "GPU 3: −12 % vs the best, 86 °C, thermal throttling: a hot slot".to_string(),
        }
    }

    #[test]
    fn the_place_says_how_far_behind_the_best_in_the_verdicts_tone() {
        let slow = place(&card(RankVerdict::Slow, Some(-12.3)), Some(0));
        assert_eq!(
            (slow.text.as_str(), slow.tone),
            ("−12 % vs best", Tone::Warning)
        );
        assert!(slow.hover.is_some_and(|hover| hover.contains("hot slot")));
        let best = card(RankVerdict::Passes, Some(0.0));
        assert_eq!(place(&best, Some(best.gpu_index)).text, "the best");
        // Another card level with the best is not a second "best".
        assert_eq!(
            place(&card(RankVerdict::Passes, Some(-0.2)), Some(7)).text,
            "0 % vs best"
        );
        assert_eq!(
            place(&card(RankVerdict::Passes, Some(-4.0)), Some(0)).tone,
            Tone::Good
        );
        assert_eq!(
            place(&card(RankVerdict::Failed, Some(-1.0)), Some(0)).text,
            "failed"
        );
        assert_eq!(
            place(&card(RankVerdict::NotRanked, None), Some(0)).text,
            "not ranked"
        );
        assert_eq!(rate(&card(RankVerdict::NotRanked, None)).text, "—");
    }
}
