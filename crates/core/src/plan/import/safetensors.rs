//! Safetensors checkpoints: header reading, shard sets, and inference from tensor names.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::config::{config_architecture, gelu_transformer};
use super::{
    CheckpointSummary, MAX_CONFIG_BYTES, MAX_INDEX_BYTES, checked, config_model_name, file_error,
    model_name, read_json, refused, shown, unreadable,
};
use crate::fsafe::{self, Links};
use crate::plan::PlanError;
use crate::plan::model::{
    Architecture, Family, MlpKind, Model, TransformerConfig, TransformerKind,
};

/// Largest safetensors header read: real ones are a few MB even for the largest models.
const MAX_HEADER_BYTES: u64 = 100_000_000;

fn has_extension(path: &Path, extension: &str) -> bool {
    path.extension()
        .is_some_and(|found| found.eq_ignore_ascii_case(extension))
}

/// `.safetensors` by name, or (for files without a telling extension) an 8-byte plausible
/// header length followed by `{`. Only a regular file is looked into (opened with `fsafe`, so
/// a FIFO or device is never waited on); anything else is left to the JSON reader to report.
pub(super) fn looks_like_safetensors(path: &Path) -> bool {
    if has_extension(path, "safetensors") {
        return true;
    }
    if has_extension(path, "json") {
        return false;
    }
    let mut start = [0u8; 9];
    let read = fsafe::open_regular(path, Links::Follow)
        .is_ok_and(|mut file| file.read_exact(&mut start).is_ok());
    let mut length = [0u8; 8];
    length.copy_from_slice(&start[..8]);
    read && start[8] == b'{' && u64::from_le_bytes(length) <= MAX_HEADER_BYTES
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
pub(super) fn read_header(path: &Path) -> Result<(CheckpointSummary, Shapes), PlanError> {
    let corrupted = |what: String| {
        file_error(
            path,
            format!(
                "{what}; the file is corrupted or not a safetensors checkpoint: download it again."
            ),
        )
    };
    // Opened with `fsafe`: a FIFO, a device or a folder is refused at once. Only the first
    // 8 + header bytes are ever read, whatever the file's size.
    let mut file = fsafe::open_regular(path, Links::Follow)
        .map_err(|error| refused(path, error, "safetensors checkpoint"))?;
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
        let value = read_json(&index, "safetensors index", MAX_INDEX_BYTES)?;
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
                || !fsafe::occupied(&shard_path)
            {
                return Err(file_error(
                    path,
                    format!(
                        "the index {} lists the shard \"{shard}\", which is not in the folder; download every shard, or give the config.json alone.",
                        shown(&index)
                    ),
                ));
            }
            paths.push(shard_path);
        }
        return Ok(paths);
    }
    Ok(vec![path.to_path_buf()])
}

pub(super) fn load_checkpoint(path: &Path) -> Result<Model, PlanError> {
    let shards = shard_set(path)?;
    let mut parameters: u64 = 0;
    let mut shapes = Shapes::new();
    for shard in &shards {
        let (summary, shard_shapes) = read_header(shard)?;
        parameters = parameters.saturating_add(summary.parameters);
        shapes.extend(shard_shapes);
    }
    // One shard of several: its tensors are only part of the model, so neither its count nor
    // its layers are the model's. Only a config.json beside it can say what the model is.
    let lone_shard = shard_numbers(path).filter(|&(_, of)| of > 1 && shards.len() == 1);
    let mut name = model_name(path);
    let config = path.with_file_name("config.json");
    // Whatever is there is read with `fsafe`: a FIFO or device named config.json is an error
    // that says so, not a hang.
    let architecture = if fsafe::occupied(&config) {
        let fields = read_json(&config, "config.json", MAX_CONFIG_BYTES)?;
        name = config_model_name(&fields, &config);
        config_architecture(&fields).map_err(|reason| file_error(&config, reason))?
    } else if let Some((shard, of)) = lone_shard {
        return Err(file_error(
            path,
            format!(
                "it is shard {shard} of {of}, and neither the checkpoint's index (model.safetensors.index.json) nor a config.json is in its folder, so its tensors are only part of the model; download the index and every shard, or give the model's config.json."
            ),
        ));
    } else {
        let (architecture, assumed_head_dim) =
            infer_architecture(&shapes).map_err(|reason| file_error(path, reason))?;
        if let Some(head_dim) = assumed_head_dim {
            name.push_str(&format!(" (no config.json: {head_dim}-wide heads assumed)"));
        }
        architecture
    };
    let complete = lone_shard.is_none();
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

/// A 1-D tensor's length.
fn vector_length(shapes: &Shapes, suffix: &str) -> Option<u64> {
    shapes
        .iter()
        .find(|(name, shape)| shape.len() == 1 && name.ends_with(&format!(".{suffix}")))
        .map(|(_, shape)| shape[0])
}

/// A Llama-style or GPT-2-style architecture from tensor names and shapes (no config.json).
/// Widths come from the shapes; the head count is in no tensor. Qwen3's per-head query norm
/// gives the head size; otherwise `model_name` says which head size was assumed (it only
/// matters for eager attention's score matrices).
fn infer_architecture(shapes: &Shapes) -> Result<(Architecture, Option<u64>), String> {
    if let (Some(query), Some(key)) = (
        matrix(shapes, "self_attn.q_proj.weight"),
        matrix(shapes, "self_attn.k_proj.weight"),
    ) {
        // Linear weights are [out, in].
        let (query_width, hidden, kv_width) = (query[0], query[1], key[0]);
        let query_norm = vector_length(shapes, "self_attn.q_norm.weight");
        let assumed = [128, 64]
            .into_iter()
            .find(|size| query_width % size == 0 && kv_width % size == 0 && kv_width > 0);
        let head_dim = query_norm.or(assumed);
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
        if head_dim == 0 || query_width % head_dim != 0 || kv_width % head_dim != 0 {
            return Err(format!(
                "its query and key widths ({query_width}, {kv_width}) do not split into heads of {head_dim}, {NEEDS_CONFIG}"
            ));
        }
        let family = if query_norm.is_some() {
            Family::Qwen3
        } else {
            Family::Llama
        };
        let config = TransformerConfig {
            family,
            kind: TransformerKind::DecoderOnly,
            layers: block_count(shapes, "layers", "self_attn.q_proj.weight"),
            hidden_size: hidden,
            attention_heads: query_width / head_dim,
            kv_heads: kv_width / head_dim,
            head_dim: (query_width != hidden).then_some(head_dim),
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
        };
        let assumed_head_dim = query_norm.is_none().then_some(head_dim);
        return Ok((Architecture::Transformer(config), assumed_head_dim));
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
            Family::Gpt2,
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
        // GPT-2's heads are 64 wide at every size it was released in.
        return Ok((Architecture::Transformer(config), Some(64)));
    }
    Err(format!(
        "its tensors are not those of a Llama-style or GPT-2-style model, {NEEDS_CONFIG}"
    ))
}
