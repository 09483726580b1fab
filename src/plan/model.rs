//! Model architectures the planner understands, their parameter counts, and named presets
//! (from the models' public configs).

use serde::{Deserialize, Serialize};

/// Whether a transformer reads causally (GPT, Llama) or bidirectionally (BERT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransformerKind {
    DecoderOnly,
    EncoderOnly,
}

/// The feed-forward block of a transformer layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MlpKind {
    /// Two matrices with a GELU between (GPT-2, BERT, ViT), with biases.
    Gelu,
    /// Gate, up and down matrices with SiLU gating (Llama, Mistral, Qwen), no biases.
    SwiGlu,
}

/// A text transformer, as its Hugging Face `config.json` describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransformerConfig {
    pub kind: TransformerKind,
    pub layers: u64,
    pub hidden_size: u64,
    pub attention_heads: u64,
    /// Key/value heads: equal to `attention_heads` without grouped-query attention.
    pub kv_heads: u64,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VitConfig {
    pub patch_size: u64,
    pub layers: u64,
    pub hidden_size: u64,
    pub attention_heads: u64,
    pub intermediate_size: u64,
    pub classes: u64,
}

/// A convolutional network, described stage by stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Architecture {
    Transformer(TransformerConfig),
    Vit(VitConfig),
    Cnn(CnnConfig),
}

/// A model: its name, architecture and, when known exactly (from a safetensors header), its
/// parameter count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    pub architecture: Architecture,
    pub exact_parameter_count: Option<u64>,
}

/// Which linear layers LoRA adapts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LoraTargets {
    /// Query, key, value and output projections.
    #[default]
    Attention,
    /// Every linear layer of every block (attention and MLP).
    AllLinear,
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

    /// The (input features, output features) of every linear layer LoRA would adapt.
    pub fn lora_target_shapes(&self, targets: LoraTargets) -> Vec<(u64, u64)> {
        let (layers, hidden, kv_width, intermediate, swiglu) = match &self.architecture {
            Architecture::Transformer(config) => (
                config.layers,
                config.hidden_size,
                config.kv_heads * head_dim(config.hidden_size, config.attention_heads),
                config.intermediate_size,
                config.mlp == MlpKind::SwiGlu,
            ),
            Architecture::Vit(config) => (
                config.layers,
                config.hidden_size,
                config.hidden_size,
                config.intermediate_size,
                false,
            ),
            // LoRA on convolutions is out of scope: adapt the classifier only.
            Architecture::Cnn(_) => return Vec::new(),
        };
        let mut per_layer = vec![
            (hidden, hidden),
            (hidden, kv_width),
            (hidden, kv_width),
            (hidden, hidden),
        ];
        if targets == LoraTargets::AllLinear {
            if swiglu {
                per_layer.extend([
                    (hidden, intermediate),
                    (hidden, intermediate),
                    (intermediate, hidden),
                ]);
            } else {
                per_layer.extend([(hidden, intermediate), (intermediate, hidden)]);
            }
        }
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

pub(crate) fn head_dim(hidden_size: u64, heads: u64) -> u64 {
    hidden_size / heads.max(1)
}

fn architecture_parameter_count(architecture: &Architecture) -> u64 {
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
    let kv_width = config.kv_heads * head_dim(hidden, config.attention_heads);
    let norm = if config.layer_norm_bias {
        2 * hidden
    } else {
        hidden
    };
    let attention = hidden * hidden * 2
        + hidden * kv_width * 2
        + if config.qkv_bias {
            hidden + 2 * kv_width
        } else {
            0
        }
        + if config.output_bias { hidden } else { 0 };
    let mlp = match config.mlp {
        MlpKind::Gelu => 2 * hidden * config.intermediate_size + config.intermediate_size + hidden,
        MlpKind::SwiGlu => 3 * hidden * config.intermediate_size,
    };
    let per_layer = attention + mlp + 2 * norm;
    let embeddings = config.vocab_size * hidden + config.learned_positions * hidden;
    let encoder_extras = match config.kind {
        // Token-type embeddings, the embedding LayerNorm, and the masked-LM head's transform.
        TransformerKind::EncoderOnly => {
            2 * hidden + norm + hidden * hidden + hidden + norm + config.vocab_size
        }
        TransformerKind::DecoderOnly => norm,
    };
    let output_head = if config.tied_embeddings {
        0
    } else {
        config.vocab_size * hidden
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

/// The names `--model` accepts, in the order `--list-models` prints them.
pub const PRESET_NAMES: [&str; 22] = [
    "gpt2",
    "gpt2-xl",
    "bert-base-uncased",
    "bert-large-uncased",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-14b",
    "vit-b-16",
    "vit-l-16",
    "resnet50",
    "resnet101",
    "convnext-tiny",
    "convnext-small",
    "convnext-base",
    "convnext-large",
];

fn gpt(layers: u64, hidden: u64, heads: u64) -> TransformerConfig {
    TransformerConfig {
        kind: TransformerKind::DecoderOnly,
        layers,
        hidden_size: hidden,
        attention_heads: heads,
        kv_heads: heads,
        intermediate_size: 4 * hidden,
        vocab_size: 50_257,
        learned_positions: 1_024,
        mlp: MlpKind::Gelu,
        tied_embeddings: true,
        layer_norm_bias: true,
        qkv_bias: true,
        output_bias: true,
        dropout: true,
    }
}

fn bert(layers: u64, hidden: u64, heads: u64) -> TransformerConfig {
    TransformerConfig {
        kind: TransformerKind::EncoderOnly,
        learned_positions: 512,
        vocab_size: 30_522,
        ..gpt(layers, hidden, heads)
    }
}

/// A Llama-style decoder: RMSNorm, rotary positions, SwiGLU, no biases, no dropout.
fn llama(
    layers: u64,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    intermediate: u64,
    vocab: u64,
    tied: bool,
) -> TransformerConfig {
    TransformerConfig {
        kind: TransformerKind::DecoderOnly,
        layers,
        hidden_size: hidden,
        attention_heads: heads,
        kv_heads,
        intermediate_size: intermediate,
        vocab_size: vocab,
        learned_positions: 0,
        mlp: MlpKind::SwiGlu,
        tied_embeddings: tied,
        layer_norm_bias: false,
        qkv_bias: false,
        output_bias: false,
        dropout: false,
    }
}

fn vit(layers: u64, hidden: u64, heads: u64) -> VitConfig {
    VitConfig {
        patch_size: 16,
        layers,
        hidden_size: hidden,
        attention_heads: heads,
        intermediate_size: 4 * hidden,
        classes: 1_000,
    }
}

/// The preset with this name (see `PRESET_NAMES`).
pub fn preset(name: &str) -> Option<Model> {
    let transformer = |config| Some(Architecture::Transformer(config));
    let architecture = match name {
        "gpt2" => transformer(gpt(12, 768, 12)),
        "gpt2-xl" => transformer(gpt(48, 1_600, 25)),
        "bert-base-uncased" => transformer(bert(12, 768, 12)),
        "bert-large-uncased" => transformer(bert(24, 1_024, 16)),
        "llama-2-7b" => transformer(llama(32, 4_096, 32, 32, 11_008, 32_000, false)),
        "llama-2-13b" => transformer(llama(40, 5_120, 40, 40, 13_824, 32_000, false)),
        "llama-2-70b" => transformer(llama(80, 8_192, 64, 8, 28_672, 32_000, false)),
        "llama-3.2-1b" => transformer(llama(16, 2_048, 32, 8, 8_192, 128_256, true)),
        "llama-3.2-3b" => transformer(llama(28, 3_072, 24, 8, 8_192, 128_256, true)),
        "llama-3.1-8b" => transformer(llama(32, 4_096, 32, 8, 14_336, 128_256, false)),
        "llama-3.1-70b" => transformer(llama(80, 8_192, 64, 8, 28_672, 128_256, false)),
        "mistral-7b" => transformer(llama(32, 4_096, 32, 8, 14_336, 32_000, false)),
        "qwen2.5-7b" => transformer(TransformerConfig {
            qkv_bias: true,
            ..llama(28, 3_584, 28, 4, 18_944, 152_064, false)
        }),
        "qwen2.5-14b" => transformer(TransformerConfig {
            qkv_bias: true,
            ..llama(48, 5_120, 40, 8, 13_824, 152_064, false)
        }),
        "vit-b-16" => Some(Architecture::Vit(vit(12, 768, 12))),
        "vit-l-16" => Some(Architecture::Vit(vit(24, 1_024, 16))),
        "resnet50" => Some(Architecture::Cnn(CnnConfig::ResNet {
            blocks_per_stage: [3, 4, 6, 3],
            classes: 1_000,
        })),
        "resnet101" => Some(Architecture::Cnn(CnnConfig::ResNet {
            blocks_per_stage: [3, 4, 23, 3],
            classes: 1_000,
        })),
        "convnext-tiny" => Some(convnext([3, 3, 9, 3], [96, 192, 384, 768])),
        "convnext-small" => Some(convnext([3, 3, 27, 3], [96, 192, 384, 768])),
        "convnext-base" => Some(convnext([3, 3, 27, 3], [128, 256, 512, 1_024])),
        "convnext-large" => Some(convnext([3, 3, 27, 3], [192, 384, 768, 1_536])),
        _ => None,
    }?;
    Some(Model {
        name: name.to_string(),
        architecture,
        exact_parameter_count: None,
    })
}

fn convnext(blocks_per_stage: [u64; 4], channels_per_stage: [u64; 4]) -> Architecture {
    Architecture::Cnn(CnnConfig::ConvNeXt {
        blocks_per_stage,
        channels_per_stage,
        classes: 1_000,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published parameter counts (model cards, torchvision/timm docs), within 1.5 %.
    #[test]
    fn presets_have_their_published_parameter_counts() {
        let published: [(&str, f64); 22] = [
            ("gpt2", 124.4e6),
            ("gpt2-xl", 1_557.6e6),
            ("bert-base-uncased", 110e6),
            ("bert-large-uncased", 336e6),
            ("llama-2-7b", 6_738e6),
            ("llama-2-13b", 13_016e6),
            ("llama-2-70b", 68_977e6),
            ("llama-3.2-1b", 1_236e6),
            ("llama-3.2-3b", 3_213e6),
            ("llama-3.1-8b", 8_030e6),
            ("llama-3.1-70b", 70_554e6),
            ("mistral-7b", 7_242e6),
            ("qwen2.5-7b", 7_616e6),
            ("qwen2.5-14b", 14_770e6),
            ("vit-b-16", 86.6e6),
            ("vit-l-16", 304.3e6),
            ("resnet50", 25.557e6),
            ("resnet101", 44.549e6),
            ("convnext-tiny", 28.589e6),
            ("convnext-small", 50.224e6),
            ("convnext-base", 88.591e6),
            ("convnext-large", 197.767e6),
        ];
        for (name, expected) in published {
            let model = preset(name).unwrap_or_else(|| panic!("preset {name}"));
            let count = model.parameter_count() as f64;
            let error = (count - expected).abs() / expected;
            assert!(
                error < 0.015,
                "{name}: {count:.0} vs published {expected:.0} ({:.2} %)",
                error * 100.0
            );
        }
        assert!(PRESET_NAMES.iter().all(|name| preset(name).is_some()));
        assert!(preset("gpt-5").is_none());
    }

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
