//! `gputune plan`: will a training run fit, and how to set it up. Flag names are fixed by the
//! issue: other tools script against them. The exit status says whether it fits (see
//! `EXIT_STATUS_HELP`).

mod choices;
mod measure;
mod text;

use std::io::Write;
use std::path::Path;

use clap::Args;

use crate::cli::choices::choice;
use crate::device::BackendOptions;
use crate::plan::PlanError;
use crate::plan::export::{ExportFormat, export_plan, model_load_settings};
use crate::plan::memory::parameter_counts;
use crate::plan::model::{Model, PRESET_NAMES, preset};
use crate::plan::recommend::{
    GpuCard, Recommendation, card, cards, recommend_for_target, training_seconds,
};
use gputune_formats::reports::plan::{PLAN_REPORT_FORMAT, PlanReport};
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Allocator, Attention, Checkpointing, DEFAULT_CUDA_CONTEXT_MIB, Method, Offload, Optimizer,
    Overheads, Precision, Sharding, Task, TrainingSetup,
};

/// The setup fits the card (at the recommended micro-batch); an `--export` file was written.
pub const EXIT_FITS: i32 = 0;
/// The setup does not fit as set: the output says what to change. `--export` writes nothing
/// unless `--force`.
pub const EXIT_DOES_NOT_FIT: i32 = 3;

/// What `gputune plan --help` says about the exit status.
const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  the setup fits (at the recommended micro-batch); an --export file was written
  1  an error: bad input, a model file that cannot be read, a setup the export format cannot
     express, a file that cannot be written
  2  the command line could not be parsed
  3  the setup does not fit the card as set: the output says what to change. --export writes
     nothing unless --force (which writes your setup as given; the status stays 3)";

/// The `plan` subcommand's options.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_STATUS_HELP)]
pub struct PlanArgs {
    /// List the preset models and exit.
    #[arg(long)]
    pub list_models: bool,
    /// A preset name (see --list-models) or the path of a config.json or .safetensors file.
    #[arg(
        long,
        value_name = "NAME|PATH",
        required_unless_present_any = ["list_models", "measure"]
    )]
    pub model: Option<String>,
    #[arg(long, value_name = "full|lora|qlora", default_value = "full")]
    pub method: String,
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub lora_rank: u64,
    #[arg(long, value_parser = choice::<LoraTargets>(), default_value = "attention")]
    pub lora_targets: LoraTargets,
    /// QLoRA without double quantization of the quantization constants.
    #[arg(long)]
    pub no_double_quant: bool,
    #[arg(long, value_parser = choice::<Precision>(), default_value = "bf16-mixed")]
    pub precision: Precision,
    #[arg(long, value_parser = choice::<Optimizer>(), default_value = "adamw")]
    pub optimizer: Optimizer,
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub micro_batch: u64,
    /// Tokens per sample (text models; default 2048).
    #[arg(long, value_name = "N", conflicts_with = "image_size")]
    pub seq_len: Option<u64>,
    /// Image side in pixels (vision models; default 224).
    #[arg(long, value_name = "N")]
    pub image_size: Option<u64>,
    #[arg(long, value_parser = choice::<Checkpointing>(), default_value = "none")]
    pub checkpointing: Checkpointing,
    /// Keep saved activations in CPU memory between the forward and the backward pass
    /// (torchtune's enable_activation_offloading; with --checkpointing full, each block's
    /// input waits there). Text models.
    #[arg(long)]
    pub activation_offload: bool,
    /// Compute the loss over chunks of the sequence, so the fp32 logits never exist whole
    /// (torchtune's chunked cross-entropy; Liger's fused loss in the Hugging Face Trainer).
    #[arg(long)]
    pub chunked_cross_entropy: bool,
    #[arg(long, value_parser = choice::<Attention>(), default_value = "sdpa")]
    pub attention: Attention,
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub gpus: u64,
    #[arg(long, value_parser = choice::<Sharding>(), default_value = "none")]
    pub sharding: Sharding,
    #[arg(long, value_parser = choice::<Offload>(), default_value = "none")]
    pub offload: Offload,
    /// Language modelling (logits over the vocabulary at every token) or classification.
    #[arg(long, value_parser = choice::<Task>(), default_value = "lm")]
    pub task: Task,
    /// Plan for a GPU with this much memory (GiB) instead of a named card.
    #[arg(long, value_name = "X")]
    pub gpu_memory_gib: Option<f64>,
    /// The card to plan for: a name from the built-in list ("RTX 4090", "A100 80GB", ...) or
    /// "detected" for GPU 0 of the device layer (the simulator's RTX 4090 without a driver).
    #[arg(long, value_name = "NAME", default_value = "detected")]
    pub card: String,
    /// Global batch to reach with gradient accumulation: the recommended micro-batch divides
    /// it, or the output names the nearest global batch (default: none; the largest
    /// micro-batch that fits, without accumulation).
    #[arg(long, value_name = "N")]
    pub target_batch: Option<u64>,
    /// CUDA context and the kernels a step loads, MiB: what the process holds outside
    /// PyTorch's allocator. The default was measured on an H200 (driver 580, CUDA 13); it
    /// differs per card and driver (nvidia-smi shows it for a process that has made one
    /// cuBLAS call).
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_CUDA_CONTEXT_MIB)]
    pub cuda_context_mib: u64,
    /// PyTorch's caching allocator: expandable-segments is
    /// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the exports set it).
    #[arg(long, value_parser = choice::<Allocator>(), default_value = "default")]
    pub allocator: Allocator,
    /// Replace the measured allocator model: reserve beyond the live tensors, percent of them.
    #[arg(long, value_name = "PCT")]
    pub allocator_reserve_pct: Option<f64>,
    /// Tokens (or images) to train on, for a time estimate.
    #[arg(long, value_name = "N")]
    pub tokens: Option<f64>,
    /// Share of the card's dense bf16 throughput the run achieves, percent.
    #[arg(long, value_name = "PCT", default_value_t = 40.0)]
    pub utilization_pct: f64,
    #[arg(long)]
    pub json: bool,
    /// Also write the recommended setup as a trainer config to this file (nothing is written
    /// when the setup does not fit, unless --force).
    #[arg(long, value_name = "FILE", requires = "format")]
    pub export: Option<std::path::PathBuf>,
    /// The trainer config to write with --export.
    #[arg(long, value_enum, requires = "export")]
    pub format: Option<ExportFormat>,
    /// With --export: write your setup as given even when it does not fit (the exit status
    /// is still 3).
    #[arg(long, requires = "export")]
    pub force: bool,
    /// Measure your own job instead: run the command after -- for a few steps, watch its GPU
    /// memory in NVML's process list, and stop it. With {mb} in the command (where its
    /// micro-batch goes), run it at each --micro-batches size and fit the cost per sample;
    /// with --model, compare with the plan for the same setup.
    #[arg(long, requires = "command")]
    pub measure: bool,
    /// With --measure: progress steps per run, read from its output as the sweep reads it
    /// (tqdm bars, the Hugging Face Trainer's log; default 20).
    #[arg(
        long,
        value_name = "N",
        requires = "measure",
        conflicts_with = "seconds"
    )]
    pub steps: Option<u64>,
    /// With --measure: seconds per run instead of a step count (for a job whose progress
    /// gputune cannot read).
    #[arg(long, value_name = "S", requires = "measure")]
    pub seconds: Option<f64>,
    /// With --measure: read the steps with this regex where the known formats do not match,
    /// as `gputune sweep --progress-regex` does (a named group `count`: the steps done).
    #[arg(
        long,
        value_name = "REGEX",
        requires = "measure",
        conflicts_with = "seconds"
    )]
    pub progress_regex: Option<String>,
    /// With --measure: the micro-batches to run, put where {mb} is (default 1,2).
    #[arg(long, value_name = "A,B", value_delimiter = ',', requires = "measure")]
    pub micro_batches: Vec<u64>,
    /// With --measure: run once more at the largest micro-batch the measurement finds.
    #[arg(long, requires = "measure")]
    pub confirm: bool,
    /// With --measure under sudo: run the command as root too (by default it runs as the
    /// user who ran sudo).
    #[arg(long, requires = "measure")]
    pub keep_root: bool,
    /// The training command for --measure, after --.
    #[arg(last = true, value_name = "COMMAND", requires = "measure")]
    pub command: Vec<std::ffi::OsString>,
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

/// Runs `gputune plan` and ends the process with its exit status when that is not 0.
pub fn run(args: &PlanArgs, backend: &BackendOptions, out: &mut dyn Write) -> anyhow::Result<()> {
    let status = run_command(args, backend, out)?;
    if status != EXIT_FITS {
        out.flush()?;
        std::process::exit(status);
    }
    Ok(())
}

/// Runs `gputune plan`: the report on `out`, the export (if asked for and allowed), and the
/// exit status: [`EXIT_FITS`] or [`EXIT_DOES_NOT_FIT`].
pub fn run_command(
    args: &PlanArgs,
    backend: &BackendOptions,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    if args.measure {
        return measure::run(args, backend, out);
    }
    if args.list_models {
        for name in PRESET_NAMES {
            if let Some(model) = preset(name) {
                writeln!(
                    out,
                    "{name:<20} {:>8} parameters",
                    gputune_formats::units::parameters(model.parameter_count())
                )?;
            }
        }
        return Ok(EXIT_FITS);
    }
    let model = load_model(args.model.as_deref().unwrap_or_default())?;
    let setup = training_setup(args, &model)?;
    let card = target_card(args, backend)?;
    let recommendation = recommend_for_target(&model, &setup, &card, args.target_batch)?;
    let planned = recommendation
        .recommended
        .as_ref()
        .unwrap_or(&recommendation.yours);
    let counts = parameter_counts(&model, &planned.setup.method);
    let seconds = args.tokens.map(|tokens| {
        training_seconds(
            &model,
            &planned.setup.method,
            tokens,
            &card,
            setup.gpus,
            args.utilization_pct / 100.0,
        )
    });
    if args.json {
        let report = PlanReport {
            format_version: PLAN_REPORT_FORMAT,
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
            target_global_batch: recommendation.target_global_batch,
            fits_as_set_up: recommendation.fits_as_set_up,
            yours: &recommendation.yours,
            recommended: recommendation.recommended.as_ref(),
            changes: &recommendation.changes,
            batch_notes: &recommendation.batch_notes,
            model_load: model_load_settings(&model, &planned.setup),
            strategies: &recommendation.strategies,
            advice: &recommendation.advice,
            summary: &recommendation.summary,
            training_seconds: seconds,
        };
        crate::text::write_json_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        text::write_report(
            out,
            &model,
            &card,
            &recommendation,
            counts.trainable,
            seconds,
        )?;
    }
    if let (Some(path), Some(format)) = (&args.export, args.format) {
        export(args, path, format, &model, &card, &recommendation)?;
    }
    Ok(if recommendation.fits_as_set_up {
        EXIT_FITS
    } else {
        EXIT_DOES_NOT_FIT
    })
}

/// The training setup the options describe.
fn training_setup(args: &PlanArgs, model: &Model) -> Result<TrainingSetup, PlanError> {
    let default_size = if model.is_vision() { 224 } else { 2048 };
    Ok(TrainingSetup {
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
        activation_offload: args.activation_offload,
        chunked_cross_entropy: args.chunked_cross_entropy,
        overheads: Overheads {
            cuda_context_bytes: args.cuda_context_mib.saturating_mul(1024 * 1024),
            allocator: args.allocator,
            allocator_reserve_fraction: match args.allocator_reserve_pct {
                Some(pct) if pct.is_finite() && (0.0..=100.0).contains(&pct) => Some(pct / 100.0),
                Some(pct) => {
                    return Err(PlanError::InvalidInput(format!(
                        "--allocator-reserve-pct must be between 0 and 100, not {pct}."
                    )));
                }
                None => None,
            },
        },
    })
}

/// Writes the recommendation as a trainer config; when the setup does not fit, writes nothing
/// (and says what to do) unless `--force`, which writes the user's setup as given.
fn export(
    args: &PlanArgs,
    path: &Path,
    format: ExportFormat,
    model: &Model,
    card: &GpuCard,
    recommendation: &Recommendation,
) -> anyhow::Result<()> {
    let planned = match &recommendation.recommended {
        Some(planned) if recommendation.fits_as_set_up => planned,
        _ if args.force => &recommendation.yours,
        _ => {
            eprintln!(
                "gputune: nothing written to {}: {}",
                crate::text::path(path),
                text::refusal(recommendation, card)
            );
            return Ok(());
        }
    };
    let export = export_plan(model, planned, format)?;
    crate::fsafe::write_atomically(path, export.text.as_bytes(), 0o644)?;
    let what = if std::ptr::eq(planned, &recommendation.yours) {
        "your setup (it does not fit; written because of --force)"
    } else {
        "the recommended setup"
    };
    eprintln!(
        "Wrote {what} to {} ({}).",
        crate::text::path(path),
        format.title()
    );
    for note in &export.notes {
        eprintln!("Note: {note}");
    }
    Ok(())
}
