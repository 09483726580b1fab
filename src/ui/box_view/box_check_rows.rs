//! The last box check in the Box view: each card's verdict and its peak power in the table; the
//! check's sentence, its steps (the box's power, how well the pulse edges lined up), the first
//! card to fail and the clock cap it recommends below it, with a button to prove that cap.

use eframe::egui::{self, RichText};

use super::cells::{Cell, Tone, drawable};
use super::columns::Table;
use crate::ui::style::{ERROR_TEXT, GOOD_TEXT, WARNING_TEXT};
use gputune_formats::profile::Verdict;
use gputune_formats::reports::box_check::{BoxCheckReport, StepReport};
use gputune_formats::reports::stability::{CheckReport, Ending};

fn tone(verdict: Verdict) -> Tone {
    match verdict {
        Verdict::Stable => Tone::Good,
        Verdict::Unstable => Tone::Bad,
        Verdict::Stopped | Verdict::NotRun => Tone::Plain,
    }
}

/// "stable", "UNSTABLE", "stopped", "not run", the card's finding on hover.
pub fn card_verdict(card: &CheckReport) -> Cell {
    let text = match card.verdict {
        Verdict::Stable => "stable",
        Verdict::Unstable => "UNSTABLE",
        Verdict::Stopped => "stopped",
        Verdict::NotRun => "not run",
    };
    let why = match &card.result.ending {
        Ending::Completed => format!("Every result right at {}.", card.settings),
        Ending::Unstable { finding } => finding.describe(),
        Ending::Stopped { reason } | Ending::NotRun { reason } => reason.clone(),
    };
    Cell {
        text: text.to_string(),
        tone: tone(card.verdict),
        hover: Some(drawable(&why)),
    }
}

/// The card's highest power in any step of the check.
fn peak_power(gpu_index: u32, steps: &[StepReport]) -> Cell {
    let peak = steps
        .iter()
        .flat_map(|step| &step.cards)
        .filter(|card| card.gpu_index == gpu_index)
        .filter_map(|card| card.power_peak_w)
        .fold(None, |peak: Option<f64>, watts| {
            Some(peak.map_or(watts, |peak| peak.max(watts)))
        });
    Cell::plain(peak.map_or_else(|| "—".to_string(), |watts| format!("{watts:.0} W peak")))
}

/// The box check's rows in the table.
pub fn box_check_rows(table: &mut Table<'_>, report: &BoxCheckReport) {
    let card_of = |gpu_index: u32| report.cards.iter().find(|card| card.gpu_index == gpu_index);
    table.row(
        "Box check",
        "Its verdict in the last check of every card at once, in phase",
        |gpu| card_of(gpu.info.identity.index).map_or_else(|| Cell::plain("—"), card_verdict),
    );
    table.row(
        "Power in check",
        "Its highest power reading in any step of the box check",
        |gpu| {
            let index = gpu.info.identity.index;
            match card_of(index) {
                Some(_) => peak_power(index, &report.steps),
                None => Cell::plain("—"),
            }
        },
    );
}

/// "10 ms pulses every 20 ms (50 % duty): the box 3,420 W average, 3,610 W peak; 120 edges,
/// within 0.4 ms".
fn step_line(step: &StepReport) -> String {
    let mut line = step.step.describe();
    let power = step.box_power_mean_w.zip(step.box_power_peak_w);
    if power.is_none() && step.edges == 0 {
        line.push_str(": not reached");
        return line;
    }
    if let Some((mean, peak)) = power {
        line.push_str(&format!(": the box {mean:.0} W average, {peak:.0} W peak"));
    }
    if step.edges > 0 {
        let edges = if step.edges == 1 { "edge" } else { "edges" };
        line.push_str(&format!("; {} {edges}", step.edges));
        if let Some(spread_ms) = step.edge_spread_max_ms {
            line.push_str(&format!(", every card within {spread_ms:.1} ms of it"));
        }
    }
    line
}

/// The check's sentence, steps, first failure and recommendation; returns the clock cap the
/// user asked to prove.
pub fn box_check_sentences_ui(ui: &mut egui::Ui, report: &BoxCheckReport) -> Option<u32> {
    let colour = match report.verdict {
        // Every card right, but the supply's worst case untested: not a pass to show in green.
        Verdict::Stable if !report.out_of_phase().is_empty() => WARNING_TEXT,
        Verdict::Stable => GOOD_TEXT,
        Verdict::Unstable => ERROR_TEXT,
        Verdict::Stopped | Verdict::NotRun => WARNING_TEXT,
    };
    let ended = gputune_formats::units::local_time(report.ended_at_ms, "%H:%M");
    ui.label(
        RichText::new(format!(
            "Box check ({ended}): {}",
            drawable(&report.sentence)
        ))
        .strong()
        .color(colour),
    );
    for step in &report.steps {
        ui.label(RichText::new(step_line(step)).small());
    }
    if let Some(failure) = &report.first_failure {
        let during = failure.step.map_or_else(
            || "before the load began".to_string(),
            |step| format!("during {}", step.describe()),
        );
        let lost = if failure.all_cards_lost {
            " Every card was lost at once: the machine (its power supply) went down."
        } else {
            ""
        };
        ui.label(
            RichText::new(format!(
                "GPU {} failed first, {:.0} s in, {during}.{lost}",
                failure.gpu_index, failure.at_s
            ))
            .color(ERROR_TEXT),
        )
        .on_hover_text(drawable(&failure.finding));
    }
    if !report.put_back_complete {
        ui.label(
            RichText::new(format!(
                "Not everything could be put back: {}",
                report.put_back.join(" ")
            ))
            .color(ERROR_TEXT),
        );
    }
    let recommendation = report.recommendation.as_ref()?;
    let mut prove = None;
    ui.horizontal_wrapped(|ui| {
        ui.label(
            RichText::new(format!(
                "Recommended: a clock cap of {} MHz on every card ({}).",
                recommendation.clock_cap_mhz,
                if recommendation.confirmed {
                    "the failing step passed at it"
                } else {
                    "worked out from the box's power, not yet proven"
                },
            ))
            .color(WARNING_TEXT),
        )
        .on_hover_text(drawable(&recommendation.how));
        let button = format!("Check again at {} MHz", recommendation.clock_cap_mhz);
        if ui
            .button(button)
            .on_hover_text("The whole check again, every card held at this clock cap")
            .clicked()
        {
            prove = Some(recommendation.clock_cap_mhz);
        }
    });
    prove
}
