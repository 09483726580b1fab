//! The runs over the whole box as the window knows them (each kind's last run, its report kept
//! for the session) and the Box view's row of buttons that start them, with the running one's
//! progress and its Stop.

use eframe::egui::{self, RichText};

use super::{BoxAction, BoxView};
use crate::ui::style::ERROR_TEXT;
use gputune_core::link::box_runs::{BoxLaunch, BoxProgress, BoxRunKind, BoxRunNews, BoxRunView};
use gputune_core::rank::options::{LONGEST_TOGETHER_S, SHORTEST_TOGETHER_S};
use gputune_formats::reports::rank::RankReport;
use gputune_formats::units::duration_s;

/// Each kind's last run as the window heard of it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoxRunsSeen {
    pub rank: Option<BoxRunView<RankReport>>,
}

/// A new view of a run: a refusal leaves the last report shown, with why the new one did not
/// start.
fn merged<R>(old: Option<BoxRunView<R>>, new: BoxRunView<R>) -> BoxRunView<R> {
    match (old, new.refused) {
        (Some(old), Some(refused)) => BoxRunView {
            running: old.running,
            progress: old.progress,
            report: old.report,
            refused: Some(refused),
        },
        (_, refused) => BoxRunView { refused, ..new },
    }
}

impl BoxRunsSeen {
    pub fn take(&mut self, news: BoxRunNews) {
        match news {
            BoxRunNews::Rank(view) => self.rank = Some(merged(self.rank.take(), view)),
        }
    }

    /// The run going on now, by its noun.
    pub fn running(&self) -> Option<&'static str> {
        self.rank
            .as_ref()
            .filter(|view| view.running)
            .map(|_| "ranking")
    }

    /// The daemon that ran them went away: a running run ended with it. Says which.
    pub fn ended_with_the_daemon(&mut self) -> Option<&'static str> {
        let running = self.running();
        if let Some(view) = &mut self.rank {
            view.running = false;
        }
        running
    }
}

/// Every card of the box.
fn every_card(gpu_count: usize) -> Vec<u32> {
    (0..gpu_count as u32).collect()
}

/// The buttons, or the running run's progress and Stop; then the last refusal.
pub fn runs_ui(
    ui: &mut egui::Ui,
    view: &mut BoxView,
    seen: &BoxRunsSeen,
    gpu_count: usize,
) -> Vec<BoxAction> {
    let mut actions = Vec::new();
    let running = seen.rank.as_ref().filter(|view| view.running);
    ui.horizontal_wrapped(|ui| {
        if let Some(view) = running {
            if ui.button("Stop").clicked() {
                actions.push(BoxAction::StopRun);
            }
            progress_ui(ui, "Ranking the cards", view.progress.as_ref());
            return;
        }
        actions.extend(rank_button(ui, view, gpu_count));
    });
    if let Some(view) = running {
        for line in view.progress.iter().flat_map(|progress| &progress.cards) {
            ui.label(RichText::new(line).small().weak());
        }
    }
    if let Some(refused) = seen.rank.as_ref().and_then(|view| view.refused.as_ref()) {
        ui.label(RichText::new(refused).color(ERROR_TEXT));
    }
    actions
}

/// "Rank the cards" and how long all cards run together.
fn rank_button(ui: &mut egui::Ui, view: &mut BoxView, gpu_count: usize) -> Option<BoxAction> {
    let together_s = view.rank_together_s;
    let alone_s = together_s / 2.0;
    let rank_s = alone_s * gpu_count as f64 + together_s;
    let clicked = ui
        .button("Rank the cards")
        .on_hover_text(format!(
            "The same checked load on each card at the same settings: {} on each alone, then \
             {} on all {gpu_count} together (about {}). Cards busy with other programs, or at \
             different settings, are refused.",
            duration_s(alone_s),
            duration_s(together_s),
            duration_s(rank_s)
        ))
        .clicked();
    let label = ui.label("for");
    ui.add(
        egui::DragValue::new(&mut view.rank_together_s)
            .range(SHORTEST_TOGETHER_S..=LONGEST_TOGETHER_S)
            .speed(1.0)
            .max_decimals(0)
            .suffix(" s together"),
    )
    .labelled_by(label.id)
    .on_hover_text("Each card runs alone for half of it first");
    clicked.then(|| {
        BoxAction::StartRun(BoxLaunch {
            kind: BoxRunKind::Rank { together_s },
            gpu_indices: every_card(gpu_count),
        })
    })
}

/// "Ranking the cards: GPU 3 alone (4 of 8), 32 s of 1 min, about 7 min left" and its bar.
fn progress_ui(ui: &mut egui::Ui, doing: &str, progress: Option<&BoxProgress>) {
    let Some(progress) = progress else {
        ui.label(format!("{doing}: starting…"));
        return;
    };
    let fraction = if progress.phase_s > 0.0 {
        (progress.phase_elapsed_s / progress.phase_s).clamp(0.0, 1.0) as f32
    } else {
        0.0
    };
    ui.add(
        egui::ProgressBar::new(fraction)
            .desired_width(160.0)
            .text(format!(
                "{} of {}",
                duration_s(progress.phase_elapsed_s),
                duration_s(progress.phase_s)
            )),
    );
    ui.label(format!(
        "{doing}: {}, about {} left",
        progress.phase,
        duration_s(progress.left_s)
    ));
}
