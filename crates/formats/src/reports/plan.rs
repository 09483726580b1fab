//! `gputune plan --json`: will a training run fit one card, the user's setup beside the
//! recommended one, each with its memory breakdown, what to change, and a strategy table.
//! Every byte count is per GPU.

use serde::Serialize;
use serde_json::Value;

use super::plan_setup::{Checkpointing, Method, Precision, TrainingSetup};

/// The plan report's `format_version`.
pub const PLAN_REPORT_FORMAT: u32 = 1;

/// The whole of `plan --json`. `per_gpu_bytes`, `breakdown_bytes`, `fits` and
/// `max_micro_batch` are the user's own setup; `grad_accum_steps` is the recommendation's.
#[derive(Debug, Serialize)]
pub struct PlanReport<'a> {
    pub format_version: u32,
    pub model: &'a str,
    pub parameters: u64,
    pub trainable_parameters: u64,
    pub card: &'a str,
    pub gpu_memory_bytes: u64,
    pub per_gpu_bytes: u64,
    pub breakdown_bytes: MemoryBreakdown,
    pub fits: bool,
    pub max_micro_batch: Option<u64>,
    pub grad_accum_steps: u64,
    pub target_global_batch: Option<u64>,
    pub fits_as_set_up: bool,
    pub yours: &'a PlannedSetup,
    pub recommended: Option<&'a PlannedSetup>,
    pub changes: &'a [Change],
    pub batch_notes: &'a [String],
    /// How to load the model for the recommended setup (PEFT, bitsandbytes, attention), as the
    /// Hugging Face export writes it.
    pub model_load: Value,
    pub strategies: &'a [Strategy],
    pub advice: &'a [String],
    pub summary: &'a str,
    pub training_seconds: Option<f64>,
}

/// A setup with its micro-batch and accumulation, and what it needs on the card.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedSetup {
    /// `micro_batch` and `gradient_accumulation_steps` are the planned ones.
    pub setup: TrainingSetup,
    /// Micro-batch × accumulation steps × GPUs.
    pub global_batch: u64,
    pub per_gpu_bytes: u64,
    pub breakdown_bytes: MemoryBreakdown,
    pub fits: bool,
}

impl PlannedSetup {
    /// The optimizer and the memory options, in a few words: "paged-adamw-8bit,
    /// checkpointing, activation offload, chunked loss".
    pub fn options_summary(&self) -> String {
        let setup = &self.setup;
        let mut options = vec![setup.optimizer.name().to_string()];
        if setup.checkpointing == Checkpointing::Full {
            options.push("checkpointing".into());
        }
        if setup.activation_offload {
            options.push("activation offload".into());
        }
        if setup.chunked_cross_entropy {
            options.push("chunked loss".into());
        }
        options.join(", ")
    }
}

/// The moments of a training step the peak can fall in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The end of the forward pass: every saved activation and the loss are held.
    Forward,
    /// The backward pass: its start (the loss's gradients) or, under checkpointing, a block
    /// being recomputed.
    Backward,
    /// `optimizer.step()`: every gradient, the optimizer's states and its temporaries.
    OptimizerStep,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "end of the forward pass",
            Phase::Backward => "backward pass",
            Phase::OptimizerStep => "optimizer step",
        }
    }
}

/// Tensor bytes live at each phase's own peak (before overhead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PhasePeaks {
    pub forward: u64,
    pub backward: u64,
    pub optimizer_step: u64,
}

/// Peak memory of one GPU, split by what holds it at the peak, in bytes. `total()` is what
/// nvidia-smi would show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryBreakdown {
    /// Parameters as stored, plus the 16-bit copies autocast holds between a layer's forward
    /// and backward pass when the peak falls there.
    pub weights: u64,
    /// The part of `weights` that is autocast's 16-bit copies.
    pub autocast_copies: u64,
    /// Gradients live at the peak (none before the backward pass unless they accumulate).
    pub gradients: u64,
    pub optimizer: u64,
    /// Saved activations live at the peak, the loss's included.
    pub activations: u64,
    /// Short-lived buffers at the peak: the loss's gradients, a recomputed block, or the
    /// optimizer step's temporaries.
    pub temporaries: u64,
    /// CUDA context plus what the caching allocator reserves beyond the tensors.
    pub overhead: u64,
    /// The caching allocator's part of `overhead`: blocks reserved beyond the live tensors.
    pub allocator_reserve: u64,
    /// The CUDA context's part of `overhead` (assumed, see `Overheads`).
    pub cuda_context: u64,
    /// Kept free beyond `total()` when checking that the step fits (the planner's
    /// `CNN_SAFETY_MARGIN`, `LOSS_HOLE_SHARE`); 0 where the measurements show none is needed.
    pub safety_margin: u64,
    /// Why `safety_margin` is kept (`None` when it is 0).
    pub safety_margin_for: Option<SafetyMargin>,
    /// Where in the step the peak falls.
    pub peak_phase: Phase,
    pub phases: PhasePeaks,
}

impl MemoryBreakdown {
    pub fn total(&self) -> u64 {
        self.tensors().saturating_add(self.overhead)
    }

    /// Live tensor bytes at the peak (what `torch.cuda.max_memory_allocated` reports).
    pub fn tensors(&self) -> u64 {
        self.weights
            .saturating_add(self.gradients)
            .saturating_add(self.optimizer)
            .saturating_add(self.activations)
            .saturating_add(self.temporaries)
    }
}

/// Why a plan keeps memory free beyond its total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SafetyMargin {
    /// A CNN's cuDNN workspaces, which the count does not include.
    CnnWorkspaces,
    /// The hole a full fine-tune's freed fp32 loss tensors leave in the default allocator.
    LossHole,
}

/// One kind of change to a setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// The card's own mixed precision (bf16 from Ampere on, fp16 with loss scaling before).
    Precision,
    /// 8-bit AdamW (paged for QLoRA): a quarter of AdamW's state.
    EightBitOptimizer,
    /// The loss's fp32 part one chunk of the sequence at a time.
    ChunkedCrossEntropy,
    /// Keep each block's input and recompute the block in the backward pass.
    Checkpointing,
    /// Saved activations wait in CPU memory (with checkpointing: the block inputs).
    ActivationOffload,
    /// Weights, gradients and optimizer states in bf16.
    PureBf16,
    /// LoRA or QLoRA instead of the method asked for.
    Method,
}

/// One change the recommendation makes to the user's setup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub kind: ChangeKind,
    /// What to do, as an instruction: "turn on gradient checkpointing".
    pub advice: String,
    /// Per-GPU memory at micro-batch 1 with this change and the ones before it.
    pub per_gpu_bytes: u64,
}

/// One row of the strategy table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Strategy {
    /// Full, or LoRA / QLoRA with the user's rank and targets (rank 16 on every linear layer
    /// when the user trains in full).
    pub method: Method,
    pub precision: Precision,
    pub checkpointing: bool,
    /// Per-GPU memory at micro-batch 1.
    pub per_gpu_bytes_at_batch_1: u64,
    /// `None` when even micro-batch 1 does not fit.
    pub max_micro_batch: Option<u64>,
}
