//! Models from files: a Hugging Face `config.json`, or the header of a `.safetensors`
//! checkpoint (never its tensor data). Every failure is a `PlanError::ModelFile` that names the
//! file, says what is wrong with it and what to do.
//!
//! `config` reads a Hugging Face config.json; `safetensors` reads checkpoint headers, finds the
//! other shards and infers an architecture from tensor names when no config.json is beside them.

mod config;
mod safetensors;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::PlanError;
use super::model::{Architecture, Model};
use crate::fsafe::{self, FileError, Links};
use crate::text;
use config::config_architecture;
use safetensors::{load_checkpoint, looks_like_safetensors, read_header};

/// Largest config.json read: real ones are kilobytes (ViT's labels: ~70 kB).
const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;
/// Largest sharded checkpoint index read: one line per tensor, a few MB for the largest models.
const MAX_INDEX_BYTES: u64 = 16 * 1024 * 1024;

/// What a safetensors checkpoint holds, from its header alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
        // Whatever is there is read with `fsafe`: a FIFO or device named config.json is an
        // error that says so, not a hang.
        if fsafe::occupied(&config) {
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
        let config = read_json(path, "config.json", MAX_CONFIG_BYTES)?;
        let architecture =
            config_architecture(&config).map_err(|reason| file_error(path, reason))?;
        checked(
            path,
            Model {
                name: config_model_name(&config, path),
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

/// The error for a model file. The path and the reason (which may quote the file: a tensor
/// name, a model type) are shown with `text::printable`, so nothing in them reaches a terminal
/// as a control sequence.
fn file_error(path: &Path, reason: impl Into<String>) -> PlanError {
    PlanError::ModelFile {
        path: shown(path),
        reason: text::printable(&reason.into()),
    }
}

/// A path as messages show it: control and bidirectional characters escaped.
fn shown(path: &Path) -> String {
    text::printable(&path.to_string_lossy())
}

/// Whether anything is at `path`, a dangling symbolic link included.
fn unreadable(path: &Path, error: std::io::Error) -> PlanError {
    file_error(
        path,
        format!(
            "it cannot be read ({error}); check that the path is right and the file is readable."
        ),
    )
}

/// The error for a file `fsafe` would not open or read; `expected` is what it should have been.
fn refused(path: &Path, error: FileError, expected: &str) -> PlanError {
    match error {
        FileError::NotRegular { kind, .. } => file_error(
            path,
            format!(
                "it is {kind}, not a regular file, so it was not read; give the model's {expected}."
            ),
        ),
        FileError::TooLarge { bytes, .. } => file_error(
            path,
            format!(
                "it is {} MB, far too large for a {expected} (a few kB); give the model's {expected}.",
                bytes / 1_000_000
            ),
        ),
        FileError::NotFound { .. } => unreadable(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "it does not exist"),
        ),
        FileError::Symlink { .. } => file_error(
            path,
            format!("it is a symbolic link that was not followed; give the model's {expected}."),
        ),
        FileError::Unsafe { reason: detail, .. }
        | FileError::Read { detail, .. }
        | FileError::Write { detail, .. } => file_error(
            path,
            format!(
                "it cannot be read ({detail}); check that the path is right and the file is readable."
            ),
        ),
    }
}

/// Longest model name kept, in characters: a name is a label, not the file's contents.
const MAX_NAME_CHARS: usize = 120;

/// The name of a model without a config.json: the Hugging Face cache's repository, else the
/// folder holding the file.
fn model_name(path: &Path) -> String {
    let name = hub_repository(path).or_else(|| {
        path.parent()
            .and_then(Path::file_name)
            .and_then(|name| name.to_str())
            .filter(|name| !name.is_empty())
            .map(str::to_string)
    });
    shown_name(name.as_deref().unwrap_or("custom"))
}

/// The name of a model described by `config` (read from `path`): what the config says it is
/// (`_name_or_path`: a Hub id as it is, a local path by its last part), else the repository of
/// the Hugging Face cache it sits in, else its architecture (`architectures`, `model_type`).
/// Never the folder holding it: in the cache that is a snapshot's hash.
fn config_model_name(config: &Value, path: &Path) -> String {
    let text_field = |key: &str| {
        config
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|text| !text.is_empty())
    };
    let architecture = config
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|list| list.first())
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|text| !text.is_empty());
    let name = text_field("_name_or_path")
        .and_then(name_from_name_or_path)
        .or_else(|| hub_repository(path))
        .or_else(|| architecture.map(str::to_string))
        .or_else(|| text_field("model_type").map(str::to_string));
    shown_name(name.as_deref().unwrap_or("custom"))
}

/// `_name_or_path` as a name: a Hub id (`org/name`) as it is; a local path by its last part.
fn name_from_name_or_path(value: &str) -> Option<String> {
    let hub_id = value.split('/').count() <= 2
        && value.split('/').all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    if hub_id {
        return Some(value.to_string());
    }
    value
        .split(['/', '\\'])
        .rfind(|part| !part.is_empty() && *part != "." && *part != "..")
        .map(str::to_string)
}

/// `org/name` for a file in the Hugging Face cache (`models--org--name/snapshots/<hash>/...`).
fn hub_repository(path: &Path) -> Option<String> {
    let parts: Vec<&str> = path
        .components()
        .filter_map(|part| part.as_os_str().to_str())
        .collect();
    parts.windows(2).rev().find_map(|pair| {
        let repository = pair[0].strip_prefix("models--")?;
        (pair[1] == "snapshots" && !repository.is_empty())
            .then(|| repository.replacen("--", "/", 1))
    })
}

/// A name as labels show it: control and bidirectional characters escaped, and short.
fn shown_name(name: &str) -> String {
    let shown = text::printable(name);
    if shown.chars().count() <= MAX_NAME_CHARS {
        return shown;
    }
    let mut short: String = shown.chars().take(MAX_NAME_CHARS - 1).collect();
    short.push('…');
    short
}

/// Reads a JSON file of at most `limit_bytes` with `fsafe`: a FIFO, a device or a folder is
/// refused without being waited on, a larger file before it is read.
fn read_json(path: &Path, expected: &str, limit_bytes: u64) -> Result<Value, PlanError> {
    let bytes = fsafe::read_limited(path, limit_bytes, Links::Follow)
        .map_err(|error| refused(path, error, expected))?;
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
            ("head size", config.head_dim.unwrap_or(0), 1 << 16),
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
