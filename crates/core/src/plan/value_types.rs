//! How values are stored while a training step runs (bytes of the residual stream and of
//! matmuls, autocast or not): what the transformer and CNN activation counts both start from.

use gputune_formats::reports::plan_setup::{Method, Precision, TrainingSetup};

/// How values are stored while a step runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Types {
    /// Bytes of the residual stream (the blocks' inputs and outputs).
    pub residual: f64,
    /// Bytes of matmul inputs and outputs.
    pub compute: f64,
    /// Autocast: each linear layer casts an fp32 input to its own 16-bit copy, LayerNorm and
    /// softmax run in fp32.
    pub autocast: bool,
}

impl Types {
    pub fn of(setup: &TrainingSetup) -> Types {
        let mixed = matches!(setup.precision, Precision::Bf16Mixed | Precision::Fp16Mixed);
        // LoRA and QLoRA load the frozen model (embeddings included) in 16 bits, so its
        // residual stream is 16-bit even under autocast.
        let fp32_weights =
            setup.precision == Precision::Fp32 || (mixed && setup.method == Method::Full);
        Types {
            residual: if fp32_weights { 4.0 } else { 2.0 },
            compute: if setup.precision == Precision::Fp32 {
                4.0
            } else {
                2.0
            },
            autocast: mixed,
        }
    }
}
