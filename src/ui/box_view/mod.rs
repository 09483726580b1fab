//! The Box tab: the cards of a multi-GPU box side by side, one column each, with what the window
//! knows of each (slot, temperature and its headroom, power, clocks, throttle reasons, PCIe
//! link, processes) and what the box as a whole shows (a hot slot, a narrow link); the runs
//! over the whole box it starts (the box check, the ranking, the link test) with their progress, and their last results
//! beside each card. A panel: it draws the model and returns actions, never touching hardware
//! or files (the link thread runs the engines).

pub mod box_check_rows;
pub mod cells;
mod columns;
pub mod findings;
pub mod links_rows;
pub mod rank_rows;
pub mod runs;

use eframe::egui::{self, RichText};

use crate::ui::model::WindowModel;
use crate::ui::monitor::box_totals::box_totals_ui;
use crate::ui::style::WARNING_TEXT;
use findings::CardReading;

/// What the Box tab says on a machine with one GPU.
pub const ONE_GPU: &str = "This machine has one GPU. The Box view sets the cards of a \
    multi-GPU box side by side (slots, heat, links, ranks and checks); for one card the \
    Monitor and Tune tabs say it all.";

/// What the Box tab asks of the window.
#[derive(Debug, Clone, PartialEq)]
pub enum BoxAction {
    /// Open this GPU's graphs (a click on its title).
    ShowGraphs { gpu_index: usize },
    /// Start a run over the box on the link thread.
    StartRun(gputune_core::link::box_runs::BoxLaunch),
    /// Stop the run over the box.
    StopRun,
}

/// What the Box tab keeps between frames: the lengths its runs are asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxView {
    /// Seconds the box check runs, its steps sharing them.
    pub box_check_s: f64,
    /// Seconds of load on all cards together when ranking them (each alone half of it).
    pub rank_together_s: f64,
}

/// The box check's length unless the user picks another: as thorough as a single card's.
pub const BOX_CHECK_DEFAULT_S: f64 = 600.0;

impl Default for BoxView {
    fn default() -> BoxView {
        BoxView {
            box_check_s: BOX_CHECK_DEFAULT_S,
            rank_together_s: gputune_core::rank::options::DEFAULT_TOGETHER_S,
        }
    }
}

/// Draws the tab; returns what the window must do.
pub fn box_ui(ui: &mut egui::Ui, view: &mut BoxView, model: &WindowModel) -> Vec<BoxAction> {
    let mut actions = Vec::new();
    match model.gpus.len() {
        0 => {
            ui.label("The driver reports no GPUs.");
            return actions;
        }
        1 => {
            ui.label(ONE_GPU);
            return actions;
        }
        _ => {}
    }
    actions.extend(runs::runs_ui(ui, view, &model.box_runs, model.gpus.len()));
    box_totals_ui(ui, &model.gpus);
    egui::ScrollArea::vertical()
        .id_salt("box-view")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            findings_ui(ui, model);
            ui.add_space(4.0);
            let rank = model
                .box_runs
                .rank
                .as_ref()
                .and_then(|view| view.report.as_ref());
            let links = model
                .box_runs
                .links
                .as_ref()
                .and_then(|view| view.report.as_ref());
            let box_check = model
                .box_runs
                .box_check
                .as_ref()
                .and_then(|view| view.report.as_ref());
            let clicked = columns::table(ui, &model.gpus, |table| {
                if let Some(report) = box_check {
                    box_check_rows::box_check_rows(table, report);
                }
                if let Some(report) = rank {
                    rank_rows::rank_rows(table, report);
                }
                if let Some(report) = links {
                    links_rows::links_rows(table, report);
                }
            });
            if let Some(columns::Clicked::Title(gpu_index)) = clicked {
                actions.push(BoxAction::ShowGraphs { gpu_index });
            }
            if let Some(report) = box_check {
                ui.add_space(6.0);
                let prove = box_check_rows::box_check_sentences_ui(ui, report);
                if let Some(cap_mhz) = prove
                    && model.box_runs.running().is_none()
                {
                    actions.push(runs::box_check_launch(
                        model.gpus.len(),
                        view.box_check_s,
                        Some(cap_mhz),
                    ));
                }
            }
            if let Some(report) = links {
                ui.add_space(6.0);
                links_rows::links_sentences_ui(ui, report);
            }
            if let Some(report) = rank {
                ui.add_space(6.0);
                rank_rows::rank_sentences_ui(ui, report);
            }
        });
    actions
}

/// The box's findings from the latest readings, one line each.
fn findings_ui(ui: &mut egui::Ui, model: &WindowModel) {
    let cards: Vec<CardReading<'_>> = model
        .gpus
        .iter()
        .filter_map(|gpu| {
            let reading = gpu.latest.as_ref()?.as_ref().ok()?;
            Some(CardReading {
                gpu_index: gpu.info.identity.index,
                reading,
            })
        })
        .collect();
    for sentence in findings::findings(&cards) {
        ui.label(RichText::new(sentence).color(WARNING_TEXT));
    }
}
