//! The VRAM planner panel: inputs on the left; on the right the memory breakdown against the
//! card, memory against micro-batch with the fit limit, the strategy table and the
//! recommendation in one sentence. Everything updates as the inputs change.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{Bar, BarChart, HLine, Legend, Line, LineStyle, Plot, VLine};

use crate::plan::PlanError;
use crate::plan::export::ExportFormat;
use crate::plan::memory::{MemoryBreakdown, estimate};
use crate::plan::model::{LoraTargets, Model, PRESET_NAMES, preset};
use crate::plan::recommend::{GpuCard, Recommendation, cards, fits, recommend};
use crate::plan::setup::{
    Attention, Checkpointing, Method, Offload, Optimizer, Overheads, Precision, Sharding, Task,
    TrainingSetup,
};
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

    fn inputs_ui(&mut self, ui: &mut egui::Ui, actions: &mut Vec<PlanAction>) {
        let heading = ui.heading("Model");
        egui::ComboBox::from_id_salt("plan-model")
            .selected_text(self.model.name.clone())
            .show_ui(ui, |ui| {
                for name in PRESET_NAMES {
                    if ui.selectable_label(self.model.name == name, name).clicked()
                        && let Some(model) = preset(name)
                    {
                        self.model = model;
                        self.model_message = None;
                    }
                }
            })
            .response
            .labelled_by(heading.id);
        if ui.button("Open config.json or .safetensors…").clicked() {
            actions.push(PlanAction::OpenModelFile);
        }
        if let Some(message) = &self.model_message {
            ui.label(RichText::new(message).color(ERROR_TEXT));
        }
        ui.label(format!(
            "{:.2} B parameters",
            self.model.parameter_count() as f64 / 1e9
        ));
        ui.separator();

        ui.heading("Training");
        let size_label = if self.model.is_vision() {
            "Image size (px)"
        } else {
            "Sequence length"
        };
        egui::Grid::new("plan-training")
            .num_columns(2)
            .show(ui, |ui| {
                ui.label("Method");
                ui.horizontal(|ui| {
                    ui.selectable_value(&mut self.method, MethodChoice::Full, "Full");
                    ui.selectable_value(&mut self.method, MethodChoice::Lora, "LoRA");
                    ui.selectable_value(&mut self.method, MethodChoice::Qlora, "QLoRA");
                });
                ui.end_row();
                if self.method != MethodChoice::Full {
                    row(ui, "LoRA rank", |ui| {
                        ui.add(egui::DragValue::new(&mut self.lora_rank).range(1..=1024))
                    });
                    ui.label("LoRA targets");
                    ui.horizontal(|ui| {
                        ui.selectable_value(
                            &mut self.lora_targets,
                            LoraTargets::Attention,
                            "attention",
                        );
                        ui.selectable_value(
                            &mut self.lora_targets,
                            LoraTargets::AllLinear,
                            "all linear",
                        );
                    });
                    ui.end_row();
                }
                let setup = &mut self.setup;
                row(ui, "Precision", |ui| {
                    choice(
                        ui,
                        "plan-precision",
                        &mut setup.precision,
                        &[
                            (Precision::Bf16Mixed, "bf16 mixed"),
                            (Precision::Fp16Mixed, "fp16 mixed"),
                            (Precision::Bf16, "pure bf16"),
                            (Precision::Fp32, "fp32"),
                        ],
                    )
                });
                row(ui, "Optimizer", |ui| {
                    choice(
                        ui,
                        "plan-optimizer",
                        &mut setup.optimizer,
                        &[
                            (Optimizer::Adamw, "AdamW"),
                            (Optimizer::Adamw8bit, "8-bit AdamW"),
                            (Optimizer::PagedAdamw8bit, "paged 8-bit AdamW"),
                            (Optimizer::Adafactor, "Adafactor"),
                            (Optimizer::Sgd, "SGD"),
                            (Optimizer::SgdMomentum, "SGD + momentum"),
                        ],
                    )
                });
                row(ui, "Micro-batch", |ui| {
                    ui.add(egui::DragValue::new(&mut setup.micro_batch).range(1..=4096))
                });
                row(ui, size_label, |ui| {
                    ui.add(egui::DragValue::new(&mut setup.sequence_length).range(1..=1_048_576))
                });
                row(ui, "Checkpointing", |ui| {
                    choice(
                        ui,
                        "plan-checkpointing",
                        &mut setup.checkpointing,
                        &[(Checkpointing::None, "none"), (Checkpointing::Full, "full")],
                    )
                });
                row(ui, "Attention", |ui| {
                    choice(
                        ui,
                        "plan-attention",
                        &mut setup.attention,
                        &[
                            (Attention::Sdpa, "SDPA"),
                            (Attention::Flash, "flash"),
                            (Attention::Eager, "eager"),
                        ],
                    )
                });
                row(ui, "Task", |ui| {
                    choice(
                        ui,
                        "plan-task",
                        &mut setup.task,
                        &[
                            (Task::LanguageModel, "language model"),
                            (Task::Classification, "classification"),
                        ],
                    )
                });
            });
        ui.separator();
        ui.heading("GPUs");
        let list = cards();
        let detected_name = self
            .detected_card
            .as_ref()
            .map_or("RTX 4090 (no GPU detected)".to_string(), |card| {
                format!("{} (detected)", card.name)
            });
        let selected = match self.card_index.and_then(|index| list.get(index)) {
            Some(card) => card.name.clone(),
            None => detected_name.clone(),
        };
        egui::Grid::new("plan-gpus").num_columns(2).show(ui, |ui| {
            let card_index = &mut self.card_index;
            row(ui, "Card", |ui| {
                egui::ComboBox::from_id_salt("plan-card")
                    .selected_text(selected)
                    .show_ui(ui, |ui| {
                        ui.selectable_value(card_index, None, detected_name);
                        for (index, card) in list.iter().enumerate() {
                            ui.selectable_value(card_index, Some(index), card.name.clone());
                        }
                    })
                    .response
            });
            let setup = &mut self.setup;
            row(ui, "GPUs", |ui| {
                ui.add(egui::DragValue::new(&mut setup.gpus).range(1..=1024))
            });
            row(ui, "Sharding", |ui| {
                choice(
                    ui,
                    "plan-sharding",
                    &mut setup.sharding,
                    &[
                        (Sharding::None, "none"),
                        (Sharding::Ddp, "DDP"),
                        (Sharding::Fsdp, "FSDP full shard"),
                        (Sharding::Zero1, "ZeRO-1"),
                        (Sharding::Zero2, "ZeRO-2"),
                        (Sharding::Zero3, "ZeRO-3"),
                    ],
                )
            });
            row(ui, "CPU offload", |ui| {
                choice(
                    ui,
                    "plan-offload",
                    &mut setup.offload,
                    &[
                        (Offload::None, "none"),
                        (Offload::Optimizer, "optimizer"),
                        (Offload::OptimizerAndParams, "optimizer + params"),
                    ],
                )
            });
            let target_batch = &mut self.target_batch;
            row(ui, "Target global batch", |ui| {
                ui.add(egui::DragValue::new(target_batch).range(1..=1_000_000))
            });
        });
        ui.separator();
        ui.heading("Overheads");
        let overheads: &mut Overheads = &mut self.setup.overheads;
        let mut context_mib = overheads.cuda_context_bytes / (1024 * 1024);
        let mut reserve_pct = overheads.allocator_reserve_fraction * 100.0;
        egui::Grid::new("plan-overheads")
            .num_columns(2)
            .show(ui, |ui| {
                row(ui, "CUDA context (MiB)", |ui| {
                    ui.add(egui::DragValue::new(&mut context_mib).range(0..=8192))
                        .on_hover_text("Kernels and library workspaces, per process")
                });
                row(ui, "Allocator reserve (%)", |ui| {
                    ui.add(egui::DragValue::new(&mut reserve_pct).range(0.0..=100.0))
                        .on_hover_text("Cached by PyTorch beyond the live tensors")
                });
            });
        overheads.cuda_context_bytes = context_mib * 1024 * 1024;
        overheads.allocator_reserve_fraction = reserve_pct / 100.0;
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
        for line in &answer.advice {
            ui.label(RichText::new(line).weak());
        }
        ui.add_space(6.0);
        breakdown_chart(ui, &answer.breakdown, card.memory_bytes);
        batch_curve(ui, &model, &setup, &card);
        strategy_table(ui, &answer);
    }
}

/// A combo box over a fixed list of values.
fn choice<T: PartialEq + Copy>(
    ui: &mut egui::Ui,
    id: &str,
    value: &mut T,
    options: &[(T, &str)],
) -> egui::Response {
    let selected = options
        .iter()
        .find(|(option, _)| option == value)
        .map_or("", |(_, label)| label);
    egui::ComboBox::from_id_salt(id)
        .selected_text(selected)
        .show_ui(ui, |ui| {
            for (option, label) in options {
                ui.selectable_value(value, *option, *label);
            }
        })
        .response
}

/// One row of an input grid: a label and the widget it names (for screen readers and tests).
fn row(ui: &mut egui::Ui, label: &str, widget: impl FnOnce(&mut egui::Ui) -> egui::Response) {
    let label = ui.label(label);
    widget(ui).labelled_by(label.id);
    ui.end_row();
}

const PART_COLOURS: [(&str, Color32); 5] = [
    ("Weights", Color32::from_rgb(0x6c, 0x9c, 0xff)),
    ("Gradients", Color32::from_rgb(0xb3, 0x88, 0xff)),
    ("Optimizer", Color32::from_rgb(0xff, 0x9f, 0x43)),
    ("Activations", Color32::from_rgb(0x5c, 0xd6, 0x7a)),
    ("Overhead", Color32::from_gray(140)),
];

/// One stacked bar of the breakdown (GiB) against a line at the card's memory.
fn breakdown_chart(ui: &mut egui::Ui, breakdown: &MemoryBreakdown, memory_bytes: u64) {
    ui.label(RichText::new("Where the memory goes (GiB per GPU)").strong());
    let parts = [
        breakdown.weights,
        breakdown.gradients,
        breakdown.optimizer,
        breakdown.activations,
        breakdown.overhead,
    ];
    let mut base = 0.0;
    let mut charts = Vec::new();
    for ((name, colour), bytes) in PART_COLOURS.iter().zip(parts) {
        let height = bytes as f64 / GIB;
        charts.push(
            BarChart::new(
                *name,
                vec![
                    Bar::new(0.0, height)
                        .base_offset(base)
                        .width(0.6)
                        .name(format!("{name}: {height:.2} GiB")),
                ],
            )
            .color(*colour),
        );
        base += height;
    }
    let memory_gib = memory_bytes as f64 / GIB;
    Plot::new("plan-breakdown")
        .height(220.0)
        .legend(Legend::default())
        .show_x(false)
        .show_axes([false, true])
        .show_grid([false, true])
        .include_x(-1.0)
        .include_x(1.0)
        .include_y(0.0)
        .include_y(memory_gib * 1.1)
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .show(ui, |plot_ui| {
            for chart in charts {
                plot_ui.bar_chart(chart);
            }
            plot_ui.hline(
                HLine::new("Card memory", memory_gib)
                    .color(Color32::from_rgb(0xff, 0x5c, 0x5c))
                    .style(LineStyle::dashed_loose()),
            );
        });
}

/// Memory against micro-batch, with the card's usable memory as the fit limit.
fn batch_curve(ui: &mut egui::Ui, model: &Model, setup: &TrainingSetup, card: &GpuCard) {
    ui.label(RichText::new("Memory per GPU vs micro-batch (GiB)").strong());
    let mut points = Vec::new();
    let mut micro_batch = 1u64;
    while micro_batch <= 256 {
        if let Ok(breakdown) = estimate(
            model,
            &TrainingSetup {
                micro_batch,
                ..*setup
            },
        ) {
            points.push([micro_batch as f64, breakdown.total() as f64 / GIB]);
            if !fits(&breakdown, card.memory_bytes)
                && breakdown.total() as f64 > 2.0 * card.memory_bytes as f64
            {
                break;
            }
        }
        micro_batch = if micro_batch < 16 {
            micro_batch + 1
        } else {
            micro_batch * 2
        };
    }
    let limit = card.memory_bytes as f64 * (1.0 - crate::plan::recommend::SAFETY_MARGIN) / GIB;
    Plot::new("plan-batch-curve")
        .height(200.0)
        .legend(Legend::default())
        .include_y(0.0)
        .x_axis_label("micro-batch")
        .allow_drag(false)
        .allow_scroll(false)
        .show(ui, |plot_ui| {
            plot_ui.line(
                Line::new("Memory per GPU", points)
                    .color(Color32::from_rgb(0x6c, 0x9c, 0xff))
                    .width(2.0),
            );
            plot_ui.hline(
                HLine::new("Fit limit (95 % of the card)", limit)
                    .color(Color32::from_rgb(0xff, 0x5c, 0x5c))
                    .style(LineStyle::dashed_loose()),
            );
            plot_ui.vline(
                VLine::new("Chosen micro-batch", setup.micro_batch as f64).color(Color32::GRAY),
            );
        });
}

fn strategy_table(ui: &mut egui::Ui, answer: &Recommendation) {
    ui.label(RichText::new("Strategies on this card, best first").strong());
    egui::Grid::new("plan-strategies")
        .striped(true)
        .num_columns(5)
        .show(ui, |ui| {
            for header in [
                "Method",
                "Precision",
                "Checkpointing",
                "At micro-batch 1",
                "Largest micro-batch",
            ] {
                ui.label(RichText::new(header).weak());
            }
            ui.end_row();
            for row in &answer.strategies {
                ui.label(row.method);
                ui.label(row.precision);
                ui.label(if row.checkpointing { "full" } else { "none" });
                ui.label(format!(
                    "{:.2} GiB",
                    row.per_gpu_bytes_at_batch_1 as f64 / GIB
                ));
                ui.label(
                    row.max_micro_batch
                        .map_or("does not fit".to_string(), |batch| batch.to_string()),
                );
                ui.end_row();
            }
        });
}
