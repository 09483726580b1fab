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
use gputune_core::rank::RankOptions;
use gputune_core::rank::options::{LONGEST_TOGETHER_S, SHORTEST_TOGETHER_S};
use gputune_formats::reports::box_check::BoxCheckReport;
use gputune_formats::reports::links::LinksReport;
use gputune_formats::reports::rank::RankReport;
use gputune_formats::units::duration_s;

/// Each kind's last run as the window heard of it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoxRunsSeen {
    pub box_check: Option<BoxRunView<BoxCheckReport>>,
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
    /// "the ranking", for sentences.
    noun: &'static str,
    running: bool,
    stopping: bool,
    progress: Option<&'a BoxProgress>,
    refused: Option<&'a String>,
}

fn state_of<'a, R>(
    (doing, noun): (&'static str, &'static str),
    view: Option<&'a BoxRunView<R>>,
) -> Option<RunState<'a>> {
    view.map(|view| RunState {
        doing,
        noun,
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
            BoxRunNews::BoxCheck(view) => {
                self.box_check = Some(merged(self.box_check.take(), view));
            }
        }
    }

    fn states(&self) -> impl Iterator<Item = RunState<'_>> {
        [
            state_of(
                ("Checking the whole box", "the box check"),
                self.box_check.as_ref(),
            ),
            state_of(("Ranking the cards", "the ranking"), self.rank.as_ref()),
            state_of(("Testing the links", "the link test"), self.links.as_ref()),
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

    /// The daemon that ran them went away: a running run ended with it (its result with the
    /// link's connection). Says which ("the ranking").
    pub fn ended_with_the_daemon(&mut self) -> Option<&'static str> {
        let running = self
            .states()
            .find(|state| state.running)
            .map(|state| state.noun);
        if let Some(view) = &mut self.box_check {
            view.running = false;
        }
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
        actions.extend(box_check_button(ui, view, gpu_count));
        ui.separator();
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

/// The box check over every card for `duration_s`, at a clock cap when one is being proven.
pub fn box_check_launch(
    gpu_count: usize,
    duration_s: f64,
    clock_cap_mhz: Option<u32>,
) -> BoxAction {
    BoxAction::StartRun(BoxLaunch {
        kind: BoxRunKind::BoxCheck {
            duration_s,
            clock_cap_mhz,
        },
        gpu_indices: every_card(gpu_count),
    })
}

/// "Check the whole box" and how long.
fn box_check_button(ui: &mut egui::Ui, view: &mut BoxView, gpu_count: usize) -> Option<BoxAction> {
    let clicked = ui
        .button("Check the whole box")
        .on_hover_text(format!(
            "The checked load on all {gpu_count} cards at once, in phase (the same pulse edges \
             on every card: the worst case for the power supply): 10 ms, 50 ms and 1 s pulses, \
             then full load. Each card's results are checked; when a step fails, the check \
             finds the clock cap under which it passes. Every card is put back at its end."
        ))
        .clicked();
    let label = ui.label("for");
    ui.add(
        egui::DragValue::new(&mut view.box_check_s)
            .range(BOX_CHECK_SHORTEST_S..=BOX_CHECK_LONGEST_S)
            .speed(1.0)
            .max_decimals(0)
            .suffix(" s"),
    )
    .labelled_by(label.id)
    .on_hover_text("The whole check, its steps sharing it equally (600 s is thorough)");
    clicked.then(|| box_check_launch(gpu_count, view.box_check_s, None))
}

/// The box check's lengths the window offers.
pub const BOX_CHECK_SHORTEST_S: f64 = 4.0;
pub const BOX_CHECK_LONGEST_S: f64 = 7_200.0;

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
    let hover = match RankOptions::new(together_s, false) {
        Ok(options) => format!(
            "The same checked load on each card at the same settings: {} on each alone, then \
             {} on all {gpu_count} together (about {}). Cards busy with other programs, or at \
             different settings, are refused.",
            duration_s(options.alone_s),
            duration_s(options.together_s),
            duration_s(options.total_s(gpu_count))
        ),
        Err(message) => message,
    };
    let clicked = ui.button("Rank the cards").on_hover_text(hover).clicked();
    let label = ui.label("for");
    ui.add(
        egui::DragValue::new(&mut view.rank_together_s)
            .range(SHORTEST_TOGETHER_S..=LONGEST_TOGETHER_S)
            .speed(1.0)
            .max_decimals(0)
            .suffix(" s together"),
    )
    .labelled_by(label.id)
    .on_hover_text("Each card runs alone first, for half of it (at most 30 s)");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn view(running: bool, report: Option<u32>, refused: Option<&str>) -> BoxRunView<u32> {
        BoxRunView {
            running,
            stopping: false,
            progress: None,
            report,
            refused: refused.map(str::to_string),
        }
    }

    #[test]
    fn a_refusal_keeps_the_last_report_and_a_new_run_clears_the_refusal() {
        let refused = merged(
            Some(view(false, Some(7), None)),
            view(false, None, Some("busy")),
        );
        assert_eq!(refused, view(false, Some(7), Some("busy")));
        let running = merged(Some(refused), view(true, None, None));
        assert_eq!(running, view(true, None, None));
        assert_eq!(
            merged(None, view(false, None, Some("busy"))),
            view(false, None, Some("busy"))
        );
    }
}
