//! The Box view's table: one column per card, one row per thing known about it, laid out row by
//! row in fixed-width cells so the columns line up whatever each cell says (a cell's text is
//! cut to its width, the whole of it on hover).

use eframe::egui::{self, Align, Layout, RichText};

use super::cells::{self, Cell, Tone};
use crate::ui::model::GpuModel;
use crate::ui::style::{ERROR_TEXT, GOOD_TEXT, WARNING_TEXT};
use crate::ui::widgets::processes::{card_summary, job_pid};
use gputune_formats::card::Telemetry;

/// The row names' column, in points.
const HEADER_WIDTH_PT: f32 = 112.0;
/// A card's column: never narrower (the table scrolls sideways instead), never wider.
const COLUMN_MIN_PT: f32 = 118.0;
const COLUMN_MAX_PT: f32 = 260.0;
/// One line of a cell.
const ROW_HEIGHT_PT: f32 = 20.0;

/// What a click in the table asks for.
pub enum Clicked {
    /// A card's title: open its graphs.
    Title(usize),
}

/// The width of each card's column when `cards` share `available_pt`.
pub fn column_width_pt(available_pt: f32, cards: usize, spacing_pt: f32) -> f32 {
    let cards = cards.max(1) as f32;
    let share = (available_pt - HEADER_WIDTH_PT - spacing_pt * cards) / cards;
    if share.is_finite() {
        share.floor().clamp(COLUMN_MIN_PT, COLUMN_MAX_PT)
    } else {
        COLUMN_MIN_PT
    }
}

/// The table over every card; extra rows (the checks' results) come from `more_rows`.
pub fn table(
    ui: &mut egui::Ui,
    gpus: &[GpuModel],
    more_rows: impl FnOnce(&mut Table<'_>),
) -> Option<Clicked> {
    let spacing_pt = ui.spacing().item_spacing.x;
    let width_pt = column_width_pt(ui.available_width(), gpus.len(), spacing_pt);
    let mut clicked = None;
    egui::ScrollArea::horizontal()
        .id_salt("box-table")
        .auto_shrink([false, true])
        .show(ui, |ui| {
            let mut table = Table { ui, gpus, width_pt };
            clicked = table.titles();
            table.reading_rows();
            more_rows(&mut table);
        });
    clicked
}

/// The table being drawn: each row's cells at the same widths.
pub struct Table<'a> {
    ui: &'a mut egui::Ui,
    gpus: &'a [GpuModel],
    width_pt: f32,
}

impl Table<'_> {
    fn titles(&mut self) -> Option<Clicked> {
        let mut clicked = None;
        let (gpus, width_pt) = (self.gpus, self.width_pt);
        self.ui.horizontal(|ui| {
            fixed(ui, HEADER_WIDTH_PT, ROW_HEIGHT_PT * 2.0, |_| {});
            for (index, gpu) in gpus.iter().enumerate() {
                fixed(ui, width_pt, ROW_HEIGHT_PT * 2.0, |ui| {
                    ui.vertical(|ui| {
                        let identity = &gpu.info.identity;
                        let title = egui::Button::new(
                            RichText::new(format!("GPU {}", identity.index))
                                .strong()
                                .size(15.0),
                        )
                        .frame(false);
                        if ui
                            .add(title)
                            .on_hover_text(format!("{}: click to open its graphs", identity.name))
                            .clicked()
                        {
                            clicked = Some(Clicked::Title(index));
                        }
                        let model = identity.name.trim_start_matches("NVIDIA ");
                        let model = model.trim_start_matches("GeForce ");
                        ui.add(egui::Label::new(RichText::new(model).small().weak()).truncate());
                    });
                });
            }
        });
        self.ui.separator();
        clicked
    }

    fn reading_rows(&mut self) {
        let slowdown = |gpu: &GpuModel| gpu.info.constraints.slowdown_temperature_c;
        self.row("Slot", "The card's PCI bus id: where it sits", |gpu| {
            cells::slot(&gpu.info.identity.pci_bus_id)
        });
        self.reading_row("Temperature", "", |gpu, reading| {
            cells::temperature(reading, slowdown(gpu))
        });
        self.reading_row(
            "Headroom",
            "Degrees left before the card starts slowing itself down for heat",
            |gpu, reading| cells::headroom(reading, slowdown(gpu)),
        );
        self.reading_row(
            "Power",
            "The draw against the limit the card enforces",
            |_, reading| cells::power(reading),
        );
        self.reading_row("SM clock", "", |_, reading| {
            cells::clock(reading.sm_clock_mhz)
        });
        self.reading_row("Memory clock", "", |_, reading| {
            cells::clock(reading.memory_clock_mhz)
        });
        self.reading_row(
            "Throttle",
            "Why the card holds its clocks down now",
            |_, r| cells::throttle(r.throttle_reasons),
        );
        self.reading_row(
            "PCIe link",
            "The link now, of the most the card and slot allow",
            |_, reading| cells::pcie_link(reading).0,
        );
        self.reading_row("", "", |_, reading| cells::pcie_link(reading).1);
        self.processes_row();
    }

    /// A row of one cell per card, from what the window knows of the card.
    pub fn row(&mut self, name: &str, hover: &str, cell: impl Fn(&GpuModel) -> Cell) {
        let (gpus, width_pt) = (self.gpus, self.width_pt);
        self.ui.horizontal(|ui| {
            row_name(ui, name, hover);
            for gpu in gpus {
                let cell = cell(gpu);
                fixed(ui, width_pt, ROW_HEIGHT_PT, |ui| cell_ui(ui, &cell));
            }
        });
    }

    /// A row from each card's latest reading: its error, or a wait for the first one.
    fn reading_row(
        &mut self,
        name: &str,
        hover: &str,
        cell: impl Fn(&GpuModel, &Telemetry) -> Cell,
    ) {
        self.row(name, hover, |gpu| match &gpu.latest {
            None => Cell::plain("…"),
            Some(Err(error)) => Cell {
                text: "no reading".to_string(),
                tone: Tone::Bad,
                hover: Some(error.to_string()),
            },
            Some(Ok(reading)) => cell(gpu, reading),
        });
    }

    fn processes_row(&mut self) {
        let (gpus, width_pt) = (self.gpus, self.width_pt);
        self.ui.horizontal(|ui| {
            row_name(
                ui,
                "Processes",
                "How many, and the one with the most VRAM (\"job\": the job gputune started)",
            );
            for gpu in gpus {
                fixed(ui, width_pt, ROW_HEIGHT_PT, |ui| {
                    let processes = gpu
                        .latest
                        .as_ref()
                        .and_then(|latest| latest.as_ref().ok())
                        .and_then(|reading| reading.processes.as_deref());
                    card_summary(ui, processes, job_pid(gpu));
                });
            }
        });
    }
}

fn row_name(ui: &mut egui::Ui, name: &str, hover: &str) {
    fixed(ui, HEADER_WIDTH_PT, ROW_HEIGHT_PT, |ui| {
        let label = ui.add(egui::Label::new(RichText::new(name).weak()).truncate());
        if !hover.is_empty() {
            label.on_hover_text(hover);
        }
    });
}

/// A cell of exactly `width_pt` × `height_pt`, its content left to right, centred vertically.
fn fixed(ui: &mut egui::Ui, width_pt: f32, height_pt: f32, add: impl FnOnce(&mut egui::Ui)) {
    ui.allocate_ui_with_layout(
        egui::vec2(width_pt, height_pt),
        Layout::left_to_right(Align::Center),
        |ui| {
            ui.set_width(width_pt);
            ui.set_height(height_pt);
            add(ui);
        },
    );
}

/// A cell's text in its tone, cut to the cell, with its hover.
pub fn cell_ui(ui: &mut egui::Ui, cell: &Cell) {
    let text = RichText::new(&cell.text);
    let text = match cell.tone {
        Tone::Plain => text,
        Tone::Good => text.color(GOOD_TEXT),
        Tone::Warning => text.color(WARNING_TEXT),
        Tone::Bad => text.color(ERROR_TEXT),
    };
    let label = ui.add(egui::Label::new(text).truncate());
    if let Some(hover) = &cell.hover {
        label.on_hover_text(hover);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_columns_fit_a_1280_px_window_and_two_stay_readable() {
        let width_pt = column_width_pt(1264.0, 8, 8.0);
        assert!(
            HEADER_WIDTH_PT + 8.0 * (width_pt + 8.0) <= 1264.0,
            "{width_pt}"
        );
        assert!(width_pt >= COLUMN_MIN_PT);
        assert_eq!(column_width_pt(1264.0, 2, 8.0), COLUMN_MAX_PT);
        assert_eq!(column_width_pt(f32::NAN, 8, 8.0), COLUMN_MIN_PT);
        assert_eq!(column_width_pt(300.0, 8, 8.0), COLUMN_MIN_PT);
    }
}
