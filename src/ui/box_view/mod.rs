//! The Box tab: the cards of a multi-GPU box side by side, one column each, with what the window
//! knows of each (slot, temperature and its headroom, power, clocks, throttle reasons, PCIe
//! link, processes) and what the box as a whole shows (a hot slot, a narrow link). A panel: it
//! draws the model and returns actions, never touching hardware or files.

pub mod cells;
mod columns;
pub mod findings;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoxAction {
    /// Open this GPU's graphs (a click on its title).
    ShowGraphs { gpu_index: usize },
}

/// Draws the tab; returns what the window must do.
pub fn box_ui(ui: &mut egui::Ui, model: &WindowModel) -> Vec<BoxAction> {
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
    box_totals_ui(ui, &model.gpus);
    findings_ui(ui, model);
    ui.add_space(4.0);
    let clicked = columns::table(ui, &model.gpus, |_| {});
    if let Some(columns::Clicked::Title(gpu_index)) = clicked {
        actions.push(BoxAction::ShowGraphs { gpu_index });
    }
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
