//! What a training step stores on one GPU from start to end: the weights (and autocast's
//! 16-bit copies of them), the gradients and the optimizer's states, after sharding and
//! offload. Bytes-per-parameter rules and their sources are in docs/planner.md.

use super::ParameterCounts;
use crate::plan::model::{Architecture, Model, TransformerKind};
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Checkpointing, Method, Offload, Optimizer, Precision, Sharding, TrainingSetup,
};

/// The stored bytes of one GPU, fractional while estimating.
#[derive(Debug, Clone, Copy)]
pub(super) struct StoredState {
    /// Parameters as stored on this GPU, gather buffers included.
    pub weights_bytes: f64,
    /// Autocast's 16-bit copies of the weights, held between a layer's forward and backward
    /// pass.
    pub autocast_copies_bytes: f64,
    /// Every trained parameter's gradient on this GPU.
    pub gradients_bytes: f64,
    /// The output head's gradient, which appears as soon as the backward pass starts.
    pub head_gradient_bytes: f64,
    /// The optimizer's states on this GPU.
    pub optimizer_bytes: f64,
    /// What `optimizer.step()` allocates beyond its states.
    pub step_temporaries_bytes: f64,
    /// Bytes of one trained parameter's gradient.
    pub gradient_bytes_per_value: f64,
}

/// Whether each GPU holds only its share of the parameters (FSDP, ZeRO-3).
pub(super) fn shards_parameters(setup: &TrainingSetup) -> bool {
    matches!(setup.sharding, Sharding::Fsdp | Sharding::Zero3)
}

/// The weights, gradients and optimizer states one GPU stores for the whole step.
pub(super) fn stored_state(
    model: &Model,
    setup: &TrainingSetup,
    counts: &ParameterCounts,
) -> StoredState {
    let shards = setup.shards() as f64;
    let sharded_parameters = shards_parameters(setup);
    let sharded_gradients = sharded_parameters || setup.sharding == Sharding::Zero2;
    let sharded_optimizer = sharded_gradients || setup.sharding == Sharding::Zero1;

    let mut weights = weight_bytes(model, setup, counts);
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
    // Under checkpointing the blocks keep no 16-bit weight copies (they are recast when a block
    // is recomputed); the head's copy stays.
    if setup.checkpointing == Checkpointing::Full && autocast_copies > 0.0 {
        autocast_copies = 2.0 * output_head_parameters(model).min(counts.total);
    }

    let gradient_bytes_per_value = trained_value_bytes(setup);
    let mut gradients = counts.trainable * gradient_bytes_per_value;
    let mut head_gradient = if setup.method == Method::Full {
        output_head_parameters(model) * gradient_bytes_per_value
    } else {
        0.0
    };
    if sharded_gradients {
        gradients /= shards;
        head_gradient /= shards;
    }

    let mut optimizer = optimizer_bytes(model, setup, counts);
    let mut step_temporaries = optimizer_step_temporaries(setup, counts);
    if sharded_optimizer {
        optimizer /= shards;
        step_temporaries /= shards;
    }
    if setup.offload != Offload::None {
        optimizer = 0.0;
        step_temporaries = 0.0;
    }
    StoredState {
        weights_bytes: weights,
        autocast_copies_bytes: autocast_copies,
        gradients_bytes: gradients,
        head_gradient_bytes: head_gradient,
        optimizer_bytes: optimizer,
        step_temporaries_bytes: step_temporaries,
        gradient_bytes_per_value,
    }
}

/// Parameters autocast casts for matmuls: every linear and conv weight, the output head
/// included, but not the input embedding table (an embedding lookup is not cast) nor norms.
fn castable_parameters(model: &Model) -> f64 {
    let block_linears = model.block_linear_parameter_count() as f64;
    match &model.architecture {
        Architecture::Transformer(config) => {
            let encoder_transform = if config.kind == TransformerKind::EncoderOnly {
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
pub(super) fn output_head_parameters(model: &Model) -> f64 {
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
    let shapes = model.lora_target_shapes(LoraTargets::AllLinear);
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
