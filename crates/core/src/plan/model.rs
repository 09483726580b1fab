//! Model architectures the planner understands, their parameter counts, and named presets
//! (from the models' public configs).

pub use super::family::Family;
pub use super::presets::{PRESET_NAMES, preset};
use gputune_formats::reports::plan_setup::LoraTargets;

/// Whether a transformer reads causally (GPT, Llama) or bidirectionally (BERT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransformerKind {
    DecoderOnly,
    EncoderOnly,
}

/// The feed-forward block of a transformer layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpKind {
    /// Two matrices with a GELU between (GPT-2, BERT, ViT, Phi-2, GPT-NeoX), with biases.
    Gelu,
    /// Gate, up and down matrices, gated by SiLU (Llama, Mistral, Qwen, Phi-3) or a tanh GELU
    /// (Gemma), no biases.
    SwiGlu,
}

/// A text transformer, as its Hugging Face `config.json` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct TransformerConfig {
    /// The layout family (norms per block, fused projections, GELU kind).
    pub family: Family,
    pub kind: TransformerKind,
    pub layers: u64,
    pub hidden_size: u64,
    pub attention_heads: u64,
    /// Key/value heads: equal to `attention_heads` without grouped-query attention.
    pub kv_heads: u64,
    /// Width of one head when the config sets it apart from hidden / heads (Gemma, Qwen3,
    /// Mistral-Nemo); `None` means hidden / heads.
    pub head_dim: Option<u64>,
    pub intermediate_size: u64,
    pub vocab_size: u64,
    /// Learned position embeddings (GPT-2, BERT); 0 with rotary embeddings.
    pub learned_positions: u64,
    pub mlp: MlpKind,
    pub tied_embeddings: bool,
    /// LayerNorm has a bias as well as a weight; RMSNorm has only a weight.
    pub layer_norm_bias: bool,
    pub qkv_bias: bool,
    pub output_bias: bool,
    /// GPT-2 and BERT use dropout; modern LLMs train without it.
    pub dropout: bool,
}

/// A Vision Transformer (ViT) for image classification.
#[derive(Debug, Clone, PartialEq)]
pub struct VitConfig {
    pub patch_size: u64,
    pub layers: u64,
    pub hidden_size: u64,
    pub attention_heads: u64,
    pub intermediate_size: u64,
    pub classes: u64,
}

/// A convolutional network, described stage by stage.
#[derive(Debug, Clone, PartialEq)]
pub enum CnnConfig {
    /// ResNet with bottleneck blocks (torchvision layout: stride on the 3×3 conv).
    ResNet {
        blocks_per_stage: [u64; 4],
        classes: u64,
    },
    /// ConvNeXt: depthwise 7×7 conv, LayerNorm, inverted MLP (4×), per stage.
    ConvNeXt {
        blocks_per_stage: [u64; 4],
        channels_per_stage: [u64; 4],
        classes: u64,
    },
}

/// Any architecture the planner can size.
#[derive(Debug, Clone, PartialEq)]
pub enum Architecture {
    Transformer(TransformerConfig),
    Vit(VitConfig),
    Cnn(CnnConfig),
}

/// A model: its name, architecture and, when known exactly (from a safetensors header), its
/// parameter count.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub architecture: Architecture,
    pub exact_parameter_count: Option<u64>,
}

impl Model {
    /// Total parameters: the exact count when a checkpoint told us, else the architecture's.
    pub fn parameter_count(&self) -> u64 {
        self.exact_parameter_count
            .unwrap_or_else(|| architecture_parameter_count(&self.architecture))
    }

    /// Whether the model takes images (its size input is an image size, not a sequence length).
    pub fn is_vision(&self) -> bool {
        !matches!(self.architecture, Architecture::Transformer(_))
    }

    /// The (input features, output features) of every linear layer LoRA would adapt, as the
    /// model names its modules: a fused q/k/v or gate/up projection is one matrix.
    pub fn lora_target_shapes(&self, targets: LoraTargets) -> Vec<(u64, u64)> {
        let per_layer = match &self.architecture {
            Architecture::Transformer(config) => transformer_linear_shapes(config, targets),
            Architecture::Vit(config) => {
                let hidden = config.hidden_size;
                let mut shapes = vec![(hidden, hidden); 4];
                if targets == LoraTargets::AllLinear {
                    shapes.extend([
                        (hidden, config.intermediate_size),
                        (config.intermediate_size, hidden),
                    ]);
                }
                shapes
            }
            // LoRA on convolutions is out of scope: adapt the classifier only.
            Architecture::Cnn(_) => return Vec::new(),
        };
        let layers = match &self.architecture {
            Architecture::Transformer(config) => config.layers,
            Architecture::Vit(config) => config.layers,
            Architecture::Cnn(_) => 0,
        };
        (0..layers).flat_map(|_| per_layer.clone()).collect()
    }

    /// Parameters in the transformer blocks' linear layers: what QLoRA stores in 4 bits (the
    /// embeddings, norms and output head stay in 16 bits).
    pub fn block_linear_parameter_count(&self) -> u64 {
        self.lora_target_shapes(LoraTargets::AllLinear)
            .iter()
            .map(|(inputs, outputs)| inputs * outputs)
            .sum()
    }
}

impl TransformerConfig {
    /// Width of one attention head.
    pub fn head_dim(&self) -> u64 {
        self.head_dim
            .unwrap_or(self.hidden_size / self.attention_heads.max(1))
    }

    /// Width of all query heads together (the hidden size unless `head_dim` is set apart).
    pub fn query_width(&self) -> u64 {
        self.attention_heads.saturating_mul(self.head_dim())
    }

    /// Width of all key (or value) heads together.
    pub fn kv_width(&self) -> u64 {
        self.kv_heads.saturating_mul(self.head_dim())
    }
}

/// One block's linear layers LoRA can adapt, in the model's own module layout.
fn transformer_linear_shapes(config: &TransformerConfig, targets: LoraTargets) -> Vec<(u64, u64)> {
    let hidden = config.hidden_size;
    let (query, kv) = (config.query_width(), config.kv_width());
    let family = config.family;
    let mut shapes = if family.fused_qkv() {
        vec![(hidden, query + 2 * kv), (query, hidden)]
    } else {
        vec![(hidden, query), (hidden, kv), (hidden, kv), (query, hidden)]
    };
    if targets == LoraTargets::AllLinear {
        let intermediate = config.intermediate_size;
        match (config.mlp, family.fused_gate_up()) {
            (MlpKind::SwiGlu, true) => {
                shapes.extend([(hidden, 2 * intermediate), (intermediate, hidden)])
            }
            (MlpKind::SwiGlu, false) => shapes.extend([
                (hidden, intermediate),
                (hidden, intermediate),
                (intermediate, hidden),
            ]),
            (MlpKind::Gelu, _) => shapes.extend([(hidden, intermediate), (intermediate, hidden)]),
        }
    }
    shapes
}

pub(crate) fn architecture_parameter_count(architecture: &Architecture) -> u64 {
    match architecture {
        Architecture::Transformer(config) => transformer_parameters(config),
        Architecture::Vit(config) => vit_parameters(config),
        Architecture::Cnn(CnnConfig::ResNet {
            blocks_per_stage,
            classes,
        }) => resnet_parameters(blocks_per_stage, *classes),
        Architecture::Cnn(CnnConfig::ConvNeXt {
            blocks_per_stage,
            channels_per_stage,
            classes,
        }) => convnext_parameters(blocks_per_stage, channels_per_stage, *classes),
    }
}

fn transformer_parameters(config: &TransformerConfig) -> u64 {
    let hidden = config.hidden_size;
    let family = config.family;
    let (query, kv) = (config.query_width(), config.kv_width());
    let norm = if config.layer_norm_bias {
        2 * hidden
    } else {
        hidden
    };
    let attention = hidden * query
        + hidden * kv * 2
        + query * hidden
        + if config.qkv_bias { query + 2 * kv } else { 0 }
        + if config.output_bias { hidden } else { 0 }
        + if family.query_key_norms() {
            2 * config.head_dim()
        } else {
            0
        };
    let mlp = match config.mlp {
        MlpKind::Gelu => 2 * hidden * config.intermediate_size + config.intermediate_size + hidden,
        MlpKind::SwiGlu => 3 * hidden * config.intermediate_size,
    };
    let per_layer = attention + mlp + family.norms_per_block() * norm;
    let embeddings = config.vocab_size * hidden + config.learned_positions * hidden;
    let encoder_extras = match config.kind {
        // Token-type embeddings, the embedding LayerNorm, and the masked-LM head's transform.
        TransformerKind::EncoderOnly => {
            family.token_types() * hidden
                + norm
                + hidden * hidden
                + hidden
                + norm
                + config.vocab_size
        }
        TransformerKind::DecoderOnly => norm,
    };
    let output_head = if config.tied_embeddings {
        0
    } else {
        config.vocab_size * hidden
    } + if family.output_head_bias() {
        config.vocab_size
    } else {
        0
    };
    config.layers * per_layer + embeddings + encoder_extras + output_head
}

fn vit_parameters(config: &VitConfig) -> u64 {
    let hidden = config.hidden_size;
    let patches = (224 / config.patch_size.max(1)).pow(2);
    let patch_embedding = 3 * config.patch_size * config.patch_size * hidden + hidden;
    let tokens = (patches + 1) * hidden + hidden;
    let per_layer = 4 * hidden * hidden
        + 4 * hidden
        + 2 * hidden * config.intermediate_size
        + config.intermediate_size
        + hidden
        + 4 * hidden;
    let head = 2 * hidden + hidden * config.classes + config.classes;
    patch_embedding + tokens + config.layers * per_layer + head
}

/// Bottleneck widths of a ResNet's four stages; each block outputs 4× its width.
pub(crate) const RESNET_WIDTHS: [u64; 4] = [64, 128, 256, 512];

fn resnet_parameters(blocks_per_stage: &[u64; 4], classes: u64) -> u64 {
    let batch_norm = |channels: u64| 2 * channels;
    let mut total = 3 * 64 * 49 + batch_norm(64);
    let mut inputs = 64;
    for (stage, &blocks) in blocks_per_stage.iter().enumerate() {
        let width = RESNET_WIDTHS[stage];
        let outputs = 4 * width;
        for block in 0..blocks {
            let block_inputs = if block == 0 { inputs } else { outputs };
            total += block_inputs * width + batch_norm(width);
            total += 9 * width * width + batch_norm(width);
            total += width * outputs + batch_norm(outputs);
            if block == 0 {
                total += block_inputs * outputs + batch_norm(outputs);
            }
        }
        inputs = outputs;
    }
    total + inputs * classes + classes
}

fn convnext_parameters(
    blocks_per_stage: &[u64; 4],
    channels_per_stage: &[u64; 4],
    classes: u64,
) -> u64 {
    let layer_norm = |channels: u64| 2 * channels;
    let first = channels_per_stage[0];
    let mut total = 3 * 16 * first + first + layer_norm(first);
    for (stage, (&blocks, &channels)) in blocks_per_stage.iter().zip(channels_per_stage).enumerate()
    {
        // Stages left out (a prefix of the network) have no blocks.
        if blocks == 0 {
            break;
        }
        if stage > 0 {
            let previous = channels_per_stage[stage - 1];
            total += layer_norm(previous) + previous * channels * 4 + channels;
        }
        let block = 49 * channels
            + channels
            + layer_norm(channels)
            + channels * 4 * channels
            + 4 * channels
            + 4 * channels * channels
            + channels
            + channels;
        total += blocks * block;
    }
    let last = channels_per_stage[3];
    total + layer_norm(last) + last * classes + classes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_targets_count_the_right_layers() {
        let model = preset("llama-2-7b").unwrap_or_else(|| panic!("preset"));
        assert_eq!(
            model.lora_target_shapes(LoraTargets::Attention).len(),
            32 * 4
        );
        assert_eq!(
            model.lora_target_shapes(LoraTargets::AllLinear).len(),
            32 * 7
        );
        // Rank 8 on q and v alone would be 4.2 M; on q, k, v, o it is twice that.
        let rank = 8;
        let adapter: u64 = model
            .lora_target_shapes(LoraTargets::Attention)
            .iter()
            .map(|(inputs, outputs)| rank * (inputs + outputs))
            .sum();
        assert_eq!(adapter, 8_388_608);
    }
}
