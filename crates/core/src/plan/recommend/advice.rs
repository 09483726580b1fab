//! Precision and multi-GPU advice for a card, and the time a run takes.

use super::cards::{GpuCard, supports_bf16};
use crate::plan::memory::parameter_counts;
use crate::plan::model::Model;
use gputune_formats::reports::plan_setup::{Attention, Method, Precision, TrainingSetup};

/// Advice on precision and multi-GPU settings for this card and setup.
pub fn advice(card: &GpuCard, setup: &TrainingSetup) -> Vec<String> {
    let mut lines = Vec::new();
    if supports_bf16(&card.architecture) {
        lines.push(format!(
            "{} ({}) supports bf16: prefer bf16 mixed precision, which needs no loss scaling.",
            card.name, card.architecture
        ));
        if matches!(setup.precision, Precision::Bf16Mixed | Precision::Bf16)
            && setup.attention == Attention::Flash
        {
            lines.push(
                "bf16 with flash attention has a known failure mode where the loss suddenly blows up: if it does, \
                 switch to fp16 with loss scaling or to eager attention."
                    .to_string(),
            );
        }
    } else {
        lines.push(format!(
            "{} ({}) has no fast bf16: use fp16 mixed precision with dynamic loss scaling.",
            card.name, card.architecture
        ));
        if matches!(setup.precision, Precision::Bf16Mixed | Precision::Bf16) {
            lines.push(
                "bf16 is emulated or unsupported on this GPU: expect it to be slow or to fail."
                    .to_string(),
            );
        }
    }
    if setup.gpus > 1 && card.architecture == "Ada" && card.name.starts_with("RTX") {
        lines.push(
            "GeForce RTX 40-series cards have no peer-to-peer access: set NCCL_P2P_DISABLE=1 (and \
             NCCL_IB_DISABLE=1 without InfiniBand) or NCCL may hang."
                .to_string(),
        );
    }
    lines
}

/// Seconds to train on `tokens` tokens: 6 FLOPs per parameter per token for full training
/// (forward 2, backward 4), 4 per frozen parameter plus 6 per adapter parameter for LoRA
/// (no weight gradients for frozen weights), over the GPUs' dense bf16 rate at `utilization`.
pub fn training_seconds(
    model: &Model,
    method: &Method,
    tokens: f64,
    card: &GpuCard,
    gpus: u64,
    utilization: f64,
) -> f64 {
    let counts = parameter_counts(model, method);
    let flops_per_token = match method {
        Method::Full => 6.0 * counts.total,
        _ => 4.0 * counts.total + 6.0 * counts.trainable,
    };
    let rate = card.dense_bf16_tflops * 1e12 * gpus.max(1) as f64 * utilization.clamp(0.01, 1.0);
    flops_per_token * tokens.max(0.0) / rate
}
