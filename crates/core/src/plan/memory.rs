//! Where training memory goes on one GPU: weights, gradients, optimizer states, activations and
//! overhead, for a model and a training setup. Bytes-per-parameter rules and their sources are
//! in docs/planner.md.

use serde::Serialize;

use super::PlanError;
use super::activations::activation_profile;
use super::model::{Architecture, Model};
use super::setup::{
    Allocator, Checkpointing, Method, Offload, Optimizer, Overheads, Precision, Sharding,
    TrainingSetup,
};

/// The moments of a training step the peak can fall in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
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

/// Peak memory of one GPU, split by what holds it at the peak. `total` is what nvidia-smi
/// would show.
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
    /// Kept free beyond `total()` when checking that the step fits (see
    /// [`CNN_SAFETY_MARGIN`]); 0 where the measurements show none is needed.
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

/// The per-GPU peak memory of one training step: the largest of its phases.
pub fn estimate(model: &Model, setup: &TrainingSetup) -> Result<MemoryBreakdown, PlanError> {
    validate(model, setup)?;
    let counts = parameter_counts(model, &setup.method);
    let shards = setup.shards() as f64;
    let sharded_parameters = matches!(setup.sharding, Sharding::Fsdp | Sharding::Zero3);
    let sharded_gradients = sharded_parameters || setup.sharding == Sharding::Zero2;
    let sharded_optimizer = sharded_gradients || setup.sharding == Sharding::Zero1;

    let mut weights = weight_bytes(model, setup, &counts);
    let mut autocast_copies = 0.0;
    if setup.offload != Offload::None && setup.method == Method::Full && is_mixed(setup.precision) {
        // The fp32 master copy moves to the CPU with the optimizer; the 16-bit copy stays.
        weights = 2.0 * counts.total;
    } else if setup.method == Method::Full && is_mixed(setup.precision) && !sharded_parameters {
        // Autocast casts each matmul weight to 16 bits once per forward pass; the copy lives
        // until that layer's backward pass. FSDP's mixed precision gathers 16-bit parameters
        // and frees them instead.
        autocast_copies = 2.0 * castable_parameters(model).min(counts.total);
    }
    if sharded_parameters {
        weights /= shards;
    }
    if setup.offload == Offload::OptimizerAndParams {
        weights = 0.0;
    }
    if sharded_parameters || setup.offload == Offload::OptimizerAndParams {
        weights += gather_buffer_bytes(model, counts.total);
    }

    let gradient_bytes_per_value = trained_value_bytes(setup);
    let mut gradients = counts.trainable * gradient_bytes_per_value;
    // The output head's gradient appears as soon as the backward pass starts.
    let mut head_gradient = if setup.method == Method::Full {
        output_head_parameters(model) * gradient_bytes_per_value
    } else {
        0.0
    };
    if sharded_gradients {
        gradients /= shards;
        head_gradient /= shards;
    }

    let mut optimizer = optimizer_bytes(model, setup, &counts);
    let mut step_temporaries = optimizer_step_temporaries(setup, &counts);
    if sharded_optimizer {
        optimizer /= shards;
        step_temporaries /= shards;
    }
    if setup.offload != Offload::None {
        optimizer = 0.0;
        step_temporaries = 0.0;
    }

    let mut activations = activation_profile(&model.architecture, setup);
    // The largest tensor that comes and goes: one of the loss's (its gradient is the size of
    // its log-softmax).
    let loss_tensor = activations.backward_start / 2.0;
    if matches!(setup.method, Method::Qlora { .. }) {
        // bitsandbytes dequantizes a 4-bit weight to 16 bits for each matmul, forward and
        // backward: one block's largest matrix at a time.
        let largest = model
            .lora_target_shapes(super::model::LoraTargets::AllLinear)
            .iter()
            .map(|(inputs, outputs)| (inputs * outputs) as f64)
            .fold(0.0, f64::max);
        activations.backward_start += 2.0 * largest;
        activations.recomputed_block += 2.0 * largest;
    }
    // Accumulating gradients are held through every later micro-batch's forward and backward.
    let held_gradients = if setup.gradient_accumulation_steps > 1 {
        gradients
    } else {
        0.0
    };
    // Under checkpointing the blocks keep no 16-bit weight copies (they are recast when a block
    // is recomputed); the head's copy stays.
    if setup.checkpointing == Checkpointing::Full && autocast_copies > 0.0 {
        autocast_copies = 2.0 * output_head_parameters(model).min(counts.total);
    }
    // The head's backward pass makes its weight gradient after the loss's tensors are freed;
    // under autocast the 16-bit gradient of the weight's copy comes first, then its fp32 cast.
    let head_gradient_cast = if autocast_copies > 0.0 {
        2.0 * output_head_parameters(model)
    } else {
        0.0
    };
    let persistent_bytes = weights + autocast_copies + optimizer;
    let backward_gradients_bytes = held_gradients.max(head_gradient);
    let after_loss_activations_bytes = activations.saved - activations.loss_saved;
    let mut moments = vec![
        Moment {
            phase: Phase::Forward,
            persistent_bytes,
            gradients_bytes: held_gradients,
            activations_bytes: activations.saved,
            temporaries_bytes: activations.loss_temporaries,
        },
        Moment {
            phase: Phase::Backward,
            persistent_bytes,
            gradients_bytes: held_gradients,
            activations_bytes: activations.saved,
            temporaries_bytes: activations.backward_start,
        },
        Moment {
            phase: Phase::Backward,
            persistent_bytes,
            gradients_bytes: backward_gradients_bytes,
            activations_bytes: after_loss_activations_bytes,
            temporaries_bytes: activations.logits_gradient + head_gradient_cast,
        },
        Moment {
            phase: Phase::Backward,
            persistent_bytes,
            gradients_bytes: backward_gradients_bytes,
            activations_bytes: after_loss_activations_bytes,
            temporaries_bytes: activations.recomputed_block,
        },
        Moment {
            phase: Phase::OptimizerStep,
            persistent_bytes: weights + optimizer,
            gradients_bytes: gradients,
            activations_bytes: 0.0,
            temporaries_bytes: step_temporaries,
        },
    ];
    if let Architecture::Cnn(config) = &model.architecture {
        let stored = CnnStored {
            weights_bytes: weights,
            optimizer_bytes: optimizer,
            held_gradients_bytes: held_gradients,
            autocast: autocast_copies > 0.0,
            gradient_bytes_per_value,
            trainable_parameters: counts.trainable,
        };
        moments.extend(cnn_backward_moments(config, setup, &stored));
    }
    let phase_peak = |phase: Phase| {
        moments
            .iter()
            .filter(|moment| moment.phase == phase)
            .map(Moment::total_bytes)
            .fold(0.0, f64::max)
    };
    let peak = largest_moment(&moments);
    let peak_phase = peak.phase;
    let gradients_at_peak = peak.gradients_bytes;
    let activations_at_peak = peak.activations_bytes;
    let temporaries_at_peak = peak.temporaries_bytes;
    // What the peak's moment holds beyond the stored weights and the optimizer states.
    let copies_at_peak = (peak.persistent_bytes - weights - optimizer).max(0.0);
    let weights_at_peak = weights + copies_at_peak;
    let tensors = peak.total_bytes();
    let allocator_reserve = if sharded_parameters || setup.offload != Offload::None {
        // No sharded or offloaded run was measured on a GPU here: their reserve keeps the
        // share fit to the published FSDP and offload points (each block's gathered
        // parameters are freed and gathered again), unless the user gives one.
        let persistent = weights + optimizer;
        match setup.overheads.allocator_reserve_fraction {
            Some(fraction) if fraction.is_finite() => fraction.clamp(0.0, 10.0) * tensors,
            _ => {
                SHARDED_RESERVE_SHARE
                    * ((tensors - persistent).max(0.0) + SHARDED_PERSISTENT_SHARE * persistent)
            }
        }
    } else {
        allocator_reserve_bytes(&setup.overheads, tensors, loss_tensor)
    };
    // The allocator's reserve is margin enough where the count holds (a capped run gives back
    // its cache before it fails); CNNs' live tensors were up to 3.7 % above the count.
    // The allocator's reserve is margin enough where the count holds (a capped run gives back
    // its cache before it fails), except where the measurements show otherwise.
    let (safety_margin, safety_margin_for) = if matches!(model.architecture, Architecture::Cnn(_)) {
        // CNNs' live tensors were up to 3.7 % above the count.
        (
            CNN_SAFETY_MARGIN * tensors,
            Some(SafetyMargin::CnnWorkspaces),
        )
    } else if setup.method == Method::Full
        && setup.overheads.allocator == Allocator::Default
        && setup.overheads.allocator_reserve_fraction.is_none()
        && !sharded_parameters
        && setup.offload == Offload::None
    {
        // A full fine-tune's fp32 logits and loss come and go every step; with the default
        // allocator their freed blocks are split for smaller requests, and the next large one
        // takes a new segment. Where they dominate, the hole outgrows the counted reserve.
        let hole = LOSS_HOLE_SHARE * loss_tensor - allocator_reserve;
        if hole > 0.0 {
            (hole, Some(SafetyMargin::LossHole))
        } else {
            (0.0, None)
        }
    } else {
        (0.0, None)
    };
    let overhead = setup.overheads.cuda_context_bytes as f64 + allocator_reserve;
    Ok(MemoryBreakdown {
        weights: to_bytes(weights_at_peak),
        autocast_copies: to_bytes(copies_at_peak),
        gradients: to_bytes(gradients_at_peak),
        optimizer: to_bytes(optimizer),
        activations: to_bytes(activations_at_peak),
        temporaries: to_bytes(temporaries_at_peak),
        overhead: to_bytes(overhead),
        allocator_reserve: to_bytes(allocator_reserve),
        cuda_context: setup.overheads.cuda_context_bytes,
        safety_margin: to_bytes(safety_margin),
        safety_margin_for,
        peak_phase,
        phases: PhasePeaks {
            forward: to_bytes(phase_peak(Phase::Forward)),
            backward: to_bytes(phase_peak(Phase::Backward)),
            optimizer_step: to_bytes(phase_peak(Phase::OptimizerStep)),
        },
    })
}

/// One moment of a training step the peak can fall at and what it holds, in bytes (fractional
/// while estimating; rounded once in the breakdown).
#[derive(Debug, Clone, Copy)]
struct Moment {
    phase: Phase,
    /// Stored weights, the optimizer's states and autocast's 16-bit copies live at the moment.
    persistent_bytes: f64,
    gradients_bytes: f64,
    activations_bytes: f64,
    temporaries_bytes: f64,
}

impl Moment {
    fn total_bytes(&self) -> f64 {
        self.persistent_bytes
            + self.gradients_bytes
            + self.activations_bytes
            + self.temporaries_bytes
    }
}

/// The first moment holding the most (a later one must hold strictly more to win).
fn largest_moment(moments: &[Moment]) -> Moment {
    let first = moments.first().copied().unwrap_or(Moment {
        phase: Phase::Forward,
        persistent_bytes: 0.0,
        gradients_bytes: 0.0,
        activations_bytes: 0.0,
        temporaries_bytes: 0.0,
    });
    moments.iter().copied().fold(first, |best, next| {
        if next.total_bytes() > best.total_bytes() {
            next
        } else {
            best
        }
    })
}

/// What a CNN's backward moments start from: the step's stored bytes.
struct CnnStored {
    weights_bytes: f64,
    optimizer_bytes: f64,
    held_gradients_bytes: f64,
    /// Whether autocast keeps 16-bit copies of the weights between forward and backward.
    autocast: bool,
    gradient_bytes_per_value: f64,
    trainable_parameters: f64,
}

/// A CNN's backward pass frees each stage's activations as it passes and leaves its gradients
/// behind: while it works through stage s, the stem's and stages 0..=s's tensors (and
/// autocast's copies of their weights) and every later gradient coexist.
fn cnn_backward_moments(
    config: &super::model::CnnConfig,
    setup: &TrainingSetup,
    stored: &CnnStored,
) -> Vec<Moment> {
    let types = super::value_types::Types::of(setup);
    super::cnn::backward_prefixes(
        config,
        setup.sequence_length as f64,
        setup.micro_batch as f64,
        types,
    )
    .into_iter()
    .map(|prefix| {
        let copies_bytes = if stored.autocast {
            2.0 * prefix.parameters
        } else {
            0.0
        };
        let later_gradients_bytes = (stored.trainable_parameters - prefix.parameters).max(0.0)
            * stored.gradient_bytes_per_value;
        Moment {
            phase: Phase::Backward,
            persistent_bytes: stored.weights_bytes + copies_bytes + stored.optimizer_bytes,
            gradients_bytes: stored.held_gradients_bytes.max(later_gradients_bytes),
            activations_bytes: prefix.saved_bytes,
            temporaries_bytes: 0.0,
        }
    })
    .collect()
}

/// The default allocator's reserve beyond the live tensors at the peak, as a share of them:
/// blocks a step frees are cached and split for smaller requests, so the step's largest ones
/// take new segments. Fit to real steps on an H200 (tests/data/planner_cuda, docs/planner.md).
pub const DEFAULT_RESERVE_SHARE: f64 = 0.114;
/// With expandable segments: a small share of the live tensors ...
pub const EXPANDABLE_RESERVE_SHARE: f64 = 0.016;
/// ... and the hole the loss's largest tensor leaves when it is freed inside the segment and a
/// later, larger request cannot use it (fit to the same steps).
pub const EXPANDABLE_LOSS_HOLE_SHARE: f64 = 0.55;

const MIB: f64 = 1024.0 * 1024.0;

/// Sharded (FSDP, ZeRO-3) and offloaded runs: the reserve as a share of what a step allocates
/// and frees, and of that share on the weights and optimizer states (fit to the published
/// points, tests/data/planner_measurements.toml).
pub const SHARDED_RESERVE_SHARE: f64 = 0.25;
pub const SHARDED_PERSISTENT_SHARE: f64 = 0.65;

/// Kept free beyond a full fine-tune's total with the default allocator, as a share of the
/// loss's largest tensor, less the reserve already counted: what the default allocator held
/// beyond the live tensors was up to 1.40 times that tensor in the full fine-tunes measured on
/// a real GPU (GPT-2 medium, checkpointed; the loss's fp32 tensors are 16 % of its live
/// tensors), and a Qwen2 full fine-tune whose reserve the share undercounts was recommended
/// one micro-batch above the largest that ran (docs/planner.md).
pub const LOSS_HOLE_SHARE: f64 = 1.4;

/// Why a plan keeps memory free beyond its total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SafetyMargin {
    /// A CNN's cuDNN workspaces, which the count does not include.
    CnnWorkspaces,
    /// The hole a full fine-tune's freed fp32 loss tensors leave in the default allocator.
    LossHole,
}

impl SafetyMargin {
    /// What the margin is for, in words (after "kept free for").
    pub fn describe(self) -> String {
        match self {
            SafetyMargin::CnnWorkspaces => format!(
                "cuDNN's workspaces ({:.0} % of a CNN's live tensors)",
                CNN_SAFETY_MARGIN * 100.0
            ),
            SafetyMargin::LossHole => format!(
                "the hole the fp32 logits and loss leave in PyTorch's default allocator ({LOSS_HOLE_SHARE:.1} times the loss's largest tensor, less the reserve counted; expandable segments need none)"
            ),
        }
    }
}

/// Kept free beyond a CNN's total, as a share of its live tensors: on a real GPU, ResNet-50's
/// and ConvNeXt-tiny's were 1.6 % and 3.7 % above the count (cuDNN's workspaces are not
/// counted), and a ConvNeXt run at the largest micro-batch that fits has no other slack.
/// Transformers' counts were within 0.7 %: they need none.
pub const CNN_SAFETY_MARGIN: f64 = 0.04;

/// What the caching allocator holds beyond `tensors` (the live tensors at the step's peak):
/// its segments rounded (2 MiB blocks; expandable segments map 20 MiB pages) and what the
/// step's frees leave unusable. `loss_tensor` is the step's largest tensor that comes and goes.
pub fn allocator_reserve_bytes(overheads: &Overheads, tensors: f64, loss_tensor: f64) -> f64 {
    let tensors = tensors.max(0.0);
    let (extra, page) = match (overheads.allocator_reserve_fraction, overheads.allocator) {
        (Some(fraction), _) if fraction.is_finite() => (fraction.clamp(0.0, 10.0) * tensors, 2.0),
        (_, Allocator::Default) => (DEFAULT_RESERVE_SHARE * tensors, 2.0),
        (_, Allocator::ExpandableSegments) => (
            EXPANDABLE_RESERVE_SHARE * tensors + EXPANDABLE_LOSS_HOLE_SHARE * loss_tensor.max(0.0),
            20.0,
        ),
    };
    let reserved = ((tensors + extra) / (page * MIB)).ceil() * page * MIB;
    (reserved - tensors).max(0.0)
}

/// Parameters autocast casts for matmuls: every linear and conv weight, the output head
/// included, but not the input embedding table (an embedding lookup is not cast) nor norms.
fn castable_parameters(model: &Model) -> f64 {
    let block_linears = model.block_linear_parameter_count() as f64;
    match &model.architecture {
        Architecture::Transformer(config) => {
            let encoder_transform = if config.kind == super::model::TransformerKind::EncoderOnly {
                (config.hidden_size * config.hidden_size) as f64
            } else {
                0.0
            };
            block_linears + output_head_parameters(model) + encoder_transform
        }
        Architecture::Vit(config) => {
            let patch = 3 * config.patch_size * config.patch_size * config.hidden_size;
            block_linears + (patch + config.hidden_size * config.classes) as f64
        }
        Architecture::Cnn(_) => model.parameter_count() as f64,
    }
}

/// The language-model head's matrix (the tied embedding table when tied).
fn output_head_parameters(model: &Model) -> f64 {
    match &model.architecture {
        Architecture::Transformer(config) => (config.vocab_size * config.hidden_size) as f64,
        Architecture::Vit(config) => (config.hidden_size * config.classes) as f64,
        Architecture::Cnn(_) => 0.0,
    }
}

/// What `optimizer.step()` allocates beyond the states: PyTorch's default (foreach) AdamW
/// takes the square root of every second moment at once, a temporary the size of that state.
/// Fused AdamW (Hugging Face Trainer's default `adamw_torch_fused`) allocates none.
fn optimizer_step_temporaries(setup: &TrainingSetup, counts: &ParameterCounts) -> f64 {
    match setup.optimizer {
        Optimizer::Adamw => trained_value_bytes(setup) * counts.trainable,
        _ => 0.0,
    }
}

/// Bytes of a trained parameter's gradient and of each optimizer state: pure bf16 full
/// training keeps them in bf16; PEFT keeps LoRA adapters (and so their gradients and states)
/// in fp32 whatever the frozen model's type.
fn trained_value_bytes(setup: &TrainingSetup) -> f64 {
    if setup.precision == Precision::Bf16 && setup.method == Method::Full {
        2.0
    } else {
        4.0
    }
}

fn is_mixed(precision: Precision) -> bool {
    matches!(precision, Precision::Fp16Mixed | Precision::Bf16Mixed)
}

fn to_bytes(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value.min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// Weights on the GPU before sharding (autocast's copies are counted apart).
fn weight_bytes(model: &Model, setup: &TrainingSetup, counts: &ParameterCounts) -> f64 {
    let frozen = counts.total;
    let adapters = 4.0 * counts.trainable;
    match (setup.method, setup.precision) {
        // fp32 master weights (autocast's 16-bit copies are counted apart).
        (Method::Full, Precision::Fp32 | Precision::Fp16Mixed | Precision::Bf16Mixed) => {
            4.0 * counts.total
        }
        (Method::Full, Precision::Bf16) => 2.0 * counts.total,
        (Method::Lora { .. }, Precision::Fp32) => 4.0 * frozen + adapters,
        (Method::Lora { .. }, _) => 2.0 * frozen + adapters,
        (
            Method::Qlora {
                double_quantization,
                ..
            },
            _,
        ) => {
            let quantized = (model.block_linear_parameter_count() as f64).min(counts.total);
            // NF4: half a byte per weight, plus one absmax per 64 weights: fp32, or with double
            // quantization 8 bits plus an fp32 constant per 256 blocks.
            let constants = if double_quantization {
                1.0 / 64.0 + 4.0 / (64.0 * 256.0)
            } else {
                4.0 / 64.0
            };
            quantized * (0.5 + constants) + 2.0 * (counts.total - quantized) + adapters
        }
    }
}

/// Optimizer state before sharding.
fn optimizer_bytes(model: &Model, setup: &TrainingSetup, counts: &ParameterCounts) -> f64 {
    let state_value = trained_value_bytes(setup);
    match setup.optimizer {
        Optimizer::Adamw | Optimizer::AdamwFused => 2.0 * state_value * counts.trainable,
        // bitsandbytes: two 8-bit states per parameter plus a float per 2048-value block.
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => counts.trainable * (2.0 + 8.0 / 2048.0),
        Optimizer::Adafactor => adafactor_bytes(model, setup, counts),
        Optimizer::Sgd => 0.0,
        Optimizer::SgdMomentum => state_value * counts.trainable,
    }
}

/// Adafactor keeps a row and a column statistic per matrix instead of a full second moment.
fn adafactor_bytes(model: &Model, setup: &TrainingSetup, counts: &ParameterCounts) -> f64 {
    let shapes = model.lora_target_shapes(super::model::LoraTargets::AllLinear);
    let factored: f64 = match setup.method {
        Method::Full => shapes
            .iter()
            .map(|(inputs, outputs)| (inputs + outputs) as f64)
            .sum(),
        Method::Lora { rank, targets } | Method::Qlora { rank, targets, .. } => model
            .lora_target_shapes(targets)
            .iter()
            .map(|(inputs, outputs)| (2 * rank + inputs + outputs) as f64)
            .sum(),
    };
    let in_matrices: f64 = shapes
        .iter()
        .map(|(inputs, outputs)| (inputs * outputs) as f64)
        .sum();
    // Embeddings and the like: treat them as one factored matrix of their square root's sides.
    let rest = if setup.method == Method::Full {
        (counts.total - in_matrices).max(0.0)
    } else {
        0.0
    };
    4.0 * (factored + 2.0 * rest.sqrt())
}

/// FSDP / ZeRO-3 gather one block's full parameters (and prefetch the next) in 16 bits.
fn gather_buffer_bytes(model: &Model, total_parameters: f64) -> f64 {
    let blocks = match &model.architecture {
        Architecture::Transformer(config) => config.layers as f64,
        Architecture::Vit(config) => config.layers as f64,
        Architecture::Cnn(_) => 1.0,
    };
    2.0 * 2.0 * total_parameters / blocks.max(1.0)
}
