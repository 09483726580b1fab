//! The VRAM planner panel: inputs on the left; on the right the recommendation in one
//! sentence, the recommended setup and the user's own as two rows to compare, the changes
//! between them, the export buttons, the memory breakdown of both against the card, memory
//! against micro-batch with the fit limit, and the strategy table. Everything updates as the
//! inputs change. Exports go through the app (`PlanAction::Export`), which writes the file.
//!
//! Its files: inputs.rs and fields.rs (the left side), rows.rs (the two rows and the changes),
//! charts.rs (breakdown, batch curve, strategy table), measure.rs ("Measure my job"); the
//! work the app glue does for the tab: files.rs (the model file picked or typed) and
//! measure_runner.rs (the measuring thread, no egui).

pub mod charts;
mod fields;
pub mod files;
mod inputs;
mod measure;
pub mod measure_runner;
mod rows;

use eframe::egui::{self, RichText};

use crate::ui::plan::charts::{batch_curve, breakdown_chart, strategy_table};
use crate::ui::style::ERROR_TEXT;
use gputune_core::measure_job::JobSpec;
use gputune_core::plan::PlanError;
use gputune_core::plan::export::{ExportFormat, export_plan};
use gputune_core::plan::model::{LoraTargets, Model, preset};
use gputune_core::plan::recommend::{
    GpuCard, Recommendation, batch_product, cards, recommend, training_seconds, usable_bytes,
};
use gputune_core::plan::setup::{Checkpointing, Method, TrainingSetup};

pub use fields::{KindFields, ModelKind};
pub use measure::{MeasureNews, MeasureSection, MeasureState};
pub use rows::EXPORT_BUTTONS;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Which method the user picked (the rank and targets are kept separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodChoice {
    Full,
    Lora,
    Qlora,
}

/// What the planner panel asks of the app.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanAction {
    /// Open a file dialog for a config.json or .safetensors file.
    OpenModelFile,
    /// Load the model file (or folder) at this path, as the user typed or pasted it: for
    /// desktops where the file dialog cannot open.
    LoadModelPath(String),
    /// Save the current setup as a trainer config in this format (the app asks for the file).
    Export(ExportFormat),
    /// Measure the user's job ("Measure my job"; the app's runner does it off the UI thread).
    Measure(JobSpec),
    /// Stop the measurement (the job is stopped as Ctrl-C stops `plan --measure`).
    StopMeasure,
}

/// The panel's inputs and its last answer.
pub struct PlanPanel {
    pub model: Model,
    pub method: MethodChoice,
    pub lora_rank: u64,
    pub lora_targets: LoraTargets,
    pub setup: TrainingSetup,
    /// Index into `cards()`, or `None` for the detected GPU.
    pub card_index: Option<usize>,
    pub target_batch: u64,
    /// The GPU the device layer reports, if any.
    pub detected_card: Option<GpuCard>,
    /// A message about the model file, e.g. why it could not be loaded.
    pub model_message: Option<String>,
    /// The model file's path as typed or pasted in the tab (the app loads it).
    pub model_path: String,
    /// Tokens to train on, in millions, for the time estimate.
    pub tokens_millions: f64,
    /// Share of the card's dense bf16 throughput the run achieves, percent.
    pub utilization_pct: f64,
    /// With a setup that does not fit, export the user's own setup anyway.
    pub export_anyway: bool,
    /// What the last export did, shown beside the export buttons.
    pub export_status: Option<ExportStatus>,
    /// The micro-batch axis of the memory curve as last drawn: its first and last value.
    pub batch_axis: Option<(f64, f64)>,
    /// "Measure my job": its inputs and its last measurement.
    pub measure: MeasureSection,
    /// An export was asked of the app and its outcome has not come back yet.
    pub(crate) export_pending: bool,
    /// The inputs each kind of model keeps while another kind is chosen.
    kinds: fields::KindMemory,
    answer: Option<(PlanInputs, Result<Recommendation, PlanError>)>,
}

/// What an export did: refused (and why), or made and waiting for a file name, then saved or
/// not; with the notes that go with the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportStatus {
    pub format: ExportFormat,
    pub failed: bool,
    pub message: String,
    pub notes: Vec<String>,
}

/// Everything an answer depends on, to recompute only when something changed.
#[derive(Debug, Clone, PartialEq)]
struct PlanInputs {
    model: Model,
    setup: TrainingSetup,
    card: GpuCard,
    target_batch: u64,
}

impl Default for PlanPanel {
    fn default() -> PlanPanel {
        let model = preset("llama-3.1-8b").unwrap_or_else(|| Model {
            name: "none".to_string(),
            architecture: gputune_core::plan::model::Architecture::Cnn(
                gputune_core::plan::model::CnnConfig::ResNet {
                    blocks_per_stage: [3, 4, 6, 3],
                    classes: 1000,
                },
            ),
            exact_parameter_count: None,
        });
        PlanPanel {
            kinds: fields::KindMemory::new(&model),
            model,
            method: MethodChoice::Qlora,
            lora_rank: 16,
            lora_targets: LoraTargets::AllLinear,
            setup: TrainingSetup {
                checkpointing: Checkpointing::Full,
                ..TrainingSetup::new(1, 2048)
            },
            card_index: None,
            target_batch: 32,
            detected_card: None,
            model_message: None,
            model_path: String::new(),
            tokens_millions: 100.0,
            utilization_pct: 40.0,
            export_anyway: false,
            export_status: None,
            batch_axis: None,
            measure: MeasureSection::default(),
            export_pending: false,
            answer: None,
        }
    }
}

impl PlanPanel {
    /// The config text to export: the recommended setup when the user's fits as set (its
    /// micro-batch, accumulation and precision), the user's own when it does not and
    /// `export_anyway` is ticked; otherwise an error that says what to do. The outcome is also
    /// kept for the window (`export_status`).
    pub fn export_text(&mut self, format: ExportFormat) -> Result<String, PlanError> {
        self.match_fields_to_model();
        let model = self.model.clone();
        let card = self.card();
        let answer = match self.answer() {
            Ok(answer) => answer.clone(),
            Err(error) => {
                let error = error.clone();
                self.export_failed(format, error.to_string());
                return Err(error);
            }
        };
        let (planned, which) = match &answer.recommended {
            Some(planned) if answer.fits_as_set_up => (planned, "the recommended setup"),
            _ if self.export_anyway => (&answer.yours, "your setup, which does not fit"),
            _ => {
                let why = refusal(&answer, &card);
                self.export_failed(format, why.clone());
                return Err(PlanError::InvalidInput(why));
            }
        };
        match export_plan(&model, planned, format) {
            Ok(export) => {
                self.export_status = Some(ExportStatus {
                    format,
                    failed: false,
                    message: format!(
                        "{}: {which}, micro-batch {}. Choose where to save it.",
                        format.title(),
                        batch_product(planned.batch(), planned.setup.gpus)
                    ),
                    notes: export.notes,
                });
                Ok(export.text)
            }
            Err(error) => {
                self.export_failed(format, error.to_string());
                Err(error)
            }
        }
    }

    fn export_failed(&mut self, format: ExportFormat, message: String) {
        self.export_status = Some(ExportStatus {
            format,
            failed: true,
            message: format!("{} not exported: {message}", format.title()),
            notes: Vec::new(),
        });
    }

    fn export_requested(&mut self) {
        self.export_pending = true;
        self.export_status = None;
        self.model_message = None;
    }

    /// The app reports an export's end in `model_message` ("Saved …", or why the file could
    /// not be written): it belongs beside the export buttons, with the export's status.
    fn take_export_outcome(&mut self) {
        if !self.export_pending {
            return;
        }
        let Some(message) = self.model_message.take() else {
            return;
        };
        self.export_pending = false;
        match &mut self.export_status {
            // The refusal the app repeats: already shown.
            Some(status) if status.failed => {}
            Some(status) => {
                status.failed = !message.starts_with("Saved ");
                status.message = message;
            }
            None => self.model_message = Some(message),
        }
    }

    /// Sets the inputs to `setup` (the recommended one), keeping the target and the card.
    pub fn use_setup(&mut self, setup: &TrainingSetup) {
        self.method = match setup.method {
            Method::Full => MethodChoice::Full,
            Method::Lora { rank, targets } => {
                (self.lora_rank, self.lora_targets) = (rank, targets);
                MethodChoice::Lora
            }
            Method::Qlora { rank, targets, .. } => {
                (self.lora_rank, self.lora_targets) = (rank, targets);
                MethodChoice::Qlora
            }
        };
        self.setup = TrainingSetup {
            gradient_accumulation_steps: 1,
            ..*setup
        };
    }

    /// The card being planned for.
    pub fn card(&self) -> GpuCard {
        let list = cards();
        match self.card_index.and_then(|index| list.get(index).cloned()) {
            Some(card) => card,
            None => self
                .detected_card
                .clone()
                .unwrap_or_else(|| list[0].clone()),
        }
    }

    /// The setup with the chosen method filled in.
    pub fn current_setup(&self) -> TrainingSetup {
        let method = match self.method {
            MethodChoice::Full => Method::Full,
            MethodChoice::Lora => Method::Lora {
                rank: self.lora_rank,
                targets: self.lora_targets,
            },
            MethodChoice::Qlora => Method::Qlora {
                rank: self.lora_rank,
                targets: self.lora_targets,
                double_quantization: true,
            },
        };
        TrainingSetup {
            method,
            ..self.setup
        }
    }

    /// The answer for the current inputs, computed only when they changed.
    pub fn answer(&mut self) -> &Result<Recommendation, PlanError> {
        self.match_fields_to_model();
        let inputs = PlanInputs {
            model: self.model.clone(),
            setup: self.current_setup(),
            card: self.card(),
            target_batch: self.target_batch,
        };
        if self
            .answer
            .as_ref()
            .is_some_and(|(previous, _)| *previous != inputs)
        {
            self.answer = None;
            // What the last export said was about other inputs.
            self.export_status = None;
        }
        let (_, result) = self.answer.get_or_insert_with(|| {
            let result = recommend(
                &inputs.model,
                &inputs.setup,
                &inputs.card,
                inputs.target_batch,
            );
            (inputs, result)
        });
        result
    }

    pub fn plan_ui(&mut self, ui: &mut egui::Ui) -> Vec<PlanAction> {
        self.match_fields_to_model();
        self.take_export_outcome();
        let mut actions = Vec::new();
        egui::Panel::left("plan-inputs")
            .resizable(false)
            .exact_size(340.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.inputs_ui(ui, &mut actions));
            });
        egui::CentralPanel::default().show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                self.results_ui(ui, &mut actions);
                self.measure_ui(ui, &mut actions);
            });
        });
        actions
    }

    fn results_ui(&mut self, ui: &mut egui::Ui, actions: &mut Vec<PlanAction>) {
        let card = self.card();
        let model = self.model.clone();
        let answer = match self.answer() {
            Ok(answer) => answer.clone(),
            Err(error) => {
                ui.label(RichText::new(error.to_string()).color(ERROR_TEXT));
                return;
            }
        };
        self.recommendation_ui(ui, &answer, &card, actions);
        let planned = answer.recommended.as_ref().unwrap_or(&answer.yours);
        if !model.is_vision() {
            let seconds = training_seconds(
                &model,
                &planned.setup.method,
                self.tokens_millions * 1e6,
                &card,
                planned.setup.gpus,
                self.utilization_pct / 100.0,
            );
            ui.label(format!(
                "Time estimate: {} for {} M tokens on {} × {} at {:.0} % of its dense bf16 rate.",
                duration_text(seconds),
                self.tokens_millions,
                planned.setup.gpus,
                card.name,
                self.utilization_pct
            ));
        }
        for line in &answer.advice {
            ui.label(RichText::new(line).weak());
        }
        ui.add_space(6.0);
        breakdown_chart(ui, &answer, card.memory_bytes);
        self.batch_axis = Some(batch_curve(ui, &model, &answer, &card));
        strategy_table(ui, &answer);
    }
}

/// Why the window exports nothing for a setup that does not fit, and what to do.
fn refusal(answer: &Recommendation, card: &GpuCard) -> String {
    let yours = &answer.yours;
    let needs = format!(
        "your setup does not fit on {} ({:.2} GiB per GPU at micro-batch {}, {:.2} GiB usable)",
        card.name,
        yours.per_gpu_bytes as f64 / GIB,
        yours.setup.micro_batch,
        usable_bytes(card.memory_bytes) / GIB
    );
    if answer.recommended.is_some() {
        format!(
            "{needs}. Click \u{201c}Use the recommended setup\u{201d} and export again, or tick \u{201c}or your setup\u{201d} to export it anyway."
        )
    } else {
        format!(
            "{needs}, and no strategy fits: plan for more GPUs with sharding, or CPU offload; or tick \u{201c}or your setup\u{201d} to export it anyway."
        )
    }
}

/// Seconds as "45 min", "3.2 h" or "4.5 days".
fn duration_text(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "n/a".to_string();
    }
    let hours = seconds / 3600.0;
    if hours < 1.0 {
        format!("{:.0} min", seconds / 60.0)
    } else if hours < 48.0 {
        format!("{hours:.1} h")
    } else {
        format!("{:.1} days", hours / 24.0)
    }
}

#[cfg(test)]
mod tests {
    use super::duration_text;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration_text(2_700.0), "45 min");
        assert_eq!(duration_text(3.2 * 3600.0), "3.2 h");
        assert_eq!(duration_text(108.0 * 3600.0), "4.5 days");
        assert_eq!(duration_text(f64::NAN), "n/a");
    }
}
