//! The GPU overview: one compact card per GPU with its current readings; clicking a card opens
//! its graphs.

use eframe::egui::{self, RichText};

use crate::ui::model::{GpuModel, WindowModel};
use crate::ui::monitor::box_totals::box_totals_ui;
use crate::ui::style::ERROR_TEXT;
use crate::ui::widgets::gpu_switcher::card_title;
use crate::ui::widgets::processes::{card_summary, job_pid};
use gputune_core::device::{Telemetry, ThrottleReasons};
use gputune_core::units::{NOT_AVAILABLE, gib, or_na, watts};

/// Narrowest a GPU card's content gets, in points: as many columns as fit at this width.
const CARD_MIN_WIDTH_PT: f32 = 240.0;
/// Widest a GPU card's content gets, in points, when a row has room to spare.
const CARD_MAX_WIDTH_PT: f32 = 330.0;
/// Inner margin of a GPU card, in points.
const CARD_MARGIN_PT: f32 = 10.0;
/// What a card's frame adds to its content's width: both margins and the stroke.
const CARD_FRAME_PT: f32 = 2.0 * CARD_MARGIN_PT + 2.0;

/// How many cards of `card_outer_width_pt` fit side by side in `available_width_pt` with
/// `spacing_pt` between them; at least one.
fn columns_that_fit(available_width_pt: f32, card_outer_width_pt: f32, spacing_pt: f32) -> usize {
    let columns = ((available_width_pt + spacing_pt) / (card_outer_width_pt + spacing_pt)).floor();
    if columns.is_finite() && columns >= 1.0 {
        columns as usize
    } else {
        1
    }
}

/// The width of each card's content when `columns` cards share `available_width_pt`: the row
/// filled, within the card's narrowest and widest.
fn card_width_pt(available_width_pt: f32, columns: usize, spacing_pt: f32) -> f32 {
    let columns = columns.max(1) as f32;
    let share = (available_width_pt - spacing_pt * (columns - 1.0)) / columns - CARD_FRAME_PT;
    share.floor().clamp(CARD_MIN_WIDTH_PT, CARD_MAX_WIDTH_PT)
}

/// Draws the cards; returns the index of the GPU the user clicked, if any.
pub fn overview_ui(ui: &mut egui::Ui, model: &WindowModel) -> Option<usize> {
    if model.gpus.is_empty() {
        ui.label("The driver reports no GPUs.");
        return None;
    }
    box_totals_ui(ui, &model.gpus);
    let mut clicked = None;
    egui::ScrollArea::vertical().show(ui, |ui| {
        // Whole cards per row: as many as fit the window, at least one; the rows scroll.
        let spacing_pt = ui.spacing().item_spacing.x;
        let available_pt = ui.available_width();
        let per_row = columns_that_fit(available_pt, CARD_MIN_WIDTH_PT + CARD_FRAME_PT, spacing_pt);
        let width_pt = card_width_pt(available_pt, per_row.min(model.gpus.len()), spacing_pt);
        for (row_index, row) in model.gpus.chunks(per_row).enumerate() {
            ui.horizontal_top(|ui| {
                for (column, gpu) in row.iter().enumerate() {
                    if gpu_card(ui, gpu, width_pt) {
                        clicked = Some(row_index * per_row + column);
                    }
                }
            });
        }
    });
    clicked
}

/// What hovering a card says: clicking it opens its graphs.
pub const CARD_HINT: &str = "Click to open this GPU's graphs";

/// One card; returns true when clicked. Hovered, its border lights up (the hovered
/// widget's stroke) and it says that a click opens its graphs.
fn gpu_card(ui: &mut egui::Ui, gpu: &GpuModel, width_pt: f32) -> bool {
    let id = ui.make_persistent_id(("gpu-card", gpu.info.identity.index));
    // Whether the pointer was over the card last frame: the frame is drawn before its
    // response exists.
    let hovered = ui
        .ctx()
        .data(|data| data.get_temp::<bool>(id))
        .unwrap_or(false);
    let mut frame = egui::Frame::group(ui.style()).inner_margin(CARD_MARGIN_PT);
    if hovered {
        frame = frame.stroke(ui.visuals().widgets.hovered.bg_stroke);
    }
    let frame = frame.show(ui, |ui| {
        ui.set_width(width_pt);
        // The row lays cards out left to right; a card's own content goes top to bottom.
        ui.vertical(|ui| card_content(ui, gpu)).inner
    });
    let card = frame.response.interact(egui::Sense::click());
    let now_hovered = card.contains_pointer();
    if now_hovered != hovered {
        ui.ctx().data_mut(|data| data.insert_temp(id, now_hovered));
        ui.ctx().request_repaint();
    }
    frame.inner
        || card
            .on_hover_cursor(egui::CursorIcon::PointingHand)
            .on_hover_text(CARD_HINT)
            .clicked()
}

/// A card's title, identity line and readings; returns true when the title was clicked.
fn card_content(ui: &mut egui::Ui, gpu: &GpuModel) -> bool {
    let identity = &gpu.info.identity;
    let title = ui
        .add(egui::Button::new(RichText::new(card_title(gpu)).strong().size(15.0)).frame(false))
        .on_hover_text(CARD_HINT);
    ui.add(
        egui::Label::new(
            RichText::new(format!("{}  ·  {}", identity.uuid, identity.pci_bus_id))
                .small()
                .weak(),
        )
        .truncate(),
    );
    ui.add_space(4.0);
    match &gpu.latest {
        None => {
            ui.label("Waiting for the first reading…");
        }
        Some(Err(error)) => {
            ui.label(RichText::new(error.to_string()).color(ERROR_TEXT));
        }
        Some(Ok(reading)) => readings(ui, gpu, reading),
    }
    title.clicked()
}

fn readings(ui: &mut egui::Ui, gpu: &GpuModel, reading: &Telemetry) {
    let total_bytes = gpu.info.identity.memory_total_bytes;
    if let (Some(draw_mw), Some(limit_mw)) = (reading.power_draw_mw, reading.power_limit_mw) {
        let fraction = if limit_mw == 0 {
            0.0
        } else {
            draw_mw as f32 / limit_mw as f32
        };
        ui.add(
            egui::ProgressBar::new(fraction.clamp(0.0, 1.0)).text(format!(
                "Power {} of {}",
                watts(draw_mw),
                watts(limit_mw)
            )),
        );
    }
    if let Some(used) = reading.memory_used_bytes
        && total_bytes > 0
    {
        let fraction = used as f32 / total_bytes as f32;
        ui.add(
            egui::ProgressBar::new(fraction.clamp(0.0, 1.0)).text(format!(
                "VRAM {} of {}",
                gib(used),
                gib(total_bytes)
            )),
        );
    }
    ui.add_space(4.0);
    egui::Grid::new(("readings", gpu.info.identity.index))
        .num_columns(2)
        .spacing([16.0, 3.0])
        .show(ui, |ui| {
            let mut row = |label: &str, value: String| {
                ui.label(RichText::new(label).weak());
                ui.add(egui::Label::new(value).truncate());
                ui.end_row();
            };
            row(
                "Temperature",
                or_na(reading.temperature_c, |c| format!("{c} °C")),
            );
            row(
                "Utilization",
                or_na(reading.utilization_gpu_pct, |pct| format!("{pct} %")),
            );
            row(
                "Graphics clock",
                or_na(reading.gpu_clock_mhz, |mhz| format!("{mhz} MHz")),
            );
            row("Fans", fans_text(reading));
            row(
                "Throttle",
                ThrottleReasons::summary(reading.throttle_reasons),
            );
            row(
                "PCIe link",
                format!(
                    "Gen {} x{} (max {} x{})",
                    or_na(reading.pcie_link_gen, |g| g.to_string()),
                    or_na(reading.pcie_link_width, |w| w.to_string()),
                    or_na(reading.pcie_link_gen_max, |g| g.to_string()),
                    or_na(reading.pcie_link_width_max, |w| w.to_string())
                ),
            );
            ui.label(RichText::new("Processes").weak());
            card_summary(ui, reading.processes.as_deref(), job_pid(gpu));
            ui.end_row();
        });
}

/// Each fan's speed, or "n/a" for a card without fans.
pub fn fans_text(reading: &Telemetry) -> String {
    match &reading.fans {
        None => NOT_AVAILABLE.to_string(),
        Some(fans) => fans
            .iter()
            .map(|fan| or_na(fan.speed_pct, |pct| format!("{pct} %")))
            .collect::<Vec<_>>()
            .join(" · "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_many_columns_as_fit_and_at_least_one() {
        let outer_pt = CARD_MIN_WIDTH_PT + CARD_FRAME_PT;
        assert_eq!(
            columns_that_fit(4.0 * outer_pt + 3.0 * 8.0, outer_pt, 8.0),
            4
        );
        assert_eq!(
            columns_that_fit(4.0 * outer_pt + 3.0 * 8.0 - 1.0, outer_pt, 8.0),
            3
        );
        assert_eq!(columns_that_fit(100.0, outer_pt, 8.0), 1);
        assert_eq!(columns_that_fit(f32::NAN, outer_pt, 8.0), 1);
    }

    #[test]
    fn cards_fill_the_row_within_their_bounds() {
        let width_pt = card_width_pt(1104.0, 4, 8.0);
        assert!(4.0 * (width_pt + CARD_FRAME_PT) + 3.0 * 8.0 <= 1104.0);
        assert!(width_pt >= CARD_MIN_WIDTH_PT);
        assert_eq!(card_width_pt(3000.0, 1, 8.0), CARD_MAX_WIDTH_PT);
    }
}
