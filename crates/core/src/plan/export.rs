//! Trainer configs from a planned setup, so a run uses the settings the plan sized: Hugging Face
//! `TrainingArguments` (JSON, its own fields only), an `accelerate config` (YAML) or a
//! DeepSpeed config (JSON). What a file cannot say (loading the model, PEFT, options the
//! trainer lacks, torchtune's equivalents) comes with it as notes: printed by the CLI, shown
//! by the window, and in the YAML's comments.

mod accelerate;
mod deepspeed;
mod hf;

use serde_json::{Value, json};

pub use hf::model_load_settings;

use super::PlanError;
use super::model::{Architecture, MlpKind, Model, TransformerKind};
use gputune_formats::reports::plan::PlannedSetup;
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Checkpointing, Method, Offload, Optimizer, Precision, Sharding, Task, TrainingSetup,
};

/// Which trainer config to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Hugging Face `TrainingArguments` as JSON.
    Hf,
    /// An `accelerate config` YAML file.
    Accelerate,
    /// A DeepSpeed config JSON.
    Deepspeed,
}

impl ExportFormat {
    /// Every format, in the order menus show them.
    pub const ALL: [ExportFormat; 3] = [
        ExportFormat::Hf,
        ExportFormat::Accelerate,
        ExportFormat::Deepspeed,
    ];

    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Hf => "hf",
            ExportFormat::Accelerate => "accelerate",
            ExportFormat::Deepspeed => "deepspeed",
        }
    }

    /// The format with this name (case ignored), as `name` gives it.
    pub fn from_name(name: &str) -> Option<ExportFormat> {
        ExportFormat::ALL
            .into_iter()
            .find(|format| format.name().eq_ignore_ascii_case(name.trim()))
    }

    /// What the file is, in words.
    pub fn title(self) -> &'static str {
        match self {
            ExportFormat::Hf => "Hugging Face TrainingArguments",
            ExportFormat::Accelerate => "accelerate config",
            ExportFormat::Deepspeed => "DeepSpeed config",
        }
    }

    /// The file name the tools expect by convention.
    pub fn file_name(self) -> &'static str {
        match self {
            ExportFormat::Hf => "training_args.json",
            ExportFormat::Accelerate => "accelerate_config.yaml",
            ExportFormat::Deepspeed => "ds_config.json",
        }
    }
}

/// A config file's text, and what it cannot say itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub text: String,
    pub notes: Vec<String>,
}

/// The config text for `setup` on `model` with `grad_accum_steps` micro-batches per step.
/// Refuses setups the target tool cannot express, saying what to change.
pub fn export_setup(
    model: &Model,
    setup: &TrainingSetup,
    grad_accum_steps: u64,
    format: ExportFormat,
) -> Result<String, PlanError> {
    export_with_notes(model, setup, grad_accum_steps, format).map(|export| export.text)
}

/// The recommended (or any planned) setup as a config, with its micro-batch and
/// accumulation steps, and its notes.
pub fn export_plan(
    model: &Model,
    planned: &PlannedSetup,
    format: ExportFormat,
) -> Result<Export, PlanError> {
    export_with_notes(
        model,
        &planned.setup,
        planned.setup.gradient_accumulation_steps,
        format,
    )
}

/// [`export_setup`] with the notes that go with the file.
pub fn export_with_notes(
    model: &Model,
    setup: &TrainingSetup,
    grad_accum_steps: u64,
    format: ExportFormat,
) -> Result<Export, PlanError> {
    super::memory::validate(model, setup)?;
    exportable(setup, grad_accum_steps, format)
        .map_err(|message| PlanError::InvalidInput(message.to_string()))?;
    let notes = notes(model, setup, grad_accum_steps, format);
    let text = match format {
        ExportFormat::Hf => format!(
            "{:#}\n",
            hf::training_arguments(model, setup, grad_accum_steps)
        ),
        ExportFormat::Accelerate => accelerate::accelerate(model, setup, grad_accum_steps, &notes),
        ExportFormat::Deepspeed => format!("{:#}\n", deepspeed::deepspeed(setup, grad_accum_steps)),
    };
    Ok(Export { text, notes })
}

/// What goes with a config: how to load the model, what the format cannot set, the same
/// options in torchtune, and how to launch on several GPUs.
fn notes(
    model: &Model,
    setup: &TrainingSetup,
    grad_accum_steps: u64,
    format: ExportFormat,
) -> Vec<String> {
    let mut notes = hf::model_load_notes(model, setup);
    if let Some((name, value)) = setup.overheads.allocator.env() {
        // No trainer config holds the environment; the plan's memory depends on it.
        notes.insert(0, format!(
            "Launch with {name}={value} in the environment (export {name}={value}): the plan counts PyTorch's expandable-segments allocator, which wastes less memory than the default; without it the micro-batch may not fit."
        ));
    }
    notes.extend(script_notes(setup, grad_accum_steps, format));
    if format == ExportFormat::Hf {
        notes.extend(hf::trainer_notes(model, setup));
    } else {
        if setup.chunked_cross_entropy && setup.task == Task::LanguageModel {
            notes.push("Chunked cross-entropy is no setting of this file: compute the loss with torchtune's CEWithChunkedOutputLoss or Liger's LigerFusedLinearCrossEntropyLoss (the Trainer: use_liger_kernel=True).".to_string());
        }
        if setup.activation_offload {
            notes.push("Activation offloading is no setting of this file: wrap the forward pass in torch.autograd.graph.save_on_cpu(pin_memory=True), or with checkpointing call model.activation_checkpointing_enable(offload=True) (transformers 5).".to_string());
        }
    }
    if setup.activation_offload || setup.chunked_cross_entropy {
        notes.push(torchtune_overrides(setup, grad_accum_steps));
    }
    if setup.gpus > 1 && format != ExportFormat::Accelerate {
        let gpus = setup.gpus;
        notes.push(if format == ExportFormat::Deepspeed {
            format!("Launch on all {gpus} GPUs: deepspeed --num_gpus {gpus} train.py --deepspeed ds_config.json.")
        } else {
            format!("Launch on all {gpus} GPUs: torchrun --nproc_per_node {gpus} train.py, or accelerate launch.")
        });
    }
    notes
}

/// What the plan counts that the file has no key for, as the lines the training script needs:
/// the optimizer (an accelerate config names none, DeepSpeed has only AdamW), activation
/// checkpointing (only FSDP's is a config key), and in an accelerate config without DeepSpeed
/// the micro-batch and accumulation. Without them, a run that follows the file trains another
/// setup than the one sized, and may run out of memory.
fn script_notes(setup: &TrainingSetup, grad_accum_steps: u64, format: ExportFormat) -> Vec<String> {
    let mut notes = Vec::new();
    let checkpointing = setup.checkpointing == Checkpointing::Full;
    let code = optimizer_code(setup.optimizer);
    let optimizer = setup.optimizer.name();
    match format {
        ExportFormat::Hf => {}
        ExportFormat::Accelerate => {
            let micro_batch = setup.micro_batch;
            notes.push(format!("Micro-batch {micro_batch} per GPU (an accelerate config has no batch size): DataLoader(dataset, batch_size={micro_batch}) in the training script."));
            if !is_zero(setup.sharding) {
                let steps = if grad_accum_steps == 1 {
                    "step"
                } else {
                    "steps"
                };
                notes.push(format!("Gradient accumulation {grad_accum_steps} {steps} (only DeepSpeed's block of an accelerate config has them): Accelerator(gradient_accumulation_steps={grad_accum_steps}) in the training script, each step inside `with accelerator.accumulate(model):`."));
            }
            notes.push(format!("Optimizer {optimizer} (an accelerate config names none; the plan counts its memory): optimizer = {code} in the training script, before accelerator.prepare."));
            if checkpointing && setup.sharding != Sharding::Fsdp {
                notes.push("Activation checkpointing (no key of an accelerate config without FSDP; the plan counts it): call model.gradient_checkpointing_enable() in the training script before accelerator.prepare.".to_string());
            }
        }
        ExportFormat::Deepspeed => {
            if deepspeed::ds_optimizer(setup.optimizer) {
                notes.push("The optimizer's \"auto\" values are filled in by the Hugging Face Trainer or accelerate; with deepspeed.initialize alone, put your learning rate, betas, eps and weight decay in their place.".to_string());
            } else {
                let trainer = if setup.optimizer == Optimizer::SgdMomentum {
                    "Trainer(optimizers=(optimizer, None))".to_string()
                } else {
                    format!(
                        "optim=\"{}\" in TrainingArguments (gputune's hf export sets it)",
                        hf::optim_name(setup.optimizer)
                    )
                };
                notes.push(format!("Optimizer {optimizer} (DeepSpeed has none of its own by that name; the plan counts its memory): pass it to deepspeed.initialize(..., optimizer={code}); with the Hugging Face Trainer, {trainer}."));
            }
            if checkpointing {
                notes.push("Activation checkpointing (a DeepSpeed config cannot turn it on for the model; the plan counts it): call model.gradient_checkpointing_enable() before deepspeed.initialize; with the Hugging Face Trainer, gradient_checkpointing=True in TrainingArguments (gputune's hf export sets it).".to_string());
            }
        }
    }
    notes
}

/// The optimizer as the Python that makes it, with the memory the plan counts for it.
fn optimizer_code(optimizer: Optimizer) -> &'static str {
    match optimizer {
        Optimizer::Adamw => "torch.optim.AdamW(model.parameters(), lr=learning_rate)",
        Optimizer::AdamwFused => {
            "torch.optim.AdamW(model.parameters(), lr=learning_rate, fused=True)"
        }
        Optimizer::Adamw8bit => {
            "bitsandbytes.optim.AdamW8bit(model.parameters(), lr=learning_rate)"
        }
        Optimizer::PagedAdamw8bit => {
            "bitsandbytes.optim.PagedAdamW8bit(model.parameters(), lr=learning_rate)"
        }
        Optimizer::Adafactor => {
            "transformers.optimization.Adafactor(model.parameters(), lr=learning_rate, scale_parameter=False, relative_step=False)"
        }
        Optimizer::Sgd => "torch.optim.SGD(model.parameters(), lr=learning_rate)",
        Optimizer::SgdMomentum => {
            "torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=0.9)"
        }
    }
}

/// The same batch and memory options as overrides of a torchtune recipe's config.
fn torchtune_overrides(setup: &TrainingSetup, grad_accum_steps: u64) -> String {
    let mut overrides = vec![
        format!("batch_size={}", setup.micro_batch),
        format!("gradient_accumulation_steps={grad_accum_steps}"),
        format!(
            "enable_activation_checkpointing={}",
            python_bool(setup.checkpointing == Checkpointing::Full)
        ),
        format!(
            "enable_activation_offloading={}",
            python_bool(setup.activation_offload)
        ),
    ];
    if setup.chunked_cross_entropy {
        overrides.push("loss._component_=torchtune.modules.loss.CEWithChunkedOutputLoss".into());
    }
    format!(
        "In torchtune, the same plan is: tune run RECIPE --config CONFIG {}.",
        overrides.join(" ")
    )
}

fn python_bool(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

fn exportable(
    setup: &TrainingSetup,
    grad_accum_steps: u64,
    format: ExportFormat,
) -> Result<(), String> {
    if !(1..=1_000_000).contains(&grad_accum_steps) {
        return Err(format!(
            "Gradient accumulation steps must be between 1 and 1000000, not {grad_accum_steps}."
        ));
    }
    let offload = setup.offload;
    match (setup.sharding, offload) {
        (Sharding::None | Sharding::Ddp, Offload::Optimizer | Offload::OptimizerAndParams) => {
            return Err("Offloading to the CPU is done by DeepSpeed ZeRO or FSDP: choose --sharding zero2, zero3 or fsdp, or --offload none.".into());
        }
        (Sharding::Zero1 | Sharding::Zero2, Offload::OptimizerAndParams) => {
            return Err("Offloading parameters to the CPU needs ZeRO stage 3: choose --sharding zero3 (or fsdp), or --offload optimizer.".into());
        }
        (Sharding::Fsdp, Offload::Optimizer) => {
            return Err("FSDP offloads parameters and optimizer state together: choose --offload optimizer+params, or --sharding zero2 or zero3 to offload only the optimizer.".into());
        }
        _ => {}
    }
    if offload != Offload::None
        && matches!(
            setup.optimizer,
            Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit
        )
    {
        return Err("8-bit optimizers (bitsandbytes) step on the GPU and cannot update state offloaded to the CPU: choose --optimizer adamw, or --offload none.".into());
    }
    let deepspeed_runs = format == ExportFormat::Deepspeed || is_zero(setup.sharding);
    if deepspeed_runs && setup.precision == Precision::Bf16 && setup.method == Method::Full {
        // DeepSpeed's bf16 keeps fp32 master weights and optimizer states beside the bf16
        // weights: 3 times the plan's pure-bf16 state per parameter.
        return Err("DeepSpeed trains bf16 with an fp32 master copy of the weights and fp32 optimizer states, which pure bf16 does not have: choose --precision bf16-mixed (the plan then counts them), or --sharding fsdp and --format hf or accelerate.".into());
    }
    if format == ExportFormat::Deepspeed && setup.sharding == Sharding::Fsdp {
        return Err("FSDP is PyTorch's sharding, not DeepSpeed's: export with --format hf or accelerate, or choose --sharding zero3 (DeepSpeed's equivalent of FSDP full shard).".into());
    }
    Ok(())
}

fn is_zero(sharding: Sharding) -> bool {
    matches!(
        sharding,
        Sharding::Zero1 | Sharding::Zero2 | Sharding::Zero3
    )
}

fn zero_stage(sharding: Sharding) -> u64 {
    match sharding {
        Sharding::Zero1 => 1,
        Sharding::Zero2 => 2,
        Sharding::Zero3 => 3,
        _ => 0,
    }
}

/// LoRA layer names as the model's Hugging Face implementation calls them.
fn lora_target_modules(model: &Model, targets: LoraTargets) -> Value {
    if targets == LoraTargets::AllLinear {
        return json!("all-linear");
    }
    match &model.architecture {
        Architecture::Transformer(config) if config.mlp == MlpKind::SwiGlu => {
            json!(["q_proj", "k_proj", "v_proj", "o_proj"])
        }
        Architecture::Transformer(config) if config.kind == TransformerKind::DecoderOnly => {
            json!(["c_attn", "attn.c_proj"])
        }
        _ => json!(["query", "key", "value", "attention.output.dense"]),
    }
}
