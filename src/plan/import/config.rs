//! Hugging Face `config.json` parsing: the architecture a model's settings describe.

use serde_json::{Map, Value};

use crate::plan::model::{Architecture, MlpKind, TransformerConfig, TransformerKind, VitConfig};

/// The fields every Llama-like config.json has; a config with all of them is read as Llama-style.
const LLAMA_FIELDS: [&str; 5] = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
];

/// A config.json's fields, read with messages that name the field.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    kind: &'a str,
}

impl Fields<'_> {
    fn optional(&self, key: &str) -> Result<Option<u64>, String> {
        let value = match self.object.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(value) => value,
        };
        let whole = value.as_u64().or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..9e18).contains(f))
                .map(|f| f as u64)
        });
        match whole {
            Some(number) => Ok(Some(number)),
            None => {
                let mut shown = value.to_string();
                shown.truncate(40);
                Err(format!(
                    "the field \"{key}\" is {shown}, not a whole number ≥ 0; fix it in the config.json."
                ))
            }
        }
    }

    fn required(&self, key: &str) -> Result<u64, String> {
        self.optional(key)?.ok_or_else(|| {
            format!(
                "the field \"{key}\" is missing, and a {} config.json needs it; download the model's original config.json.",
                self.kind
            )
        })
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(flag)) => Ok(*flag),
            Some(_) => Err(format!(
                "the field \"{key}\" must be true or false; fix it in the config.json."
            )),
        }
    }
}

/// The architecture a Hugging Face config.json describes.
pub(super) fn config_architecture(config: &Value) -> Result<Architecture, String> {
    let Some(object) = config.as_object() else {
        return Err("it is JSON but not a set of model settings, so not a model's config.json; give the config.json that sits next to the weights.".to_string());
    };
    let model_type = object
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let fields = Fields {
        object,
        kind: if model_type.is_empty() {
            "model"
        } else {
            model_type
        },
    };
    match model_type {
        "gpt2" => gpt2_config(&fields),
        "bert" => bert_config(&fields),
        "vit" => vit_config(&fields),
        "llama" | "mistral" | "qwen2" => llama_config(&fields, model_type == "qwen2"),
        _ if LLAMA_FIELDS.iter().all(|key| object.contains_key(*key)) => {
            llama_config(&fields, false)
        }
        _ => Err(not_a_config(object, model_type)),
    }
}

fn not_a_config(object: &Map<String, Value>, model_type: &str) -> String {
    let tokenizer = [
        "added_tokens",
        "tokenizer_class",
        "normalizer",
        "pre_tokenizer",
    ]
    .iter()
    .any(|key| object.contains_key(*key));
    if tokenizer {
        "it looks like a tokenizer file, not a model's config.json; give the config.json in the same folder.".to_string()
    } else if object.contains_key("weight_map") {
        "it is the index of a sharded checkpoint; give one of its .safetensors shards, or the config.json in the same folder.".to_string()
    } else if model_type.is_empty() {
        format!(
            "it has no \"model_type\" and not the usual fields ({}), so it is not a model's config.json; give the config.json that sits next to the weights.",
            LLAMA_FIELDS.join(", ")
        )
    } else {
        format!(
            "its model type \"{model_type}\" is not one gputune reads (llama, mistral, qwen2, gpt2, bert, vit) and it lacks the usual fields ({}); choose the closest preset instead.",
            LLAMA_FIELDS.join(", ")
        )
    }
}

fn llama_config(fields: &Fields, qwen2: bool) -> Result<Architecture, String> {
    let heads = fields.required("num_attention_heads")?;
    // Llama's attention_bias puts biases on q, k, v and o; Qwen2 has them on q, k, v only.
    let attention_bias = fields.flag("attention_bias", false)?;
    Ok(Architecture::Transformer(TransformerConfig {
        kind: TransformerKind::DecoderOnly,
        layers: fields.required("num_hidden_layers")?,
        hidden_size: fields.required("hidden_size")?,
        attention_heads: heads,
        kv_heads: fields.optional("num_key_value_heads")?.unwrap_or(heads),
        intermediate_size: fields.required("intermediate_size")?,
        vocab_size: fields.required("vocab_size")?,
        learned_positions: 0,
        mlp: MlpKind::SwiGlu,
        tied_embeddings: fields.flag("tie_word_embeddings", false)?,
        layer_norm_bias: false,
        qkv_bias: qwen2 || attention_bias,
        output_bias: attention_bias,
        dropout: false,
    }))
}

/// GPT-2 and BERT share the layout: LayerNorm with bias, biased linears, GELU MLP, dropout.
pub(super) fn gelu_transformer(kind: TransformerKind, sizes: [u64; 6]) -> TransformerConfig {
    let [
        layers,
        hidden_size,
        attention_heads,
        intermediate_size,
        vocab_size,
        learned_positions,
    ] = sizes;
    TransformerConfig {
        kind,
        layers,
        hidden_size,
        attention_heads,
        kv_heads: attention_heads,
        intermediate_size,
        vocab_size,
        learned_positions,
        mlp: MlpKind::Gelu,
        tied_embeddings: true,
        layer_norm_bias: true,
        qkv_bias: true,
        output_bias: true,
        dropout: true,
    }
}

fn gpt2_config(fields: &Fields) -> Result<Architecture, String> {
    let hidden = fields.required("n_embd")?;
    let intermediate = fields
        .optional("n_inner")?
        .unwrap_or(hidden.saturating_mul(4));
    Ok(Architecture::Transformer(gelu_transformer(
        TransformerKind::DecoderOnly,
        [
            fields.required("n_layer")?,
            hidden,
            fields.required("n_head")?,
            intermediate,
            fields.required("vocab_size")?,
            fields.required("n_positions")?,
        ],
    )))
}

fn bert_config(fields: &Fields) -> Result<Architecture, String> {
    Ok(Architecture::Transformer(gelu_transformer(
        TransformerKind::EncoderOnly,
        [
            fields.required("num_hidden_layers")?,
            fields.required("hidden_size")?,
            fields.required("num_attention_heads")?,
            fields.required("intermediate_size")?,
            fields.required("vocab_size")?,
            fields.required("max_position_embeddings")?,
        ],
    )))
}

fn vit_config(fields: &Fields) -> Result<Architecture, String> {
    let labels = fields
        .object
        .get("id2label")
        .and_then(Value::as_object)
        .map(|labels| labels.len() as u64);
    let classes = match labels.filter(|&count| count > 0) {
        Some(count) => count,
        None => fields.optional("num_labels")?.unwrap_or(1_000),
    };
    Ok(Architecture::Vit(VitConfig {
        patch_size: fields.required("patch_size")?,
        layers: fields.required("num_hidden_layers")?,
        hidden_size: fields.required("hidden_size")?,
        attention_heads: fields.required("num_attention_heads")?,
        intermediate_size: fields.required("intermediate_size")?,
        classes,
    }))
}
