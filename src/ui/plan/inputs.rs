//! The planner panel's inputs: model, training method and precision, GPUs and sharding, time
//! and overheads. Each input has a label that names it (for screen readers and UI tests).

use eframe::egui::{self, RichText};

use super::{MethodChoice, ModelKind, PlanAction, PlanPanel};
use crate::ui::style::ERROR_TEXT;
use gputune_core::plan::model::{LoraTargets, PRESET_NAMES, preset};
use gputune_core::plan::recommend::cards;
use gputune_core::plan::setup::{
    Allocator, Attention, Checkpointing, DEFAULT_CUDA_CONTEXT_MIB, Offload, Optimizer, Overheads,
    Precision, Sharding, Task,
};

impl PlanPanel {
    pub(super) fn inputs_ui(&mut self, ui: &mut egui::Ui, actions: &mut Vec<PlanAction>) {
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
                        self.match_fields_to_model();
                    }
                }
            })
            .response
            .labelled_by(heading.id);
        if ui.button("Open config.json or .safetensors…").clicked() {
            actions.push(PlanAction::OpenModelFile);
            self.export_pending = false;
        }
        // Where no file dialog opens (no XDG desktop portal), a path typed or pasted here.
        ui.horizontal(|ui| {
            let label = ui.label("or its path:");
            // What is left of the column beside the Load button, so the row never overflows.
            let load_width = ui.spacing().interact_size.x + 2.0 * ui.spacing().button_padding.x;
            let field_width = (ui.available_width() - load_width - ui.spacing().item_spacing.x)
                .clamp(80.0, 220.0);
            let field = ui
                .add(
                    egui::TextEdit::singleline(&mut self.model_path)
                        .hint_text("…/config.json, .safetensors or folder")
                        .desired_width(field_width),
                )
                .labelled_by(label.id);
            let entered = field.lost_focus() && ui.input(|input| input.key_pressed(egui::Key::Enter));
            if ui.button("Load").clicked() || entered {
                self.export_pending = false;
                if self.model_path.trim().is_empty() {
                    self.model_message = Some("Type or paste the path of the model's config.json, one of its .safetensors files or its folder, then press Load.".to_string());
                } else {
                    actions.push(PlanAction::LoadModelPath(self.model_path.clone()));
                }
            }
        });
        if let Some(message) = &self.model_message {
            ui.label(RichText::new(message).color(ERROR_TEXT));
        }
        let kind = ModelKind::of(&self.model);
        ui.label(format!(
            "{} parameters",
            gputune_core::units::parameters(self.model.parameter_count())
        ));
        ui.separator();

        ui.heading("Training");
        let size_label = if kind.is_vision() {
            "Image size (px)"
        } else {
            "Sequence length (tokens)"
        };
        egui::Grid::new("plan-training")
            .num_columns(2)
            .show(ui, |ui| {
                ui.label("Method");
                ui.horizontal(|ui| {
                    ui.selectable_value(&mut self.method, MethodChoice::Full, "Full");
                    if kind.takes_adapters() {
                        ui.selectable_value(&mut self.method, MethodChoice::Lora, "LoRA");
                        ui.selectable_value(&mut self.method, MethodChoice::Qlora, "QLoRA");
                    } else {
                        ui.label(RichText::new("(a CNN trains every weight)").weak());
                    }
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
                            (Optimizer::AdamwFused, "AdamW (fused)"),
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
                if kind == ModelKind::Text {
                    row(ui, "Activation offload", |ui| {
                        ui.checkbox(&mut setup.activation_offload, "to CPU memory")
                            .on_hover_text(
                                "Saved activations wait in pinned CPU memory between the forward and the backward pass (torchtune's enable_activation_offloading; with checkpointing, each block's input)",
                            )
                    });
                    row(ui, "Chunked cross-entropy", |ui| {
                        ui.checkbox(&mut setup.chunked_cross_entropy, "loss in chunks")
                            .on_hover_text(
                                "The loss's fp32 part one chunk of the sequence at a time (torchtune's chunked cross-entropy; Liger's fused loss in the Hugging Face Trainer)",
                            )
                    });
                }
                if kind.takes_adapters() {
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
                }
                if kind == ModelKind::Text {
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
                } else {
                    ui.label("Task");
                    ui.label("image classification");
                    ui.end_row();
                }
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
        if !self.model.is_vision() {
            ui.separator();
            ui.heading("Time");
            egui::Grid::new("plan-time").num_columns(2).show(ui, |ui| {
                let tokens = &mut self.tokens_millions;
                row(ui, "Tokens (millions)", |ui| {
                    ui.add(egui::DragValue::new(tokens).range(0.001..=1e7).speed(1.0))
                });
                let utilization = &mut self.utilization_pct;
                row(ui, "Utilization (%)", |ui| {
                    ui.add(egui::DragValue::new(utilization).range(1.0..=100.0))
                        .on_hover_text("Share of the card's dense bf16 throughput the run achieves (30-50 % is typical)")
                });
            });
        }
        ui.separator();
        ui.heading("Overheads");
        let overheads: &mut Overheads = &mut self.setup.overheads;
        let mut context_mib = overheads.cuda_context_bytes / (1024 * 1024);
        let mut own_reserve = overheads.allocator_reserve_fraction.is_some();
        let mut reserve_pct = overheads.allocator_reserve_fraction.unwrap_or(0.1) * 100.0;
        egui::Grid::new("plan-overheads")
            .num_columns(2)
            .show(ui, |ui| {
                row(ui, "Allocator", |ui| {
                    choice(
                        ui,
                        "plan-allocator",
                        &mut overheads.allocator,
                        &[
                            (Allocator::Default, "PyTorch default"),
                            (Allocator::ExpandableSegments, "expandable segments"),
                        ],
                    )
                    .on_hover_text(
                        "Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which the exports set) wastes less memory",
                    )
                });
                row(ui, "CUDA context (MiB)", |ui| {
                    ui.add(egui::DragValue::new(&mut context_mib).range(0..=8192))
                        .on_hover_text(format!(
                            "Kernels and library workspaces, per process. {DEFAULT_CUDA_CONTEXT_MIB} MiB was measured on an H200 (driver 580, CUDA 13); it differs per card and driver"
                        ))
                });
                row(ui, "Own allocator reserve", |ui| {
                    ui.checkbox(&mut own_reserve, "")
                        .on_hover_text("Replace the measured allocator model by a share of the live tensors")
                });
                if own_reserve {
                    row(ui, "Allocator reserve (%)", |ui| {
                        ui.add(egui::DragValue::new(&mut reserve_pct).range(0.0..=100.0))
                            .on_hover_text("Cached by PyTorch beyond the live tensors")
                    });
                }
            });
        overheads.cuda_context_bytes = context_mib * 1024 * 1024;
        overheads.allocator_reserve_fraction = own_reserve.then_some(reserve_pct / 100.0);
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
