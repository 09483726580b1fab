//! The planner's answer in the window: the sentence, the recommended setup and the user's own
//! as two rows to compare, the changes between them, notes, and the export buttons with what
//! the last export did.

use eframe::egui::{self, Color32, RichText};

use super::{ExportStatus, PlanAction, PlanPanel};
use crate::ui::style::ERROR_TEXT;
use gputune_core::plan::export::ExportFormat;
use gputune_core::plan::recommend::{
    GpuCard, PlannedSetup, Recommendation, batch_product, usable_bytes,
};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const FITS: Color32 = Color32::from_rgb(0x5c, 0xd6, 0x7a);
/// Fits, but only with changes the user did not ask for.
const NEEDS_CHANGES: Color32 = Color32::from_rgb(0xff, 0xc1, 0x4d);

/// The export buttons, each with the format it asks the app to write.
pub const EXPORT_BUTTONS: [(ExportFormat, &str); 3] = [
    (ExportFormat::Hf, "Export TrainingArguments…"),
    (ExportFormat::Accelerate, "Export accelerate config…"),
    (ExportFormat::Deepspeed, "Export DeepSpeed config…"),
];

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / GIB)
}

impl PlanPanel {
    /// The sentence, the two rows, the changes and notes, the export buttons.
    pub(super) fn recommendation_ui(
        &mut self,
        ui: &mut egui::Ui,
        answer: &Recommendation,
        card: &GpuCard,
        actions: &mut Vec<PlanAction>,
    ) {
        let colour = match (&answer.recommended, answer.fits_as_set_up) {
            (Some(_), true) => FITS,
            (Some(_), false) => NEEDS_CHANGES,
            (None, _) => ERROR_TEXT,
        };
        ui.label(
            RichText::new(&answer.summary)
                .size(16.0)
                .color(colour)
                .strong(),
        );
        ui.add_space(4.0);
        egui::Grid::new("plan-recommendation")
            .striped(true)
            .num_columns(7)
            .show(ui, |ui| {
                for header in [
                    "",
                    "Method",
                    "Micro-batch × steps = global batch",
                    "Precision",
                    "Optimizer and memory options",
                    "Per GPU",
                    "Fits",
                ] {
                    ui.label(RichText::new(header).weak());
                }
                ui.end_row();
                if let Some(planned) = &answer.recommended {
                    setup_row(ui, "Recommended", planned, answer.target_global_batch);
                }
                setup_row(ui, "Yours", &answer.yours, answer.target_global_batch);
            });
        ui.label(
            RichText::new(format!(
                "{}: {} per GPU. Counted: a {} CUDA context (measured on an H200 with driver 580; it differs per card and driver) and PyTorch's {} allocator's reserve{}.",
                card.name,
                gib(usable_bytes(card.memory_bytes) as u64),
                gib(answer.breakdown.cuda_context),
                answer.yours.setup.overheads.allocator.name(),
                match answer.breakdown.safety_margin_for {
                    Some(margin) => format!(
                        "; {} kept free for {}",
                        gib(answer.breakdown.safety_margin),
                        margin.describe()
                    ),
                    None => String::new(),
                }
            ))
            .weak(),
        );
        if !answer.changes.is_empty() {
            ui.label("Changes from your setup, cheapest in speed first:");
            for (index, change) in answer.changes.iter().enumerate() {
                ui.label(format!(
                    "  {}. {} ({} per GPU at micro-batch 1)",
                    index + 1,
                    change.advice,
                    gib(change.per_gpu_bytes)
                ));
            }
        }
        for note in &answer.batch_notes {
            ui.label(RichText::new(note).color(NEEDS_CHANGES));
        }
        if let Some(planned) = &answer.recommended
            && planned.setup != answer.yours.setup
            && ui
                .button("Use the recommended setup")
                .on_hover_text("Set the inputs to the recommended setup")
                .clicked()
        {
            self.use_setup(&planned.setup);
        }
        ui.horizontal_wrapped(|ui| {
            ui.label("Export the recommendation:");
            for (format, label) in EXPORT_BUTTONS {
                if ui.button(label).clicked() {
                    actions.push(PlanAction::Export(format));
                    self.export_requested();
                }
            }
            if !answer.fits_as_set_up {
                ui.checkbox(
                    &mut self.export_anyway,
                    "or your setup, though it does not fit",
                );
            }
        });
        if let Some(status) = &self.export_status {
            export_status_ui(ui, status);
        }
    }
}

/// One row: the setup's method, batch, precision, options, memory and whether it fits.
fn setup_row(ui: &mut egui::Ui, label: &str, planned: &PlannedSetup, target: Option<u64>) {
    ui.label(RichText::new(label).strong());
    ui.label(planned.setup.method.name());
    let batch = batch_product(planned.batch(), planned.setup.gpus);
    match target {
        Some(target) if target != planned.global_batch => {
            ui.label(RichText::new(format!("{batch} ≠ {target}")).color(NEEDS_CHANGES))
                .on_hover_text(format!("Your target global batch is {target}"));
        }
        _ => {
            ui.label(batch);
        }
    }
    ui.label(planned.setup.precision.name());
    ui.label(planned.options_summary());
    ui.label(gib(planned.per_gpu_bytes));
    if planned.fits {
        ui.label(RichText::new("yes").color(FITS));
    } else {
        ui.label(RichText::new("no").color(ERROR_TEXT));
    }
    ui.end_row();
}

fn export_status_ui(ui: &mut egui::Ui, status: &ExportStatus) {
    let text = RichText::new(&status.message);
    ui.label(if status.failed {
        text.color(ERROR_TEXT)
    } else {
        text
    });
    for note in &status.notes {
        ui.label(RichText::new(note).weak());
    }
}
