//! Where training memory goes on one GPU: weights, gradients, optimizer states, activations and
//! overhead, for a model and a training setup. Bytes-per-parameter rules and their sources are
//! in docs/planner.md. [`estimate`] puts the parts together: what a step stores (`state`), the
//! moments its peak can fall at (`moments`), the allocator's reserve and the margin kept free
//! (`reserve`). The breakdown it returns is a format (`formats::reports::plan`).

mod moments;
mod reserve;
mod state;

use super::PlanError;
use super::activations::activation_profile;
use super::model::{Architecture, Model};
use gputune_formats::reports::plan::{MemoryBreakdown, Phase, PhasePeaks};
use gputune_formats::reports::plan_setup::{Method, Precision, Sharding, TrainingSetup};
use moments::{add_dequantized_weight, largest_moment, phase_peak, step_moments};
pub use reserve::{
    CNN_SAFETY_MARGIN, DEFAULT_RESERVE_SHARE, EXPANDABLE_LOSS_HOLE_SHARE, EXPANDABLE_RESERVE_SHARE,
    LOSS_HOLE_SHARE, SHARDED_PERSISTENT_SHARE, SHARDED_RESERVE_SHARE, allocator_reserve_bytes,
    safety_margin_reason,
};
use reserve::{reserve_at_peak, safety_margin};
use state::{shards_parameters, stored_state};

/// Parameters and how many of them are trained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParameterCounts {
    pub total: f64,
    pub trainable: f64,
}

/// Largest values accepted: far beyond any real training run, small enough that no estimate
/// overflows.
const MAX_MICRO_BATCH: u64 = 1 << 20;
const MAX_SEQUENCE_LENGTH: u64 = 1 << 24;
const MAX_GPUS: u64 = 1 << 16;

/// Checks a setup against a model; every planner entry point calls it first.
pub fn validate(model: &Model, setup: &TrainingSetup) -> Result<(), PlanError> {
    let invalid = |message: String| Err(PlanError::InvalidInput(message));
    if !(1..=MAX_MICRO_BATCH).contains(&setup.micro_batch) {
        return invalid(format!(
            "The micro-batch must be between 1 and {MAX_MICRO_BATCH}, not {}.",
            setup.micro_batch
        ));
    }
    let size_name = if model.is_vision() {
        "image size"
    } else {
        "sequence length"
    };
    if !(1..=MAX_SEQUENCE_LENGTH).contains(&setup.sequence_length) {
        return invalid(format!(
            "The {size_name} must be between 1 and {MAX_SEQUENCE_LENGTH}, not {}.",
            setup.sequence_length
        ));
    }
    if !(1..=MAX_MICRO_BATCH).contains(&setup.gradient_accumulation_steps) {
        return invalid(format!(
            "The gradient accumulation steps must be between 1 and {MAX_MICRO_BATCH}, not {}.",
            setup.gradient_accumulation_steps
        ));
    }
    if !(1..=MAX_GPUS).contains(&setup.gpus) {
        return invalid(format!(
            "The number of GPUs must be between 1 and {MAX_GPUS}, not {}.",
            setup.gpus
        ));
    }
    if setup.gpus > 1 && setup.sharding == Sharding::None {
        return invalid(
            "Several GPUs need a way to share the work: choose --sharding ddp, fsdp or zero1/2/3."
                .to_string(),
        );
    }
    if let Method::Lora { rank, .. } | Method::Qlora { rank, .. } = setup.method
        && !(1..=65_536).contains(&rank)
    {
        return invalid(format!(
            "The LoRA rank must be between 1 and 65536, not {rank}."
        ));
    }
    if matches!(setup.method, Method::Qlora { .. }) && setup.precision == Precision::Fp32 {
        return invalid(
            "QLoRA computes in 16 bits: choose --precision bf16-mixed, fp16-mixed or bf16."
                .to_string(),
        );
    }
    if model.is_vision()
        && !matches!(setup.method, Method::Full)
        && !matches!(model.architecture, Architecture::Vit(_))
    {
        return invalid(
            "LoRA and QLoRA apply to transformers; train a CNN with --method full.".to_string(),
        );
    }
    super::model_checks(model)
}

/// Total and trainable parameters under a method.
pub fn parameter_counts(model: &Model, method: &Method) -> ParameterCounts {
    let total = model.parameter_count() as f64;
    let trainable = match method {
        Method::Full => total,
        Method::Lora { rank, targets } | Method::Qlora { rank, targets, .. } => model
            .lora_target_shapes(*targets)
            .iter()
            .map(|(inputs, outputs)| (*rank * (inputs + outputs)) as f64)
            .sum(),
    };
    ParameterCounts { total, trainable }
}

/// The per-GPU peak memory of one training step: the largest of its moments (`moments`), the
/// stored state it holds (`state`), and the allocator's reserve and margin on top (`reserve`).
pub fn estimate(model: &Model, setup: &TrainingSetup) -> Result<MemoryBreakdown, PlanError> {
    validate(model, setup)?;
    let counts = parameter_counts(model, &setup.method);
    let stored = stored_state(model, setup, &counts);
    let mut activations = activation_profile(&model.architecture, setup);
    // The largest tensor that comes and goes: one of the loss's (its gradient is the size of
    // its log-softmax).
    let loss_tensor = activations.backward_start / 2.0;
    add_dequantized_weight(model, setup, &mut activations);
    let moments = step_moments(model, setup, counts.trainable, &stored, &activations);

    let peak = largest_moment(&moments);
    let (weights, optimizer) = (stored.weights_bytes, stored.optimizer_bytes);
    // What the peak's moment holds beyond the stored weights and the optimizer states.
    let copies_at_peak = (peak.persistent_bytes - weights - optimizer).max(0.0);
    let weights_at_peak = weights + copies_at_peak;
    let tensors = peak.total_bytes();
    let sharded_parameters = shards_parameters(setup);
    let allocator_reserve = reserve_at_peak(
        setup,
        sharded_parameters,
        tensors,
        weights + optimizer,
        loss_tensor,
    );
    let (safety_margin, safety_margin_for) = safety_margin(
        model,
        setup,
        sharded_parameters,
        tensors,
        loss_tensor,
        allocator_reserve,
    );
    let overhead = setup.overheads.cuda_context_bytes as f64 + allocator_reserve;
    Ok(MemoryBreakdown {
        weights: to_bytes(weights_at_peak),
        autocast_copies: to_bytes(copies_at_peak),
        gradients: to_bytes(peak.gradients_bytes),
        optimizer: to_bytes(optimizer),
        activations: to_bytes(peak.activations_bytes),
        temporaries: to_bytes(peak.temporaries_bytes),
        overhead: to_bytes(overhead),
        allocator_reserve: to_bytes(allocator_reserve),
        cuda_context: setup.overheads.cuda_context_bytes,
        safety_margin: to_bytes(safety_margin),
        safety_margin_for,
        peak_phase: peak.phase,
        phases: PhasePeaks {
            forward: to_bytes(phase_peak(&moments, Phase::Forward)),
            backward: to_bytes(phase_peak(&moments, Phase::Backward)),
            optimizer_step: to_bytes(phase_peak(&moments, Phase::OptimizerStep)),
        },
    })
}

fn to_bytes(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value.min(u64::MAX as f64) as u64
    } else {
        0
    }
}
