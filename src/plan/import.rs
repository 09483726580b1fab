//! Models from files: a Hugging Face `config.json`, or the header of a `.safetensors`
//! checkpoint (never its tensor data). Every failure is a `PlanError::ModelFile` that names the
//! file, says what is wrong with it and what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::PlanError;
use super::model::{Architecture, MlpKind, Model, TransformerConfig, TransformerKind, VitConfig};

/// Largest safetensors header read: real ones are a few MB even for the largest models.
const MAX_HEADER_BYTES: u64 = 100_000_000;
/// Largest config.json or shard index read: real ones are kilobytes (ViT's labels: ~70 kB).
const MAX_JSON_BYTES: u64 = 16 * 1024 * 1024;
/// The fields every Llama-like config.json has; a config with all of them is read as Llama-style.
const LLAMA_FIELDS: [&str; 5] = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
];

/// What a safetensors checkpoint holds, from its header alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckpointSummary {
    /// Elements of all tensors, except GPT-2's stored attention-mask buffers (not parameters).
    pub parameters: u64,
    /// Bytes stored per dtype as the file names it ("BF16", "F32", ...).
    pub bytes_by_dtype: BTreeMap<String, u64>,
}

/// Loads a model from a `config.json`, a `.safetensors` checkpoint (a config.json beside it is
/// used when present), or a folder holding a config.json.
pub fn load_model(path: &Path) -> Result<Model, PlanError> {
    if path.is_dir() {
        let config = path.join("config.json");
        if config.is_file() {
            return load_model(&config);
        }
        return Err(file_error(
            path,
            "this folder has no config.json; give the model's config.json or one of its .safetensors files.",
        ));
    }
    if looks_like_safetensors(path) {
        load_checkpoint(path)
    } else {
        let config = read_json(path, "config.json")?;
        let architecture =
            config_architecture(&config).map_err(|reason| file_error(path, reason))?;
        checked(
            path,
            Model {
                name: model_name(path),
                architecture,
                exact_parameter_count: None,
            },
        )
    }
}

/// Reads one safetensors file's header: parameter count and bytes per dtype.
pub fn read_safetensors_header(path: &Path) -> Result<CheckpointSummary, PlanError> {
    Ok(read_header(path)?.0)
}

fn file_error(path: &Path, reason: impl Into<String>) -> PlanError {
    PlanError::ModelFile {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

fn unreadable(path: &Path, error: std::io::Error) -> PlanError {
    file_error(
        path,
        format!(
            "it cannot be read ({error}); check that the path is right and the file is readable."
        ),
    )
}

/// The model's name: the folder holding the file (Hugging Face downloads are one folder per model).
fn model_name(path: &Path) -> String {
    path.parent()
        .and_then(Path::file_name)
        .and_then(|name| name.to_str())
        .filter(|name| !name.is_empty())
        .unwrap_or("custom")
        .to_string()
}

fn has_extension(path: &Path, extension: &str) -> bool {
    path.extension()
        .is_some_and(|found| found.eq_ignore_ascii_case(extension))
}

/// `.safetensors` by name, or (for files without a telling extension) an 8-byte plausible
/// header length followed by `{`.
fn looks_like_safetensors(path: &Path) -> bool {
    if has_extension(path, "safetensors") {
        return true;
    }
    if has_extension(path, "json") {
        return false;
    }
    let mut start = [0u8; 9];
    let read = File::open(path).and_then(|mut file| file.read_exact(&mut start));
    let mut length = [0u8; 8];
    length.copy_from_slice(&start[..8]);
    read.is_ok() && start[8] == b'{' && u64::from_le_bytes(length) <= MAX_HEADER_BYTES
}

fn read_json(path: &Path, expected: &str) -> Result<Value, PlanError> {
    let size = std::fs::metadata(path)
        .map_err(|error| unreadable(path, error))?
        .len();
    if size > MAX_JSON_BYTES {
        return Err(file_error(
            path,
            format!(
                "it is {} MB, far too large for a {expected} (a few kB); give the model's {expected}.",
                size / 1_000_000
            ),
        ));
    }
    let bytes = std::fs::read(path).map_err(|error| unreadable(path, error))?;
    serde_json::from_slice(&bytes).map_err(|error| {
        let what = if std::str::from_utf8(&bytes).is_err() {
            "it is not text (not UTF-8)".to_string()
        } else {
            format!("it is not valid JSON ({error})")
        };
        file_error(path, format!("{what}, so it is not a {expected}; give the model's config.json or a .safetensors checkpoint."))
    })
}

/// Runs the size and shape checks on a model read from `path`.
fn checked(path: &Path, model: Model) -> Result<Model, PlanError> {
    check_sizes(&model.architecture).map_err(|reason| file_error(path, reason))?;
    super::model_checks(&model).map_err(|error| match error {
        PlanError::InvalidInput(message) => file_error(
            path,
            format!(
                "{}; fix the file or use a preset that is close.",
                message.trim_end_matches('.')
            ),
        ),
        other => other,
    })?;
    Ok(model)
}

/// Refuses sizes no real model has, before any parameter arithmetic could overflow.
fn check_sizes(architecture: &Architecture) -> Result<(), String> {
    let sizes = match architecture {
        Architecture::Transformer(config) => vec![
            ("number of layers", config.layers, 100_000),
            ("hidden size", config.hidden_size, 1 << 20),
            ("number of attention heads", config.attention_heads, 1 << 20),
            ("number of key/value heads", config.kv_heads, 1 << 20),
            ("MLP size", config.intermediate_size, 1 << 22),
            ("vocabulary size", config.vocab_size, 1 << 24),
            ("number of positions", config.learned_positions, 1 << 24),
        ],
        Architecture::Vit(config) => vec![
            ("number of layers", config.layers, 100_000),
            ("hidden size", config.hidden_size, 1 << 20),
            ("number of attention heads", config.attention_heads, 1 << 20),
            ("MLP size", config.intermediate_size, 1 << 22),
            ("patch size", config.patch_size, 1 << 12),
            ("number of classes", config.classes, 1 << 24),
        ],
        Architecture::Cnn(_) => Vec::new(),
    };
    match sizes.into_iter().find(|&(_, value, limit)| value > limit) {
        Some((name, value, limit)) => Err(format!(
            "its {name} is {value}, beyond any real model (at most {limit}); the file is corrupted or not a model's config."
        )),
        None => Ok(()),
    }
}

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
fn config_architecture(config: &Value) -> Result<Architecture, String> {
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
fn gelu_transformer(kind: TransformerKind, sizes: [u64; 6]) -> TransformerConfig {
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

/// Tensor shapes by name, from one or more headers.
type Shapes = BTreeMap<String, Vec<u64>>;

fn dtype_bytes(dtype: &str) -> Option<u64> {
    match dtype {
        "F64" | "I64" | "U64" => Some(8),
        "F32" | "I32" | "U32" => Some(4),
        "F16" | "BF16" | "I16" | "U16" => Some(2),
        "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" | "F8_E8M0" => Some(1),
        // Packed sub-byte types (F4, F6_*) and types newer than this list: trust the offsets.
        _ => None,
    }
}

/// Reads the header only: 8 bytes of little-endian length, then that many bytes of JSON.
fn read_header(path: &Path) -> Result<(CheckpointSummary, Shapes), PlanError> {
    let corrupted = |what: String| {
        file_error(
            path,
            format!(
                "{what}; the file is corrupted or not a safetensors checkpoint: download it again."
            ),
        )
    };
    let mut file = File::open(path).map_err(|error| unreadable(path, error))?;
    let file_bytes = file
        .metadata()
        .map_err(|error| unreadable(path, error))?
        .len();
    if file_bytes < 8 {
        return Err(file_error(
            path,
            format!(
                "it is {file_bytes} bytes, too short for a safetensors file; the download is incomplete: download it again."
            ),
        ));
    }
    let mut length = [0u8; 8];
    file.read_exact(&mut length)
        .map_err(|error| unreadable(path, error))?;
    let header_bytes = u64::from_le_bytes(length);
    if header_bytes > MAX_HEADER_BYTES {
        return Err(corrupted(format!(
            "its header length is {header_bytes} bytes, more than the 100 MB any real checkpoint needs"
        )));
    }
    if 8 + header_bytes > file_bytes {
        return Err(file_error(
            path,
            format!(
                "it is truncated: its header needs {} bytes but the file has only {file_bytes}; the download is incomplete: download it again.",
                8 + header_bytes
            ),
        ));
    }
    let mut header = vec![0u8; header_bytes as usize];
    file.read_exact(&mut header)
        .map_err(|error| unreadable(path, error))?;
    let header: Value = serde_json::from_slice(&header)
        .map_err(|error| corrupted(format!("its header is not valid JSON ({error})")))?;
    let Some(entries) = header.as_object() else {
        return Err(corrupted(
            "its header is not a JSON object of tensors".to_string(),
        ));
    };
    let data_bytes = file_bytes - 8 - header_bytes;
    let mut summary = CheckpointSummary::default();
    let mut shapes = Shapes::new();
    for (name, entry) in entries
        .iter()
        .filter(|(name, _)| name.as_str() != "__metadata__")
    {
        let bad = || {
            corrupted(format!(
                "the tensor \"{name}\" has no valid dtype, shape and data_offsets"
            ))
        };
        let dtype = entry.get("dtype").and_then(Value::as_str).ok_or_else(bad)?;
        let numbers = |key: &str| -> Option<Vec<u64>> {
            entry
                .get(key)?
                .as_array()?
                .iter()
                .map(Value::as_u64)
                .collect()
        };
        let shape = numbers("shape").ok_or_else(bad)?;
        let (start, end) = match numbers("data_offsets").ok_or_else(bad)?[..] {
            [start, end] if start <= end => (start, end),
            _ => return Err(bad()),
        };
        if end > data_bytes {
            return Err(file_error(
                path,
                format!(
                    "it is truncated: the tensor \"{name}\" ends at data byte {end} but the file holds only {data_bytes}; the download is incomplete: download it again."
                ),
            ));
        }
        let elements = shape
            .iter()
            .try_fold(1u64, |product, &side| product.checked_mul(side))
            .ok_or_else(bad)?;
        if dtype_bytes(dtype).is_some_and(|size| elements.checked_mul(size) != Some(end - start)) {
            return Err(corrupted(format!(
                "the tensor \"{name}\" has {elements} {dtype} values but {} bytes of data",
                end - start
            )));
        }
        let is_mask_buffer =
            name.ends_with("attn.masked_bias") || (name.ends_with("attn.bias") && shape.len() == 4);
        if !is_mask_buffer {
            summary.parameters = summary.parameters.checked_add(elements).ok_or_else(bad)?;
        }
        *summary.bytes_by_dtype.entry(dtype.to_string()).or_default() += end - start;
        shapes.insert(name.clone(), shape);
    }
    Ok((summary, shapes))
}

/// `(shard, of)` from a name like `model-00001-of-00004.safetensors`.
fn shard_numbers(path: &Path) -> Option<(u64, u64)> {
    let stem = path.file_stem()?.to_str()?;
    let (before, of) = stem.rsplit_once("-of-")?;
    let (_, shard) = before.rsplit_once('-')?;
    Some((shard.parse().ok()?, of.parse().ok()?))
}

/// The shard files of the checkpoint `path` belongs to, from a `*.safetensors.index.json` in its
/// folder that lists it; just `path` when there is none.
fn shard_set(path: &Path) -> Result<Vec<PathBuf>, PlanError> {
    let folder = path
        .parent()
        .filter(|folder| !folder.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Some(file_name) = path.file_name().and_then(|name| name.to_str()) else {
        return Ok(vec![path.to_path_buf()]);
    };
    let mut indexes: Vec<PathBuf> = std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .filter_map(|entry| Some(entry.ok()?.path()))
                .collect()
        })
        .unwrap_or_default();
    indexes.retain(|candidate| {
        candidate
            .to_str()
            .is_some_and(|name| name.ends_with(".safetensors.index.json"))
    });
    indexes.sort();
    for index in indexes {
        let value = read_json(&index, "safetensors index")?;
        let shards: BTreeSet<&str> = value
            .get("weight_map")
            .and_then(Value::as_object)
            .map(|map| map.values().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !shards.contains(file_name) {
            continue;
        }
        let mut paths = Vec::new();
        for shard in shards {
            let shard_path = folder.join(shard);
            if Path::new(shard).file_name().and_then(|name| name.to_str()) != Some(shard)
                || !shard_path.is_file()
            {
                return Err(file_error(
                    path,
                    format!(
                        "the index {} lists the shard \"{shard}\", which is not in the folder; download every shard, or give the config.json alone.",
                        index.display()
                    ),
                ));
            }
            paths.push(shard_path);
        }
        return Ok(paths);
    }
    Ok(vec![path.to_path_buf()])
}

fn load_checkpoint(path: &Path) -> Result<Model, PlanError> {
    let shards = shard_set(path)?;
    let mut parameters: u64 = 0;
    let mut shapes = Shapes::new();
    for shard in &shards {
        let (summary, shard_shapes) = read_header(shard)?;
        parameters = parameters.saturating_add(summary.parameters);
        shapes.extend(shard_shapes);
    }
    // One shard of several: its tensors are only part of the model, so its count is no total.
    let complete = shards.len() > 1 || shard_numbers(path).is_none_or(|(_, of)| of <= 1);
    let mut name = model_name(path);
    if !complete {
        name.push_str(" (1 shard)");
    }
    let config = path.with_file_name("config.json");
    let architecture = if config.is_file() {
        config_architecture(&read_json(&config, "config.json")?)
            .map_err(|reason| file_error(&config, reason))?
    } else {
        infer_architecture(&shapes).map_err(|reason| file_error(path, reason))?
    };
    checked(
        path,
        Model {
            name,
            architecture,
            exact_parameter_count: complete.then_some(parameters),
        },
    )
}

/// The shape of the tensor named `suffix` (or ending in `.suffix`), when it is a matrix.
fn matrix<'a>(shapes: &'a Shapes, suffix: &str) -> Option<&'a [u64]> {
    shapes
        .iter()
        .find(|(name, shape)| {
            shape.len() == 2 && (name.as_str() == suffix || name.ends_with(&format!(".{suffix}")))
        })
        .map(|(_, shape)| shape.as_slice())
}

/// Distinct block indices `i` in names `...{marker}.{i}...{suffix}`.
fn block_count(shapes: &Shapes, marker: &str, suffix: &str) -> u64 {
    let indices: BTreeSet<u64> = shapes
        .keys()
        .filter(|name| name.ends_with(suffix))
        .filter_map(|name| {
            let segments: Vec<&str> = name.split('.').collect();
            segments
                .windows(2)
                .find(|pair| pair[0] == marker)
                .and_then(|pair| pair[1].parse().ok())
        })
        .collect();
    indices.len() as u64
}

const NEEDS_CONFIG: &str = "so gputune cannot tell its architecture from the tensor names; put the model's config.json in the same folder.";

/// A Llama-style or GPT-2-style architecture from tensor names and shapes (no config.json).
/// Head counts are not in a checkpoint: head size 128 (Llama-style) or 64 (GPT-2) is assumed.
fn infer_architecture(shapes: &Shapes) -> Result<Architecture, String> {
    if let (Some(query), Some(key)) = (
        matrix(shapes, "self_attn.q_proj.weight"),
        matrix(shapes, "self_attn.k_proj.weight"),
    ) {
        let (hidden, kv_width) = (query[1], key[0]);
        let head_dim = [128, 64]
            .into_iter()
            .find(|size| hidden % size == 0 && kv_width % size == 0 && kv_width > 0);
        let intermediate =
            matrix(shapes, "mlp.gate_proj.weight").or_else(|| matrix(shapes, "mlp.up_proj.weight"));
        let vocab =
            matrix(shapes, "embed_tokens.weight").or_else(|| matrix(shapes, "lm_head.weight"));
        let (Some(head_dim), Some(intermediate), Some(vocab)) = (head_dim, intermediate, vocab)
        else {
            return Err(format!(
                "it looks Llama-style but lacks the MLP or embedding tensors, or has unusual head sizes, {NEEDS_CONFIG}"
            ));
        };
        return Ok(Architecture::Transformer(TransformerConfig {
            kind: TransformerKind::DecoderOnly,
            layers: block_count(shapes, "layers", "self_attn.q_proj.weight"),
            hidden_size: hidden,
            attention_heads: hidden / head_dim,
            kv_heads: kv_width / head_dim,
            intermediate_size: intermediate[0],
            vocab_size: vocab[0],
            learned_positions: 0,
            mlp: MlpKind::SwiGlu,
            tied_embeddings: matrix(shapes, "lm_head.weight").is_none(),
            layer_norm_bias: false,
            qkv_bias: shapes
                .keys()
                .any(|name| name.ends_with("self_attn.q_proj.bias")),
            output_bias: shapes
                .keys()
                .any(|name| name.ends_with("self_attn.o_proj.bias")),
            dropout: false,
        }));
    }
    if let Some(attention) = matrix(shapes, "attn.c_attn.weight") {
        // GPT-2's Conv1D stores weights as [in, out].
        let hidden = attention[0];
        let parts = (
            matrix(shapes, "mlp.c_fc.weight"),
            matrix(shapes, "wte.weight"),
            matrix(shapes, "wpe.weight"),
        );
        let (Some(mlp), Some(tokens), Some(positions)) = parts else {
            return Err(format!(
                "it looks GPT-2-style but lacks the MLP or embedding tensors, {NEEDS_CONFIG}"
            ));
        };
        if hidden % 64 != 0 || attention[1] != 3 * hidden {
            return Err(format!(
                "it looks GPT-2-style but has an unusual attention shape, {NEEDS_CONFIG}"
            ));
        }
        let mut config = gelu_transformer(
            TransformerKind::DecoderOnly,
            [
                block_count(shapes, "h", "attn.c_attn.weight"),
                hidden,
                hidden / 64,
                mlp[1],
                tokens[0],
                positions[0],
            ],
        );
        config.tied_embeddings = matrix(shapes, "lm_head.weight").is_none();
        return Ok(Architecture::Transformer(config));
    }
    Err(format!(
        "its tensors are not those of a Llama-style or GPT-2-style model, {NEEDS_CONFIG}"
    ))
}
