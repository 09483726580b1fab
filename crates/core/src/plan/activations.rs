//! Activation memory: what the forward pass keeps for the backward pass, tensor by tensor, per
//! family (which tensors Hugging Face's modelling code leaves to autograd, in which type), plus
//! the loss's tensors and what checkpointing and offloading change. CNNs are counted from their
//! stages in `cnn`. Every rule is in docs/planner.md and held to measured training steps
//! (crates/core/tests/planner/plan_calibration.rs).

use super::family::{Family, GeluKind};
use super::model::{Architecture, MlpKind, TransformerConfig};
use super::value_types::Types;
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{Attention, Checkpointing, Method, Task, TrainingSetup};

/// Activation bytes of one training step at its three moments.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ActivationProfile {
    /// Kept for the backward pass at the end of the forward pass, the loss's saved tensors
    /// included.
    pub saved: f64,
    /// Added at the start of the backward pass: the gradients of the loss's logits.
    pub backward_start: f64,
    /// Under checkpointing: one block recomputed during the backward pass, beside `saved`
    /// (the loss's tensors are gone by then).
    pub recomputed_block: f64,
    /// The part of `saved` that belongs to the loss (freed before any block is recomputed).
    pub loss_saved: f64,
    /// The gradient of the logits in the output head's type, live when the head's backward
    /// pass makes the head's weight gradient (the loss's tensors are gone by then).
    pub logits_gradient: f64,
    /// Beside `saved`, while the loss is computed at the end of the forward pass: the logits
    /// and their fp32 copy, which only the log-softmax's output outlives.
    pub loss_temporaries: f64,
}

/// Bytes of activations one GPU holds through a training step.
pub fn activation_profile(architecture: &Architecture, setup: &TrainingSetup) -> ActivationProfile {
    let batch = setup.micro_batch as f64;
    let types = Types::of(setup);
    match architecture {
        Architecture::Transformer(config) => {
            let shape = Shape {
                adapters: adapter_targets(setup),
                ..Shape::text(config)
            };
            transformer_profile(&shape, setup.sequence_length as f64, batch, types, setup)
        }
        Architecture::Vit(config) => {
            let patches = (setup.sequence_length / config.patch_size.max(1)).pow(2) as f64;
            let shape = Shape {
                adapters: adapter_targets(setup),
                ..Shape::vit(config)
            };
            // The image, and the patch embedding's input copy under autocast.
            let pixels = 3.0 * (setup.sequence_length as f64).powi(2) * batch;
            // The images arrive in the weights' type; autocast gives the patch conv a copy.
            let image =
                pixels * (types.residual + if types.autocast { types.compute } else { 0.0 });
            let mut profile = transformer_profile(&shape, patches + 1.0, batch, types, setup);
            profile.saved += image;
            profile
        }
        Architecture::Cnn(config) => ActivationProfile {
            saved: super::cnn::cnn_bytes(config, setup.sequence_length as f64, batch, types),
            ..ActivationProfile::default()
        },
    }
}

fn adapter_targets(setup: &TrainingSetup) -> Option<LoraTargets> {
    match setup.method {
        Method::Full => None,
        Method::Lora { targets, .. } | Method::Qlora { targets, .. } => Some(targets),
    }
}

/// The transformer shape that matters for activations.
struct Shape {
    family: Family,
    layers: f64,
    hidden: f64,
    query_width: f64,
    kv_width: f64,
    heads: f64,
    intermediate: f64,
    gated: bool,
    dropout: bool,
    encoder: bool,
    /// Rotary positions: q and k are rewritten as new tensors before attention.
    rotary: bool,
    /// Eager softmax runs in fp32 whatever the compute type (`softmax(..., dtype=float32)`).
    softmax_upcast: bool,
    /// Vocabulary for the language-model logits; 0 for a classifier.
    vocab: f64,
    /// LoRA / QLoRA: which linear layers carry adapters; `None` when every weight trains.
    adapters: Option<LoraTargets>,
}

impl Shape {
    fn text(config: &TransformerConfig) -> Shape {
        Shape {
            family: config.family,
            layers: config.layers as f64,
            hidden: config.hidden_size as f64,
            query_width: config.query_width() as f64,
            kv_width: config.kv_width() as f64,
            heads: config.attention_heads as f64,
            intermediate: config.intermediate_size as f64,
            gated: config.mlp == MlpKind::SwiGlu,
            dropout: config.dropout,
            encoder: config.kind == super::model::TransformerKind::EncoderOnly,
            rotary: !matches!(config.family, Family::Gpt2 | Family::Bert | Family::Roberta),
            softmax_upcast: !matches!(config.family, Family::Gpt2 | Family::Bert | Family::Roberta),
            vocab: config.vocab_size as f64,
            adapters: None,
        }
    }

    fn vit(config: &super::model::VitConfig) -> Shape {
        let hidden = config.hidden_size as f64;
        Shape {
            // Pre-LayerNorm, separate q/k/v, a fused GELU: laid out like BERT's blocks.
            family: Family::Bert,
            layers: config.layers as f64,
            hidden,
            query_width: hidden,
            kv_width: hidden,
            heads: config.attention_heads as f64,
            intermediate: config.intermediate_size as f64,
            gated: false,
            dropout: false,
            encoder: false,
            rotary: false,
            softmax_upcast: true,
            vocab: 0.0,
            adapters: None,
        }
    }

    fn layer_norms(&self) -> bool {
        matches!(
            self.family,
            Family::Gpt2 | Family::Bert | Family::Roberta | Family::Phi | Family::GptNeox
        )
    }
}

/// Bytes a norm keeps per value of its input, and the bytes of its output's type.
fn norm_bytes(shape: &Shape, types: Types) -> (f64, f64) {
    if shape.layer_norms() {
        // LayerNorm keeps its input (autocast runs it in fp32: an fp32 copy of a 16-bit
        // input) and returns fp32 under autocast.
        if types.autocast {
            (4.0, 4.0)
        } else {
            (types.residual, types.residual)
        }
    } else if matches!(
        shape.family,
        Family::Gemma | Family::Gemma2 | Family::Gemma3
    ) {
        // Gemma's RMSNorm: the fp32 input and the fp32 normalized value (for (1 + weight);
        // a frozen weight needs no normalized value).
        let normalized = if shape.adapters.is_some() { 0.0 } else { 4.0 };
        (4.0 + normalized, types.residual)
    } else {
        // Hugging Face's RMSNorm: its input upcast to fp32, and the normalized value cast back
        // to the input's type (for the weight multiply, when the weight trains).
        let normalized = if shape.adapters.is_some() {
            0.0
        } else {
            types.residual
        };
        (4.0 + normalized, types.residual)
    }
}

/// Bytes per position that `consumers` linear layers keep of one input of `width` values in
/// type `bytes`: a 16-bit copy each under autocast when the input is fp32, else the input.
fn linear_inputs(width: f64, bytes: f64, consumers: f64, types: Types) -> f64 {
    if types.autocast && bytes > types.compute {
        width * types.compute * consumers
    } else {
        width * bytes
    }
}

/// One block's saved bytes per position, without the attention scores.
fn block_bytes(shape: &Shape, types: Types, attention: Attention) -> f64 {
    let c = types.compute;
    let (hidden, query, kv) = (shape.hidden, shape.query_width, shape.kv_width);
    let family = shape.family;
    let (norm_saved, norm_out) = norm_bytes(shape, types);
    let norm_count = family.norms_per_block() as f64;
    // GPT-NeoX's two LayerNorms read the same block input: kept once unless autocast makes
    // each its own fp32 copy.
    let shared_input =
        family.parallel_block() && norm_count == 2.0 && !(types.autocast && types.residual < 4.0);
    let norms = if shared_input {
        norm_saved * hidden
    } else {
        norm_count * norm_saved * hidden
    };

    // Attention inputs: q, k and v read the first norm's output (one fused layer, or three).
    let qkv_consumers = if family.fused_qkv() { 1.0 } else { 3.0 };
    let mlp_consumers = match (shape.gated, family.fused_gate_up()) {
        (true, false) => 2.0,
        _ => 1.0,
    };
    let inputs = match shape.adapters {
        None if family.parallel_block() && family.norms_per_block() == 1 => {
            // Phi: one norm output feeds q, k, v and the MLP.
            linear_inputs(hidden, norm_out, qkv_consumers + mlp_consumers, types)
        }
        None => {
            linear_inputs(hidden, norm_out, qkv_consumers, types)
                + linear_inputs(hidden, norm_out, mlp_consumers, types)
        }
        Some(targets) => adapter_inputs(shape, types, targets, norm_out),
    };

    let qkv = match attention {
        // The fused kernels keep q, k and v as given: rotary embeddings made new q and k; a
        // fused projection's v (and q, k without rotary) is a view that keeps the whole fused
        // output alive.
        Attention::Sdpa | Attention::Flash => match (family.fused_qkv(), shape.rotary) {
            (true, true) => c * (query + 2.0 * kv) + c * (query + kv),
            _ => c * (query + 2.0 * kv),
        },
        // Eager batched matmuls keep their own contiguous copies of q, of k and v repeated
        // to every head, not the projections' outputs.
        Attention::Eager => 3.0 * c * query,
    };
    let query_key_norms = if family.query_key_norms() {
        // A per-head RMSNorm on q and k: the fp32 upcast and, when its weight trains, the
        // normalized 16-bit value.
        let normalized = if shape.adapters.is_some() { 0.0 } else { c };
        (4.0 + normalized) * (query + kv)
    } else {
        0.0
    };
    // The attention output, kept by the kernel (or, eager, by the merged-heads copy) and read
    // by o_proj as the same storage: fused kernels return it laid out so merging the heads is
    // a view.
    let output = c * query;
    let mlp = mlp_bytes(shape, types);
    // A frozen down projection keeps no input; an adapted one's input is in `inputs`.
    let down_input = if shape.adapters.is_some() {
        c * shape.intermediate
    } else {
        0.0
    };
    let dropout_masks = if shape.dropout { 2.0 * hidden } else { 0.0 };
    norms + inputs + qkv + query_key_norms + output + mlp - down_input + dropout_masks
}

/// What LoRA adapters keep of their inputs: PEFT casts an adapter's input to the adapter's
/// fp32 type, so every adapter keeps its own copy (16-bit under autocast, else fp32); in fp32
/// training adapters reading the same tensor keep it once. Frozen layers keep nothing for
/// their weights.
fn adapter_inputs(shape: &Shape, types: Types, targets: LoraTargets, norm_out: f64) -> f64 {
    let family = shape.family;
    let (hidden, query, c) = (shape.hidden, shape.query_width, types.compute);
    let qkv_modules = if family.fused_qkv() { 1.0 } else { 3.0 };
    // (input width, adapted modules reading it, its bytes, whether it is kept anyway)
    let mut widths = vec![
        (hidden, qkv_modules, norm_out, false),
        // o_proj's input is the attention output, which attention keeps.
        (query, 1.0, c, true),
    ];
    if targets == LoraTargets::AllLinear {
        let up_modules = match (shape.gated, family.fused_gate_up()) {
            (true, false) => 2.0,
            _ => 1.0,
        };
        widths.push((hidden, up_modules, norm_out, false));
        widths.push((shape.intermediate, 1.0, c, false));
    }
    widths
        .into_iter()
        .map(|(width, modules, bytes, kept_anyway)| {
            if types.autocast {
                width * c * modules
            } else if bytes < 4.0 {
                // PEFT keeps adapters in fp32: a 16-bit input is cast to an fp32 copy each.
                width * 4.0 * modules
            } else if kept_anyway {
                0.0
            } else {
                width * bytes
            }
        })
        .sum()
}

/// The MLP's saved bytes per position after its input copies.
fn mlp_bytes(shape: &Shape, types: Types) -> f64 {
    let c = types.compute;
    let width = shape.intermediate;
    if shape.gated {
        // gate (kept by the activation), activation output, up, and their product.
        return 4.0 * c * width;
    }
    match shape.family.gelu() {
        // The up projection's output (kept by the GELU) and the GELU's output.
        GeluKind::Fused => 2.0 * c * width,
        GeluKind::PythonTanh => {
            // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): autocast runs pow in fp32, so pow
            // keeps its fp32 copy of x (not x itself) and the tanh and its sum are fp32; kept:
            // x (as pow's input), tanh(...), 0.5·x, 1 + tanh(...), and the down projection's
            // copy of the product.
            let wide = if types.autocast { 4.0 } else { c };
            width * (wide + wide + c + wide + c)
        }
    }
}

/// Bytes per position of a block's attention scores (eager) or log-sum-exp (fused kernels).
fn score_bytes(shape: &Shape, tokens: f64, types: Types, attention: Attention) -> f64 {
    match attention {
        Attention::Eager => {
            let per_position = shape.heads * tokens;
            // The softmax keeps its output: fp32 when the family asks for it or autocast runs
            // softmax in fp32, else the compute type.
            let softmax = if shape.softmax_upcast || types.autocast {
                4.0
            } else {
                types.compute
            };
            // The matmul with V keeps the probabilities in the compute type: a cast of the
            // softmax, or with dropout the dropout's output (and its 1-byte mask).
            let probabilities = if shape.dropout {
                1.0 + types.compute
            } else if softmax > types.compute {
                types.compute
            } else {
                0.0
            };
            // Gemma 2 soft-caps the scores with a tanh, which keeps its output.
            let softcap = if shape.family.logit_softcapping() {
                types.compute
            } else {
                0.0
            };
            per_position * (softmax + probabilities + softcap)
        }
        Attention::Sdpa | Attention::Flash => shape.heads * 4.0,
    }
}

fn transformer_profile(
    shape: &Shape,
    tokens: f64,
    batch: f64,
    types: Types,
    setup: &TrainingSetup,
) -> ActivationProfile {
    let positions = tokens * batch;
    let one_block = positions
        * (block_bytes(shape, types, setup.attention)
            + score_bytes(shape, tokens, types, setup.attention));
    let block_input = positions * shape.hidden * types.residual;
    let (blocks, recomputed_block) = match (setup.checkpointing, setup.activation_offload) {
        (Checkpointing::None, false) => (shape.layers * one_block, 0.0),
        // Offloading: the block being computed and the one prefetched stay on the GPU.
        (Checkpointing::None, true) => (shape.layers.min(2.0) * one_block, 0.0),
        // Each block's input is kept; one block is recomputed at a time in the backward pass.
        (Checkpointing::Full, false) => (shape.layers * block_input, one_block),
        (Checkpointing::Full, true) => (shape.layers.min(2.0) * block_input, one_block),
    };

    let (norm_saved, norm_out) = norm_bytes(shape, types);
    let mut embedding = positions * shape.hidden * embedding_bytes(shape, types);
    if let (Some(targets), Checkpointing::None) = (shape.adapters, setup.checkpointing) {
        // Nothing before the first adapter needs a gradient: the first block's norm keeps
        // nothing, nor, when attention and MLP sit side by side, an MLP without adapters
        // (its only way back leads to the frozen embeddings).
        embedding -= positions * shape.hidden * norm_saved;
        if shape.family.parallel_block() && targets == LoraTargets::Attention {
            embedding -= positions * (mlp_bytes(shape, types) - types.compute * shape.intermediate);
        }
    }
    let lm = setup.task == Task::LanguageModel && shape.vocab > 0.0;
    // The final norm (pre-norm decoders) and the head's input copy.
    let head = if lm {
        let final_norm = if shape.encoder { 0.0 } else { norm_saved };
        // A frozen head keeps no input.
        let head_input = if shape.adapters.is_some() {
            0.0
        } else {
            linear_inputs(shape.hidden, norm_out, 1.0, types)
        };
        // A masked-LM head runs dense → GELU → LayerNorm before the decoder: the dense layer's
        // input (the last block's output), the GELU's input and the LayerNorm's input.
        let transform = if shape.encoder {
            linear_inputs(shape.hidden, norm_out, 1.0, types)
                + shape.hidden * (types.compute + norm_saved)
        } else {
            0.0
        };
        positions * (shape.hidden * final_norm + head_input + transform)
    } else if shape.encoder {
        0.0
    } else {
        // A classifier reads one token of the final norm's output through a view that keeps
        // the whole output alive (autocast's cast copies only that token).
        let kept_output = if types.autocast { 0.0 } else { norm_out };
        positions * shape.hidden * (norm_saved + kept_output)
    };
    let logits = if lm { positions * shape.vocab } else { 0.0 };
    // Gemma 2 soft-caps the logits with a tanh, which keeps its output.
    let logit_softcap = if shape.family.logit_softcapping() {
        logits * types.compute
    } else {
        0.0
    };
    // The loss keeps its log-softmax; the backward pass starts with its gradient and the
    // gradient of its input, in the same type. Causal-LM losses upcast the logits to fp32
    // first; BERT's masked-LM loss takes them as they are (fp32 under autocast, which runs
    // the loss in fp32). Chunked cross-entropy keeps the 16-bit logits and does the fp32 part
    // one chunk (of 8) at a time.
    let loss_value = if shape.family.loss_upcast() || types.autocast {
        4.0
    } else {
        types.compute
    };
    let upcast = if loss_value > types.compute {
        loss_value
    } else {
        0.0
    };
    let (loss_saved, loss_backward, loss_temporaries) = if setup.chunked_cross_entropy {
        (
            logits * types.compute,
            logits * (types.compute + 3.0 * loss_value / 8.0),
            logits * upcast / 8.0,
        )
    } else {
        (
            logits * loss_value,
            logits * 2.0 * loss_value,
            logits * (types.compute + upcast),
        )
    };
    ActivationProfile {
        saved: blocks + embedding + head + logit_softcap + loss_saved,
        backward_start: loss_backward,
        recomputed_block,
        loss_saved,
        logits_gradient: logits * types.compute,
        loss_temporaries,
    }
}

/// Bytes per position and hidden value the embeddings keep: a dropout mask, and BERT's
/// embedding LayerNorm input.
fn embedding_bytes(shape: &Shape, types: Types) -> f64 {
    let dropout = if shape.dropout { 1.0 } else { 0.0 };
    let layer_norm = if shape.encoder {
        norm_bytes(shape, types).0
    } else {
        0.0
    };
    dropout + layer_norm
}
