//! Named model presets, from the models' public configs.

use super::model::{
    Architecture, CnnConfig, Family, MlpKind, Model, TransformerConfig, TransformerKind, VitConfig,
};

/// The names `--model` accepts, in the order `--list-models` prints them.
pub const PRESET_NAMES: [&str; 27] = [
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
    "qwen3-0.6b",
    "qwen3-8b",
    "mistral-nemo-12b",
    "gemma-2-9b",
    "phi-3-mini",
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
        family: Family::Gpt2,
        kind: TransformerKind::DecoderOnly,
        layers,
        hidden_size: hidden,
        attention_heads: heads,
        kv_heads: heads,
        head_dim: None,
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
        family: Family::Bert,
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
        family: Family::Llama,
        kind: TransformerKind::DecoderOnly,
        layers,
        hidden_size: hidden,
        attention_heads: heads,
        kv_heads,
        head_dim: None,
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
        "mistral-7b" => transformer(TransformerConfig {
            family: Family::Mistral,
            ..llama(32, 4_096, 32, 8, 14_336, 32_000, false)
        }),
        "qwen2.5-7b" => transformer(TransformerConfig {
            family: Family::Qwen2,
            qkv_bias: true,
            ..llama(28, 3_584, 28, 4, 18_944, 152_064, false)
        }),
        "qwen2.5-14b" => transformer(TransformerConfig {
            family: Family::Qwen2,
            qkv_bias: true,
            ..llama(48, 5_120, 40, 8, 13_824, 152_064, false)
        }),
        "qwen3-0.6b" => transformer(TransformerConfig {
            family: Family::Qwen3,
            head_dim: Some(128),
            ..llama(28, 1_024, 16, 8, 3_072, 151_936, true)
        }),
        "qwen3-8b" => transformer(TransformerConfig {
            family: Family::Qwen3,
            head_dim: Some(128),
            ..llama(36, 4_096, 32, 8, 12_288, 151_936, false)
        }),
        "mistral-nemo-12b" => transformer(TransformerConfig {
            family: Family::Mistral,
            head_dim: Some(128),
            ..llama(40, 5_120, 32, 8, 14_336, 131_072, false)
        }),
        "gemma-2-9b" => transformer(TransformerConfig {
            family: Family::Gemma2,
            head_dim: Some(256),
            ..llama(42, 3_584, 16, 8, 14_336, 256_000, true)
        }),
        "phi-3-mini" => transformer(TransformerConfig {
            family: Family::Phi3,
            ..llama(32, 3_072, 32, 32, 8_192, 32_064, false)
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
        let published: [(&str, f64); 27] = [
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
            ("qwen3-0.6b", 596e6),
            ("qwen3-8b", 8_191e6),
            ("mistral-nemo-12b", 12_248e6),
            ("gemma-2-9b", 9_242e6),
            ("phi-3-mini", 3_821e6),
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
}
