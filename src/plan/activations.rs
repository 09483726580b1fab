//! Activation memory: what the forward pass keeps for the backward pass, per architecture.
//! Transformers follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
//! Transformer Models", 34·s·b·h + 5·a·s²·b bytes per GPT layer in 16 bits), generalized to
//! grouped-query attention, SwiGLU MLPs, no dropout and SDPA/flash attention. CNNs are counted
//! tensor by tensor from their stages (docs/planner.md).

use super::model::{Architecture, CnnConfig, MlpKind, RESNET_WIDTHS, TransformerConfig};
use super::setup::{Attention, Checkpointing, Precision, Task, TrainingSetup};

/// The transformer shape that matters for activations.
struct Shape {
    layers: f64,
    hidden: f64,
    kv_width: f64,
    heads: f64,
    intermediate: f64,
    swiglu: bool,
    dropout: bool,
    /// Vocabulary for the language-model logits; 0 for a classifier.
    vocab: f64,
}

/// Bytes of activations one GPU holds at the peak of a training step.
pub fn activation_bytes(architecture: &Architecture, setup: &TrainingSetup) -> f64 {
    let value_bytes = setup.precision.activation_bytes() as f64;
    let batch = setup.micro_batch as f64;
    match architecture {
        Architecture::Transformer(config) => {
            let shape = text_shape(config);
            transformer_bytes(
                &shape,
                setup.sequence_length as f64,
                batch,
                value_bytes,
                setup,
            )
        }
        Architecture::Vit(config) => {
            let patches = (setup.sequence_length / config.patch_size.max(1)).pow(2) as f64;
            let shape = Shape {
                layers: config.layers as f64,
                hidden: config.hidden_size as f64,
                kv_width: config.hidden_size as f64,
                heads: config.attention_heads as f64,
                intermediate: config.intermediate_size as f64,
                swiglu: false,
                dropout: false,
                vocab: 0.0,
            };
            let image = 3.0 * (setup.sequence_length as f64).powi(2) * batch * value_bytes;
            image + transformer_bytes(&shape, patches + 1.0, batch, value_bytes, setup)
        }
        Architecture::Cnn(config) => {
            cnn_bytes(config, setup.sequence_length as f64, batch, setup.precision)
        }
    }
}

fn text_shape(config: &TransformerConfig) -> Shape {
    Shape {
        layers: config.layers as f64,
        hidden: config.hidden_size as f64,
        kv_width: config.kv_width() as f64,
        heads: config.attention_heads as f64,
        intermediate: config.intermediate_size as f64,
        swiglu: config.mlp == MlpKind::SwiGlu,
        dropout: config.dropout,
        vocab: config.vocab_size as f64,
    }
}

/// One transformer layer's saved activations, in bytes.
fn layer_bytes(
    shape: &Shape,
    tokens: f64,
    batch: f64,
    value_bytes: f64,
    norm_bytes: f64,
    attention: Attention,
) -> f64 {
    let positions = tokens * batch;
    let hidden = shape.hidden;
    // QKV input, Q/K/V, attention output (o-proj input), MLP input.
    let dense =
        positions * value_bytes * (hidden + (hidden + 2.0 * shape.kv_width) + hidden + hidden);
    // The two norms' saved inputs.
    let norms = 2.0 * positions * hidden * norm_bytes;
    let mlp_tensors = if shape.swiglu { 4.0 } else { 2.0 };
    let mlp = positions * value_bytes * mlp_tensors * shape.intermediate;
    let dropout_masks = if shape.dropout {
        2.0 * positions * hidden
    } else {
        0.0
    };
    let scores = match attention {
        Attention::Eager => {
            let matrix = batch * shape.heads * tokens * tokens;
            // Softmax runs in fp32 (also under autocast, which then casts the probabilities
            // back to 16 bits for the matmul with V and keeps that copy too).
            let cast_copy = if value_bytes < 4.0 { value_bytes } else { 0.0 };
            let (softmax, attention_dropout) = if shape.dropout {
                // The mask and the fp32 dropped-out probabilities; the cast is of those.
                (matrix * 4.0, matrix * (1.0 + 4.0 + cast_copy))
            } else {
                (matrix * (4.0 + cast_copy), 0.0)
            };
            // Eager grouped-query attention repeats K and V to every head before the matmuls.
            let repeated_kv = positions * value_bytes * 2.0 * (hidden - shape.kv_width).max(0.0);
            softmax + attention_dropout + repeated_kv
        }
        // Fused kernels keep only the log-sum-exp per row, in fp32.
        Attention::Sdpa | Attention::Flash => batch * shape.heads * tokens * 4.0,
    };
    dense + norms + mlp + dropout_masks + scores
}

/// Bytes a norm keeps per value for its backward pass. LayerNorm runs in fp32 (autocast puts it
/// on its fp32 list) and keeps its fp32 input; Hugging Face's RMSNorm upcasts to fp32 and keeps
/// that and the normalized value for the weight multiply.
fn norm_bytes(shape: &Shape, precision: Precision) -> f64 {
    match (shape.swiglu, precision) {
        (false, _) => 4.0,
        (true, Precision::Fp32) => 8.0,
        (true, _) => 6.0,
    }
}

fn transformer_bytes(
    shape: &Shape,
    tokens: f64,
    batch: f64,
    value_bytes: f64,
    setup: &TrainingSetup,
) -> f64 {
    let positions = tokens * batch;
    let one_layer = layer_bytes(
        shape,
        tokens,
        batch,
        value_bytes,
        norm_bytes(shape, setup.precision),
        setup.attention,
    );
    let layers = match setup.checkpointing {
        Checkpointing::None => shape.layers * one_layer,
        // Each block's input is kept; one block is recomputed at a time in the backward pass.
        Checkpointing::Full => shape.layers * positions * shape.hidden * value_bytes + one_layer,
    };
    let embedding_dropout = if shape.dropout {
        positions * shape.hidden
    } else {
        0.0
    };
    // Final norm input and the output head's input.
    let head_inputs = 2.0 * positions * shape.hidden * value_bytes;
    // Logits in the compute type, their fp32 upcast for the loss, the loss's fp32 log-softmax
    // and the fp32 gradient the backward pass starts with (Hugging Face models upcast logits
    // before cross-entropy).
    let logit_bytes = match setup.precision {
        Precision::Fp32 => 12.0,
        _ => value_bytes + 12.0,
    };
    let logits = match setup.task {
        Task::LanguageModel => positions * shape.vocab * logit_bytes,
        // A classifier's head sees one pooled vector per sample.
        Task::Classification => 0.0,
    };
    layers + embedding_dropout + head_inputs + logits
}

/// A CNN's saved tensors, counted block by block from its stages.
fn cnn_bytes(config: &CnnConfig, image_size: f64, batch: f64, precision: Precision) -> f64 {
    let value_bytes = precision.activation_bytes() as f64;
    let elements = match config {
        CnnConfig::ResNet {
            blocks_per_stage, ..
        } => resnet_elements(blocks_per_stage, image_size),
        CnnConfig::ConvNeXt {
            blocks_per_stage,
            channels_per_stage,
            ..
        } => convnext_elements(blocks_per_stage, channels_per_stage, image_size),
    };
    let maxpool_indices = match config {
        // Max pooling keeps an int64 index per output value.
        CnnConfig::ResNet { .. } => 64.0 * (image_size / 4.0).powi(2) * 8.0,
        CnnConfig::ConvNeXt { .. } => 0.0,
    };
    batch * (elements * value_bytes + maxpool_indices)
}

/// Saved values per image of a torchvision bottleneck ResNet.
fn resnet_elements(blocks_per_stage: &[u64; 4], image_size: f64) -> f64 {
    let stem_area = (image_size / 2.0).powi(2);
    // Input image (conv1), BatchNorm input, ReLU output.
    let mut total = 3.0 * image_size * image_size + 2.0 * 64.0 * stem_area;
    let mut area = (image_size / 4.0).powi(2);
    for (stage, &blocks) in blocks_per_stage.iter().enumerate() {
        let width = RESNET_WIDTHS[stage] as f64;
        for block in 0..blocks {
            let area_in = area;
            let downsamples = block == 0 && stage > 0;
            let area_out = if downsamples { area / 4.0 } else { area };
            // conv1 → BN → ReLU at the input size; conv2 (stride) → BN → ReLU; conv3 → BN;
            // the shortcut's BN on the first block; the output ReLU.
            total += 2.0 * width * area_in + 2.0 * width * area_out + 4.0 * width * area_out;
            if block == 0 {
                total += 4.0 * width * area_out;
            }
            total += 4.0 * width * area_out;
            area = area_out;
        }
    }
    total
}

/// Saved values per image of a ConvNeXt.
fn convnext_elements(
    blocks_per_stage: &[u64; 4],
    channels_per_stage: &[u64; 4],
    image_size: f64,
) -> f64 {
    // Input image, patchify conv output (LayerNorm input) and LayerNorm output.
    let mut area = (image_size / 4.0).powi(2);
    let first = channels_per_stage[0] as f64;
    let mut total = 3.0 * image_size * image_size + 2.0 * first * area;
    for (stage, (&blocks, &channels)) in blocks_per_stage.iter().zip(channels_per_stage).enumerate()
    {
        if stage > 0 {
            // Downsampling LayerNorm output (the 2×2 conv's input) at the previous size.
            total += channels_per_stage[stage - 1] as f64 * area;
            area /= 4.0;
            total += channels as f64 * area;
        }
        // Depthwise conv output, LayerNorm output, 4× expansion, GELU output, projection
        // output, block output: 12 channels' worth per pixel.
        total += blocks as f64 * 12.0 * channels as f64 * area;
    }
    total
}
