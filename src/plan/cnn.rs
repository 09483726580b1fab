//! CNN activations, counted tensor by tensor from each stage's blocks (docs/planner.md).

use super::activations::Types;
use super::model::{CnnConfig, RESNET_WIDTHS};

/// A CNN's saved tensors, counted block by block from its stages.
pub(super) fn cnn_bytes(config: &CnnConfig, image_size: f64, batch: f64, types: Types) -> f64 {
    let value_bytes = types.compute;
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
