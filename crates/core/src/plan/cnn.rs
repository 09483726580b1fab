//! CNN activations, counted tensor by tensor from each stage's blocks (docs/planner.md).

use super::model::{Architecture, CnnConfig, RESNET_WIDTHS, architecture_parameter_count};
use super::value_types::Types;

/// The stem and the first stages of a CNN: what the backward pass, which runs from the last
/// stage to the first, still holds while it works through the last of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StagePrefix {
    /// Saved tensors of the stem and these stages (the image and pooling indices included).
    pub saved_bytes: f64,
    pub parameters: f64,
}

/// For each stage `s`, the stem and stages `0..=s`: while stage `s` runs backward these
/// stages' tensors are still saved and every later layer (the classifier included) has its
/// gradient.
pub(super) fn backward_prefixes(
    config: &CnnConfig,
    image_size: f64,
    batch: f64,
    types: Types,
) -> Vec<StagePrefix> {
    (0..4)
        .map(|last_stage| {
            let keep = |blocks: &[u64; 4]| {
                let mut kept = *blocks;
                kept.iter_mut()
                    .skip(last_stage + 1)
                    .for_each(|count| *count = 0);
                kept
            };
            let prefix = match config {
                CnnConfig::ResNet {
                    blocks_per_stage, ..
                } => CnnConfig::ResNet {
                    blocks_per_stage: keep(blocks_per_stage),
                    classes: 0,
                },
                CnnConfig::ConvNeXt {
                    blocks_per_stage,
                    channels_per_stage,
                    ..
                } => CnnConfig::ConvNeXt {
                    blocks_per_stage: keep(blocks_per_stage),
                    channels_per_stage: *channels_per_stage,
                    classes: 0,
                },
            };
            StagePrefix {
                saved_bytes: cnn_bytes(&prefix, image_size, batch, types),
                parameters: architecture_parameter_count(&Architecture::Cnn(prefix)) as f64,
            }
        })
        .collect()
}

/// A CNN's saved tensors, counted block by block from its stages.
pub(super) fn cnn_bytes(config: &CnnConfig, image_size: f64, batch: f64, types: Types) -> f64 {
    let value_bytes = types.compute;
    // The images arrive in the weights' type (fp32 under autocast, which gives the first conv
    // its own 16-bit copy).
    let pixels = 3.0 * image_size * image_size;
    let image = pixels * (types.residual + if types.autocast { types.compute } else { 0.0 });
    let bytes = match config {
        CnnConfig::ResNet {
            blocks_per_stage, ..
        } => {
            // Max pooling keeps an int64 index per output value.
            let maxpool_indices = 64.0 * (image_size / 4.0).powi(2) * 8.0;
            resnet_elements(blocks_per_stage, image_size) * value_bytes + maxpool_indices
        }
        CnnConfig::ConvNeXt {
            blocks_per_stage,
            channels_per_stage,
            ..
        } => convnext_bytes(blocks_per_stage, channels_per_stage, image_size, types),
    };
    batch * (image + bytes)
}

/// Saved values per image of a torchvision bottleneck ResNet, the input image left out.
fn resnet_elements(blocks_per_stage: &[u64; 4], image_size: f64) -> f64 {
    let stem_area = (image_size / 2.0).powi(2);
    // BatchNorm input, ReLU output.
    let mut total = 2.0 * 64.0 * stem_area;
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

/// Saved bytes per image of a torchvision ConvNeXt, the input image left out. Under autocast
/// LayerNorm runs in fp32 and keeps an fp32 copy of its input, and the residual stream is
/// fp32 (the layer scale is an fp32 parameter): what reads it without a cast (a downsampling
/// LayerNorm, the final pooling) keeps it in fp32.
fn convnext_bytes(
    blocks_per_stage: &[u64; 4],
    channels_per_stage: &[u64; 4],
    image_size: f64,
    types: Types,
) -> f64 {
    let c = types.compute;
    let norm_input = if types.autocast { 4.0 } else { c };
    let residual = if types.autocast { 4.0 } else { c };
    // Patchify conv output (LayerNorm input) and LayerNorm output.
    let mut area = (image_size / 4.0).powi(2);
    let first = channels_per_stage[0] as f64;
    let mut total = (norm_input + c) * first * area;
    let mut last = first;
    for (stage, (&blocks, &channels)) in blocks_per_stage.iter().zip(channels_per_stage).enumerate()
    {
        // Stages left out (a prefix of the network) have no blocks.
        if blocks == 0 {
            break;
        }
        let previous = channels_per_stage[stage.saturating_sub(1)] as f64;
        if stage > 0 {
            // Downsampling: its LayerNorm keeps the previous stage's last output whole (counted
            // below as a block output in the compute type; the rest here) and its output (the
            // 2×2 conv's input) at the previous size, then the conv's output.
            total += residual * previous * area;
            area /= 4.0;
            total += c * channels as f64 * area;
        }
        // Depthwise conv output (LayerNorm input), LayerNorm output, 4× expansion, GELU
        // output, projection output (kept for the layer scale), and the block output as the
        // next block's conv keeps it.
        total += blocks as f64 * (norm_input + 11.0 * c) * channels as f64 * area;
        last = channels as f64;
    }
    // The last block's output as the pooling (or the next downsampling) keeps it.
    total + (residual - c) * last * area
}
