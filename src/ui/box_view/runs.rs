//! The runs over the whole box as the window knows them (each kind's last run, its report kept
//! for the session) and the Box view's row of buttons that start them, with the running one's
//! progress and its Stop.

use eframe::egui::{self, RichText};

use super::cells::drawable;
use super::{BoxAction, BoxView};
use crate::ui::style::ERROR_TEXT;
use gputune_core::link::box_runs::{
    BoxLaunch, BoxProgress, BoxRunKind, BoxRunNews, BoxRunView, ProgressUnit,
};
use gputune_core::pcie::LinksOptions;
use gputune_core::rank::options::{LONGEST_TOGETHER_S, SHORTEST_TOGETHER_S};
use gputune_formats::reports::links::LinksReport;
use gputune_formats::reports::rank::RankReport;
use gputune_formats::units::duration_s;

/// Each kind's last run as the window heard of it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoxRunsSeen {
    pub rank: Option<BoxRunView<RankReport>>,
    pub links: Option<BoxRunView<LinksReport>>,
}

/// A new view of a run: a refusal leaves the last report shown, with why the new one did not
/// run.
fn merged<R>(old: Option<BoxRunView<R>>, new: BoxRunView<R>) -> BoxRunView<R> {
    match (old, new.refused) {
        (Some(old), Some(refused)) if new.progress.is_none() => BoxRunView {
            refused: Some(refused),
            ..old
        },
        (_, refused) => BoxRunView { refused, ..new },
    }
}

/// What the buttons need of a run, whatever its report.
struct RunState<'a> {
    /// "Ranking the cards".
    doing: &'static str,
    running: bool,
    stopping: bool,
    progress: Option<&'a BoxProgress>,
    refused: Option<&'a String>,
}

fn state_of<'a, R>(doing: &'static str, view: Option<&'a BoxRunView<R>>) -> Option<RunState<'a>> {
    view.map(|view| RunState {
        doing,
        running: view.running,
        stopping: view.stopping,
        progress: view.progress.as_ref(),
        refused: view.refused.as_ref(),
    })
}

impl BoxRunsSeen {
    pub fn take(&mut self, news: BoxRunNews) {
        match news {
            BoxRunNews::Rank(view) => self.rank = Some(merged(self.rank.take(), view)),
            BoxRunNews::Links(view) => self.links = Some(merged(self.links.take(), view)),
        }
    }

    fn states(&self) -> impl Iterator<Item = RunState<'_>> {
        [
            state_of("Ranking the cards", self.rank.as_ref()),
            state_of("Testing the links", self.links.as_ref()),
        ]
        .into_iter()
        .flatten()
    }

    /// The run going on now, by what it does.
    pub fn running(&self) -> Option<&'static str> {
        self.states()
            .find(|state| state.running)
            .map(|state| state.doing)
    }

    /// The daemon that ran them went away: a running run ended with it. Says which.
    pub fn ended_with_the_daemon(&mut self) -> Option<&'static str> {
        let running = self.running();
        if let Some(view) = &mut self.rank {
            view.running = false;
        }
        if let Some(view) = &mut self.links {
            view.running = false;
        }
        running
    }
}

/// Every card of the box.
fn every_card(gpu_count: usize) -> Vec<u32> {
    (0..gpu_count as u32).collect()
}

/// The buttons, or the running run's progress and Stop; then the last refusals.
pub fn runs_ui(
    ui: &mut egui::Ui,
    view: &mut BoxView,
    seen: &BoxRunsSeen,
    gpu_count: usize,
) -> Vec<BoxAction> {
    let mut actions = Vec::new();
    let running = seen.states().find(|state| state.running);
    ui.horizontal_wrapped(|ui| {
        if let Some(state) = &running {
            if state.stopping {
                ui.add_enabled(false, egui::Button::new("Stop"))
                    .on_disabled_hover_text("The copies under way finish first");
            } else if ui.button("Stop").clicked() {
                actions.push(BoxAction::StopRun);
            }
            progress_ui(ui, state);
            return;
        }
        actions.extend(rank_button(ui, view, gpu_count));
        ui.separator();
        actions.extend(links_button(ui, gpu_count));
    });
    if let Some(state) = &running {
        for line in state.progress.iter().flat_map(|progress| &progress.cards) {
            ui.label(RichText::new(drawable(line)).small().weak());
        }
    }
    for refused in seen.states().filter_map(|state| state.refused) {
        ui.label(RichText::new(drawable(refused)).color(ERROR_TEXT));
    }
    actions
}

/// "Test the links".
fn links_button(ui: &mut egui::Ui, gpu_count: usize) -> Option<BoxAction> {
    let pairs = gpu_count * gpu_count.saturating_sub(1);
    ui.button("Test the links")
        .on_hover_text(format!(
            "Each card's PCIe link under load against its maximum, and copies checked bit for \
             bit: host to card and back on each of the {gpu_count} cards, card to card for each \
             of the {pairs} ordered pairs (peer to peer where the driver allows it). Changes no \
             setting; cards others compute on are refused."
        ))
        .clicked()
        .then(|| {
            BoxAction::StartRun(BoxLaunch {
                kind: BoxRunKind::Links {
                    size_bytes: LinksOptions::default().size_bytes,
                },
                gpu_indices: every_card(gpu_count),
            })
        })
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

/// "Ranking the cards: GPU 3 alone (4 of 8), about 7 min left" beside its bar ("32 s of 1
/// min", "12 of 64").
fn progress_ui(ui: &mut egui::Ui, state: &RunState<'_>) {
    let doing = state.doing;
    let Some(progress) = state.progress else {
        ui.label(format!("{doing}: starting…"));
        return;
    };
    let fraction = if progress.of > 0.0 {
        (progress.done / progress.of).clamp(0.0, 1.0) as f32
    } else {
        0.0
    };
    let bar = match progress.unit {
        ProgressUnit::Seconds => {
            format!(
                "{} of {}",
                duration_s(progress.done),
                duration_s(progress.of)
            )
        }
        ProgressUnit::Steps => format!("{:.0} of {:.0}", progress.done, progress.of),
    };
    ui.add(
        egui::ProgressBar::new(fraction)
            .desired_width(160.0)
            .text(bar),
    );
    let mut line = format!("{doing}: {}", drawable(&progress.phase));
    if let Some(left_s) = progress.left_s {
        line.push_str(&format!(", about {} left", duration_s(left_s)));
    }
    if state.stopping {
        line.push_str(" (stopping: the copies under way finish first)");
    }
    ui.label(line);
}
