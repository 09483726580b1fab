//! The VRAM planner panel: inputs on the left; on the right the memory breakdown against the
//! card, memory against micro-batch with the fit limit, the strategy table and the
//! recommendation in one sentence. Everything updates as the inputs change.

use eframe::egui::{self, Color32, RichText};

use crate::plan::PlanError;
use crate::plan::export::ExportFormat;

use crate::plan::model::{LoraTargets, Model, preset};
use crate::plan::recommend::{GpuCard, Recommendation, cards, recommend, training_seconds};
use crate::plan::setup::{Checkpointing, Method, TrainingSetup};
use crate::ui::plan_charts::{batch_curve, breakdown_chart, strategy_table};
use crate::ui::widgets::banner::ERROR_TEXT;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Which method the user picked (the rank and targets are kept separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodChoice {
    Full,
    Lora,
    Qlora,
}

/// What the planner panel asks of the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanAction {
    /// Open a file dialog for a config.json or .safetensors file.
    OpenModelFile,
    /// Save the current setup as a trainer config in this format (the app asks for the file).
    Export(ExportFormat),
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
    /// Tokens to train on, in millions, for the time estimate.
    pub tokens_millions: f64,
    /// Share of the card's dense bf16 throughput the run achieves, percent.
    pub utilization_pct: f64,
    answer: Option<(PlanInputs, Result<Recommendation, PlanError>)>,
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
            architecture: crate::plan::model::Architecture::Cnn(
                crate::plan::model::CnnConfig::ResNet {
                    blocks_per_stage: [3, 4, 6, 3],
                    classes: 1000,
                },
            ),
            exact_parameter_count: None,
        });
        PlanPanel {
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
            tokens_millions: 100.0,
            utilization_pct: 40.0,
            answer: None,
        }
    }
}

impl PlanPanel {
    /// The config text for the current setup, with the accumulation the answer recommends.
    pub fn export_text(&mut self, format: ExportFormat) -> Result<String, PlanError> {
        let setup = self.current_setup();
        let model = self.model.clone();
        let grad_accum_steps = match self.answer() {
            Ok(answer) => answer.grad_accum_steps,
            Err(error) => return Err(error.clone()),
        };
        crate::plan::export::export_setup(&model, &setup, grad_accum_steps, format)
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
        let mut actions = Vec::new();
        egui::Panel::left("plan-inputs")
            .resizable(false)
            .exact_size(300.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.inputs_ui(ui, &mut actions));
            });
        egui::CentralPanel::default().show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| self.results_ui(ui, &mut actions));
        });
        actions
    }

    fn results_ui(&mut self, ui: &mut egui::Ui, actions: &mut Vec<PlanAction>) {
        let card = self.card();
        let model = self.model.clone();
        let setup = self.current_setup();
        let answer = match self.answer() {
            Ok(answer) => answer.clone(),
            Err(error) => {
                ui.label(RichText::new(error.to_string()).color(ERROR_TEXT));
                return;
            }
        };
        let colour = if answer.fits {
            Color32::from_rgb(0x5c, 0xd6, 0x7a)
        } else {
            Color32::from_rgb(0xff, 0x8a, 0x80)
        };
        ui.label(
            RichText::new(&answer.summary)
                .size(16.0)
                .color(colour)
                .strong(),
        );
        ui.horizontal(|ui| {
            ui.label(format!(
                "{:.2} GiB per GPU of {:.1} GiB on {}",
                answer.breakdown.total() as f64 / GIB,
                card.memory_bytes as f64 / GIB,
                card.name
            ));
            for (format, label) in [
                (ExportFormat::Hf, "Export TrainingArguments…"),
                (ExportFormat::Accelerate, "Export accelerate config…"),
                (ExportFormat::Deepspeed, "Export DeepSpeed config…"),
            ] {
                if ui.button(label).clicked() {
                    actions.push(PlanAction::Export(format));
                }
            }
        });
        if !model.is_vision() {
            let seconds = training_seconds(
                &model,
                &setup.method,
                self.tokens_millions * 1e6,
                &card,
                setup.gpus,
                self.utilization_pct / 100.0,
            );
            ui.label(format!(
                "Time estimate: {} for {} M tokens on {} × {} at {:.0} % of its dense bf16 rate.",
                duration_text(seconds),
                self.tokens_millions,
                setup.gpus,
                card.name,
                self.utilization_pct
            ));
        }
        for line in &answer.advice {
            ui.label(RichText::new(line).weak());
        }
        ui.add_space(6.0);
        breakdown_chart(ui, &answer.breakdown, card.memory_bytes);
        batch_curve(ui, &model, &setup, &card);
        strategy_table(ui, &answer);
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
