//! Hugging Face `config.json` parsing: the architecture a model's settings describe.

use serde_json::{Map, Value};

use crate::plan::model::{
    Architecture, Family, MlpKind, TransformerConfig, TransformerKind, VitConfig,
};

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

    /// Whether any of these dropout probabilities is above zero (absent counts as `default`).
    fn dropout(&self, keys: &[&str], default: f64) -> Result<bool, String> {
        for key in keys {
            let probability = match self.object.get(*key) {
                None | Some(Value::Null) => default,
                Some(value) => value.as_f64().filter(|p| (0.0..=1.0).contains(p)).ok_or_else(|| {
                    format!("the field \"{key}\" must be a probability between 0 and 1; fix it in the config.json.")
                })?,
            };
            if probability > 0.0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `tie_word_embeddings`, with the default of the family's own config class.
    fn tied(&self, family: Family) -> Result<bool, String> {
        self.flag("tie_word_embeddings", family.ties_embeddings_by_default())
    }
}

/// The architecture a Hugging Face config.json describes. An unknown `model_type` is refused:
/// a guess from similar-looking fields was off by up to 30 % for families laid out differently.
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
    if model_type == "vit" {
        return vit_config(&fields);
    }
    let Some(family) = Family::from_model_type(model_type) else {
        return Err(not_a_config(object, model_type));
    };
    let config = match family {
        Family::Gpt2 => gpt2_config(&fields)?,
        Family::Bert | Family::Roberta => bert_config(&fields, family)?,
        Family::Phi | Family::GptNeox => parallel_config(&fields, family)?,
        _ => llama_config(&fields, family)?,
    };
    Ok(Architecture::Transformer(config))
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
    let supported = Family::supported_list();
    if tokenizer {
        "it looks like a tokenizer file, not a model's config.json; give the config.json in the same folder.".to_string()
    } else if object.contains_key("weight_map") {
        "it is the index of a sharded checkpoint; give one of its .safetensors shards, or the config.json in the same folder.".to_string()
    } else if model_type.is_empty() {
        format!(
            "it has no \"model_type\", so it is not a model's config.json (or not one gputune reads: {supported}, vit); give the config.json that sits next to the weights."
        )
    } else if model_type == "gemma3" || object.contains_key("text_config") {
        format!(
            "\"{model_type}\" is a multimodal model (a vision tower beside the language model), which gputune does not size; give the config of its text model (model_type gemma3_text for Gemma 3) or choose a preset."
        )
    } else if matches!(model_type, "t5" | "mt5" | "umt5" | "bart" | "mbart") {
        format!(
            "\"{model_type}\" is an encoder-decoder model, which gputune does not size yet (it reads {supported}, vit); choose the closest preset and allow a wide margin."
        )
    } else {
        format!(
            "its model type \"{model_type}\" is not one gputune knows the layout of ({supported}, vit), and a guess from similar fields can be off by 30 %; choose the closest preset and allow a wide margin."
        )
    }
}

/// Llama-style decoders: RMSNorm, rotary positions, gated MLP, mostly without biases.
fn llama_config(fields: &Fields, family: Family) -> Result<TransformerConfig, String> {
    let heads = fields.required("num_attention_heads")?;
    // Llama's (and Qwen3's, Gemma's) attention_bias puts biases on q, k, v and o; Qwen2 always
    // has them on q, k, v only; Mistral and Phi-3 have none.
    let attention_bias = match family {
        Family::Llama | Family::Qwen3 | Family::Gemma | Family::Gemma2 | Family::Gemma3 => {
            fields.flag("attention_bias", false)?
        }
        _ => false,
    };
    // The config classes' own defaults when a file leaves head_dim out.
    let default_head_dim = match family {
        Family::Gemma | Family::Gemma2 | Family::Gemma3 => Some(256),
        Family::Qwen3 => Some(128),
        _ => None,
    };
    Ok(TransformerConfig {
        family,
        kind: TransformerKind::DecoderOnly,
        layers: fields.required("num_hidden_layers")?,
        hidden_size: fields.required("hidden_size")?,
        attention_heads: heads,
        kv_heads: fields.optional("num_key_value_heads")?.unwrap_or(heads),
        head_dim: fields.optional("head_dim")?.or(default_head_dim),
        intermediate_size: fields.required("intermediate_size")?,
        vocab_size: fields.required("vocab_size")?,
        learned_positions: 0,
        mlp: MlpKind::SwiGlu,
        tied_embeddings: fields.tied(family)?,
        layer_norm_bias: false,
        qkv_bias: family == Family::Qwen2 || attention_bias,
        output_bias: attention_bias,
        dropout: fields.dropout(&["attention_dropout"], 0.0)?,
    })
}

/// Phi-1/1.5/2 and GPT-NeoX: attention and a GELU MLP side by side, LayerNorms and linears
/// with biases, rotary positions, an untied output head.
fn parallel_config(fields: &Fields, family: Family) -> Result<TransformerConfig, String> {
    let heads = fields.required("num_attention_heads")?;
    let dropout_keys: &[&str] = match family {
        Family::Phi => &["resid_pdrop", "embd_pdrop", "attention_dropout"],
        _ => &["hidden_dropout", "attention_dropout"],
    };
    Ok(TransformerConfig {
        family,
        kind: TransformerKind::DecoderOnly,
        layers: fields.required("num_hidden_layers")?,
        hidden_size: fields.required("hidden_size")?,
        attention_heads: heads,
        kv_heads: fields.optional("num_key_value_heads")?.unwrap_or(heads),
        head_dim: None,
        intermediate_size: fields.required("intermediate_size")?,
        vocab_size: fields.required("vocab_size")?,
        learned_positions: 0,
        mlp: MlpKind::Gelu,
        tied_embeddings: fields.tied(family)?,
        layer_norm_bias: true,
        qkv_bias: family == Family::Phi || fields.flag("attention_bias", true)?,
        output_bias: family == Family::Phi || fields.flag("attention_bias", true)?,
        dropout: fields.dropout(dropout_keys, 0.0)?,
    })
}

/// GPT-2 and BERT share the layout: LayerNorm with bias, biased linears, GELU MLP, dropout.
pub(super) fn gelu_transformer(
    family: Family,
    kind: TransformerKind,
    sizes: [u64; 6],
) -> TransformerConfig {
    let [
        layers,
        hidden_size,
        attention_heads,
        intermediate_size,
        vocab_size,
        learned_positions,
    ] = sizes;
    TransformerConfig {
        family,
        kind,
        layers,
        hidden_size,
        attention_heads,
        kv_heads: attention_heads,
        head_dim: None,
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

fn gpt2_config(fields: &Fields) -> Result<TransformerConfig, String> {
    let hidden = fields.required("n_embd")?;
    let intermediate = fields
        .optional("n_inner")?
        .unwrap_or(hidden.saturating_mul(4));
    let mut config = gelu_transformer(
        Family::Gpt2,
        TransformerKind::DecoderOnly,
        [
            fields.required("n_layer")?,
            hidden,
            fields.required("n_head")?,
            intermediate,
            fields.required("vocab_size")?,
            fields.required("n_positions")?,
        ],
    );
    config.tied_embeddings = fields.tied(Family::Gpt2)?;
    config.dropout = fields.dropout(&["resid_pdrop", "embd_pdrop", "attn_pdrop"], 0.1)?;
    Ok(config)
}

fn bert_config(fields: &Fields, family: Family) -> Result<TransformerConfig, String> {
    let mut config = gelu_transformer(
        family,
        TransformerKind::EncoderOnly,
        [
            fields.required("num_hidden_layers")?,
            fields.required("hidden_size")?,
            fields.required("num_attention_heads")?,
            fields.required("intermediate_size")?,
            fields.required("vocab_size")?,
            fields.required("max_position_embeddings")?,
        ],
    );
    config.tied_embeddings = fields.tied(family)?;
    config.dropout = fields.dropout(
        &["hidden_dropout_prob", "attention_probs_dropout_prob"],
        0.1,
    )?;
    Ok(config)
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
