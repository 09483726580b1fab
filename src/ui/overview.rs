//! The GPU overview: one compact card per GPU with its current readings; clicking a card opens
//! its graphs.

use eframe::egui::{self, RichText};

use crate::device::{Telemetry, ThrottleReasons};
use crate::ui::model::{GpuModel, Model};
use crate::ui::widgets::banner::ERROR_TEXT;
use crate::ui::widgets::processes::{card_summary, job_pid};
use crate::units::{NOT_AVAILABLE, gib, or_na, watts};

/// Width of one GPU card, in points.
const CARD_WIDTH: f32 = 300.0;
/// Inner margin of a GPU card, in points.
const CARD_MARGIN: f32 = 10.0;

/// The text of a card's title button; tests click it by this label.
pub fn card_title(gpu: &GpuModel) -> String {
    let identity = &gpu.info.identity;
    format!("GPU {} · {}", identity.index, identity.name)
}

/// Draws the cards; returns the index of the GPU the user clicked, if any.
pub fn overview_ui(ui: &mut egui::Ui, model: &Model) -> Option<usize> {
    if model.gpus.is_empty() {
        ui.label("The driver reports no GPUs.");
        return None;
    }
    let mut clicked = None;
    egui::ScrollArea::vertical().show(ui, |ui| {
        // Whole cards per row: as many as fit the window, at least one.
        let spacing = ui.spacing().item_spacing.x;
        let card_outer_width = CARD_WIDTH + 2.0 * CARD_MARGIN + spacing + 2.0;
        let per_row = ((ui.available_width() + spacing) / card_outer_width)
            .floor()
            .max(1.0) as usize;
        for (row_index, row) in model.gpus.chunks(per_row).enumerate() {
            ui.horizontal_top(|ui| {
                for (column, gpu) in row.iter().enumerate() {
                    if gpu_card(ui, gpu) {
                        clicked = Some(row_index * per_row + column);
                    }
                }
            });
        }
    });
    clicked
}

/// One card; returns true when clicked.
fn gpu_card(ui: &mut egui::Ui, gpu: &GpuModel) -> bool {
    let frame = egui::Frame::group(ui.style())
        .inner_margin(CARD_MARGIN)
        .show(ui, |ui| {
            ui.set_width(CARD_WIDTH);
            // The row lays cards out left to right; a card's own content goes top to bottom.
            ui.vertical(|ui| card_content(ui, gpu)).inner
        });
    let card = frame.response.interact(egui::Sense::click());
    frame.inner
        || card
            .on_hover_cursor(egui::CursorIcon::PointingHand)
            .clicked()
}

/// A card's title, identity line and readings; returns true when the title was clicked.
fn card_content(ui: &mut egui::Ui, gpu: &GpuModel) -> bool {
    let identity = &gpu.info.identity;
    let title = ui
        .add(egui::Button::new(RichText::new(card_title(gpu)).strong().size(15.0)).frame(false))
        .on_hover_text("Open this GPU's graphs");
    ui.label(
        RichText::new(format!("{}  ·  {}", identity.uuid, identity.pci_bus_id))
            .small()
            .weak(),
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
                ui.label(value);
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
                    "Gen {} x{} (max Gen {} x{})",
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
