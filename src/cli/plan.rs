//! `gputune plan`: will a training run fit, and how to set it up. Flag names are fixed by the
//! issue: other tools script against them.

use std::io::Write;
use std::path::Path;

use clap::Args;
use serde::Serialize;

use crate::device::BackendOptions;
use crate::plan::PlanError;
use crate::plan::export::{ExportFormat, export_setup};
use crate::plan::memory::{MemoryBreakdown, parameter_counts};
use crate::plan::model::{LoraTargets, Model, PRESET_NAMES, preset};
use crate::plan::recommend::{GpuCard, Strategy, card, cards, recommend, training_seconds};
use crate::plan::setup::{
    Attention, Checkpointing, Method, Offload, Optimizer, Overheads, Precision, Sharding, Task,
    TrainingSetup,
};

/// The `plan` subcommand's options.
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// List the preset models and exit.
    #[arg(long)]
    pub list_models: bool,
    /// A preset name (see --list-models) or the path of a config.json or .safetensors file.
    #[arg(
        long,
        value_name = "NAME|PATH",
        required_unless_present = "list_models"
    )]
    pub model: Option<String>,
    #[arg(long, value_name = "full|lora|qlora", default_value = "full")]
    pub method: String,
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub lora_rank: u64,
    #[arg(long, value_enum, default_value_t = LoraTargets::Attention)]
    pub lora_targets: LoraTargets,
    /// QLoRA without double quantization of the quantization constants.
    #[arg(long)]
    pub no_double_quant: bool,
    #[arg(long, value_enum, default_value_t = Precision::Bf16Mixed)]
    pub precision: Precision,
    #[arg(long, value_enum, default_value_t = Optimizer::Adamw)]
    pub optimizer: Optimizer,
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub micro_batch: u64,
    /// Tokens per sample (text models; default 2048).
    #[arg(long, value_name = "N", conflicts_with = "image_size")]
    pub seq_len: Option<u64>,
    /// Image side in pixels (vision models; default 224).
    #[arg(long, value_name = "N")]
    pub image_size: Option<u64>,
    #[arg(long, value_enum, default_value_t = Checkpointing::None)]
    pub checkpointing: Checkpointing,
    #[arg(long, value_enum, default_value_t = Attention::Sdpa)]
    pub attention: Attention,
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub gpus: u64,
    #[arg(long, value_enum, default_value_t = Sharding::None)]
    pub sharding: Sharding,
    #[arg(long, value_enum, default_value_t = Offload::None)]
    pub offload: Offload,
    /// Language modelling (logits over the vocabulary at every token) or classification.
    #[arg(long, value_enum, default_value_t = Task::LanguageModel)]
    pub task: Task,
    /// Plan for a GPU with this much memory (GiB) instead of a named card.
    #[arg(long, value_name = "X")]
    pub gpu_memory_gib: Option<f64>,
    /// The card to plan for: a name from the built-in list ("RTX 4090", "A100 80GB", ...) or
    /// "detected" for GPU 0 of the device layer (the simulator's RTX 4090 without a driver).
    #[arg(long, value_name = "NAME", default_value = "detected")]
    pub card: String,
    /// Global batch to reach with gradient accumulation (default: micro-batch × GPUs).
    #[arg(long, value_name = "N")]
    pub target_batch: Option<u64>,
    /// CUDA context and library workspaces, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 500)]
    pub cuda_context_mib: u64,
    /// Caching-allocator reserve on top of the tensors, percent.
    #[arg(long, value_name = "PCT", default_value_t = 20.0)]
    pub allocator_reserve_pct: f64,
    /// Tokens (or images) to train on, for a time estimate.
    #[arg(long, value_name = "N")]
    pub tokens: Option<f64>,
    /// Share of the card's dense bf16 throughput the run achieves, percent.
    #[arg(long, value_name = "PCT", default_value_t = 40.0)]
    pub utilization_pct: f64,
    #[arg(long)]
    pub json: bool,
    /// Also write the setup as a trainer config to this file.
    #[arg(long, value_name = "FILE", requires = "format")]
    pub export: Option<std::path::PathBuf>,
    /// The trainer config to write with --export.
    #[arg(long, value_enum, requires = "export")]
    pub format: Option<ExportFormat>,
}

/// What `plan --json` prints.
#[derive(Debug, Serialize)]
struct PlanReport<'a> {
    model: &'a str,
    parameters: u64,
    trainable_parameters: u64,
    card: &'a str,
    gpu_memory_bytes: u64,
    per_gpu_bytes: u64,
    breakdown_bytes: MemoryBreakdown,
    fits: bool,
    max_micro_batch: Option<u64>,
    grad_accum_steps: u64,
    strategies: &'a [Strategy],
    advice: &'a [String],
    summary: &'a str,
    training_seconds: Option<f64>,
}

/// Loads a preset or a model file.
pub fn load_model(name_or_path: &str) -> Result<Model, PlanError> {
    if let Some(model) = preset(name_or_path) {
        return Ok(model);
    }
    let path = Path::new(name_or_path);
    if path.exists() {
        return crate::plan::import::load_model(path);
    }
    Err(PlanError::UnknownModel {
        name: name_or_path.to_string(),
    })
}

fn method(args: &PlanArgs) -> Result<Method, PlanError> {
    match args.method.as_str() {
        "full" => Ok(Method::Full),
        "lora" => Ok(Method::Lora {
            rank: args.lora_rank,
            targets: args.lora_targets,
        }),
        "qlora" => Ok(Method::Qlora {
            rank: args.lora_rank,
            targets: args.lora_targets,
            double_quantization: !args.no_double_quant,
        }),
        other => Err(PlanError::InvalidInput(format!(
            "Unknown method \"{other}\": use full, lora or qlora."
        ))),
    }
}

/// The card to plan for, from the options (and the device layer for "detected").
fn target_card(args: &PlanArgs, backend: &BackendOptions) -> Result<GpuCard, PlanError> {
    if let Some(gib) = args.gpu_memory_gib {
        if !(gib.is_finite() && gib > 0.0 && gib <= 4096.0) {
            return Err(PlanError::InvalidInput(format!(
                "--gpu-memory-gib must be between 0 and 4096, not {gib}."
            )));
        }
        let base = card(&args.card).unwrap_or_else(|| cards().remove(0));
        return Ok(GpuCard {
            name: format!("{gib} GiB GPU"),
            memory_bytes: (gib * 1024.0 * 1024.0 * 1024.0) as u64,
            ..base
        });
    }
    if args.card != "detected" {
        return card(&args.card).ok_or_else(|| {
            let names: Vec<String> = cards().into_iter().map(|card| card.name).collect();
            PlanError::InvalidInput(format!(
                "Unknown card \"{}\": use one of {} or --gpu-memory-gib.",
                args.card,
                names.join(", ")
            ))
        });
    }
    Ok(detected_card(backend))
}

/// GPU 0 as the device layer sees it; an RTX 4090 (what the simulator plays) when there is no
/// driver. Quietly: planning needs no GPU, so a missing driver is not worth a warning here.
fn detected_card(backend: &BackendOptions) -> GpuCard {
    let identity = match backend.choice {
        crate::device::BackendChoice::Sim => None,
        _ => crate::device::nvml::NvmlBackend::open(backend.nvml_library_path.as_deref())
            .ok()
            .and_then(|mut nvml| crate::device::Backend::identity(&mut nvml, 0).ok()),
    };
    identity.map_or_else(
        || cards().remove(0),
        |identity| {
            crate::plan::recommend::card_for_gpu(
                &identity.name,
                identity.memory_total_bytes,
                identity.architecture.as_deref(),
            )
        },
    )
}

/// Runs `gputune plan`.
pub fn run(args: &PlanArgs, backend: &BackendOptions, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.list_models {
        for name in PRESET_NAMES {
            if let Some(model) = preset(name) {
                writeln!(
                    out,
                    "{name:<20} {:>8.2} B parameters",
                    model.parameter_count() as f64 / 1e9
                )?;
            }
        }
        return Ok(());
    }
    let model = load_model(args.model.as_deref().unwrap_or_default())?;
    let default_size = if model.is_vision() { 224 } else { 2048 };
    let setup = TrainingSetup {
        method: method(args)?,
        precision: args.precision,
        optimizer: args.optimizer,
        micro_batch: args.micro_batch,
        gradient_accumulation_steps: 1,
        sequence_length: args.seq_len.or(args.image_size).unwrap_or(default_size),
        checkpointing: args.checkpointing,
        attention: args.attention,
        gpus: args.gpus,
        sharding: args.sharding,
        offload: args.offload,
        task: args.task,
        activation_offload: false,
        chunked_cross_entropy: false,
        overheads: Overheads {
            cuda_context_bytes: args.cuda_context_mib.saturating_mul(1024 * 1024),
            allocator_reserve_fraction: if args.allocator_reserve_pct.is_finite() {
                args.allocator_reserve_pct.clamp(0.0, 100.0) / 100.0
            } else {
                0.1
            },
        },
    };
    let card = target_card(args, backend)?;
    let target = args
        .target_batch
        .unwrap_or(args.micro_batch.saturating_mul(args.gpus));
    let recommendation = recommend(&model, &setup, &card, target)?;
    if let (Some(path), Some(format)) = (&args.export, args.format) {
        let text = export_setup(&model, &setup, recommendation.grad_accum_steps, format)?;
        crate::fsafe::write_atomically(path, text.as_bytes(), 0o644)?;
        eprintln!("Wrote {} config to {}.", format.name(), path.display());
    }
    let counts = parameter_counts(&model, &setup.method);
    let seconds = args.tokens.map(|tokens| {
        training_seconds(
            &model,
            &setup.method,
            tokens,
            &card,
            setup.gpus,
            args.utilization_pct / 100.0,
        )
    });
    if args.json {
        let report = PlanReport {
            model: &model.name,
            parameters: counts.total as u64,
            trainable_parameters: counts.trainable as u64,
            card: &card.name,
            gpu_memory_bytes: card.memory_bytes,
            per_gpu_bytes: recommendation.breakdown.total(),
            breakdown_bytes: recommendation.breakdown,
            fits: recommendation.fits,
            max_micro_batch: recommendation.max_micro_batch,
            grad_accum_steps: recommendation.grad_accum_steps,
            strategies: &recommendation.strategies,
            advice: &recommendation.advice,
            summary: &recommendation.summary,
            training_seconds: seconds,
        };
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    write_text(
        out,
        &model,
        &card,
        &recommendation,
        counts.trainable,
        seconds,
    )?;
    Ok(())
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1024.0 * 1024.0 * 1024.0))
}

fn write_text(
    out: &mut dyn Write,
    model: &Model,
    card: &GpuCard,
    recommendation: &crate::plan::recommend::Recommendation,
    trainable: f64,
    seconds: Option<f64>,
) -> std::io::Result<()> {
    let breakdown = &recommendation.breakdown;
    writeln!(
        out,
        "{}: {:.2} B parameters ({:.1} M trained) on {} ({})",
        model.name,
        model.parameter_count() as f64 / 1e9,
        trainable / 1e6,
        card.name,
        gib(card.memory_bytes)
    )?;
    for (label, bytes) in [
        ("Weights", breakdown.weights),
        ("Gradients", breakdown.gradients),
        ("Optimizer", breakdown.optimizer),
        ("Activations", breakdown.activations),
        ("Overhead", breakdown.overhead),
    ] {
        writeln!(out, "  {label:<12} {:>11}", gib(bytes))?;
    }
    writeln!(
        out,
        "  {:<12} {:>11} per GPU, as nvidia-smi would show it",
        "Total",
        gib(breakdown.total())
    )?;
    writeln!(out, "{}", recommendation.summary)?;
    if let Some(seconds) = seconds {
        writeln!(out, "Time estimate: {:.1} h", seconds / 3600.0)?;
    }
    writeln!(out, "\nStrategies on {} (best first):", card.name)?;
    writeln!(
        out,
        "  {:<6} {:<11} {:<14} {:>12} {:>10}",
        "method", "precision", "checkpointing", "at batch 1", "max batch"
    )?;
    for row in &recommendation.strategies {
        writeln!(
            out,
            "  {:<6} {:<11} {:<14} {:>12} {:>10}",
            row.method,
            row.precision,
            if row.checkpointing { "full" } else { "none" },
            gib(row.per_gpu_bytes_at_batch_1),
            row.max_micro_batch
                .map_or("no fit".to_string(), |batch| batch.to_string())
        )?;
    }
    for line in &recommendation.advice {
        writeln!(out, "Note: {line}")?;
    }
    Ok(())
}
