//! The VRAM planner: pure arithmetic from a model and a training setup to per-GPU memory and
//! recommendations. No egui, no threads, no hardware (docs/architecture.md).

pub mod activations;
mod cnn;
pub mod export;
pub mod family;
pub mod import;
pub mod measure;
pub mod memory;
pub mod model;
mod presets;
pub mod recommend;
mod value_types;

use model::{Architecture, Model};

/// Why a plan cannot be made. Each message names the bad value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    InvalidInput(String),
    #[error(
        "Unknown model \"{name}\": give a preset (see `gputune plan --list-models`) or the path of a config.json or .safetensors file."
    )]
    UnknownModel { name: String },
    /// A model file (config.json, .safetensors) that cannot be used; `reason` says what is
    /// wrong with it and what to do.
    #[error("Cannot use the model file {path}: {reason}")]
    ModelFile { path: String, reason: String },
}

/// Checks that a model's shape makes sense (no zero layers, heads that divide the width).
pub fn model_checks(model: &Model) -> Result<(), PlanError> {
    let invalid = |what: &str| {
        Err(PlanError::InvalidInput(format!(
            "The model \"{}\" has {what}.",
            model.name
        )))
    };
    match &model.architecture {
        Architecture::Transformer(config) => {
            if config.layers == 0 {
                return invalid("0 layers");
            }
            if config.hidden_size == 0 || config.attention_heads == 0 || config.kv_heads == 0 {
                return invalid("a zero hidden size or head count");
            }
            let head_width_fits =
                config.head_dim.is_some() || config.hidden_size % config.attention_heads == 0;
            if !head_width_fits
                || config.attention_heads % config.kv_heads != 0
                || config.head_dim == Some(0)
            {
                return invalid("a hidden size or head counts that do not divide evenly");
            }
            if config.vocab_size == 0 || config.intermediate_size == 0 {
                return invalid("a zero vocabulary or MLP size");
            }
            if config.layers > 100_000
                || config.hidden_size > 1 << 20
                || config.vocab_size > 1 << 24
            {
                return invalid("sizes far beyond any real model");
            }
        }
        Architecture::Vit(config) => {
            if config.layers == 0
                || config.hidden_size == 0
                || config.attention_heads == 0
                || config.patch_size == 0
            {
                return invalid("0 layers, width, heads or patch size");
            }
        }
        Architecture::Cnn(_) => {}
    }
    Ok(())
}
