//! Recommendations: does it fit, the largest micro-batch, gradient accumulation, a strategy
//! table, precision advice and a time estimate.

use serde::Serialize;

use super::PlanError;
use super::memory::{MemoryBreakdown, estimate, parameter_counts};
use super::model::{LoraTargets, Model};
use super::setup::{Attention, Checkpointing, Method, Precision, TrainingSetup};

const MIB: u64 = 1024 * 1024;

/// A GPU the planner can plan for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuCard {
    pub name: String,
    pub memory_bytes: u64,
    /// Chip generation, for precision advice ("Ada", "Ampere", "Hopper", ...).
    pub architecture: String,
    /// Dense bf16 tensor throughput with fp32 accumulation, TFLOP/s.
    pub dense_bf16_tflops: f64,
}

/// (name, MiB as NVML reports it, generation, dense bf16 TFLOP/s) from NVIDIA's datasheets.
const CARD_TABLE: [(&str, u64, &str, f64); 8] = [
    ("RTX 4090", 24_564, "Ada", 165.2),
    ("RTX 3090", 24_576, "Ampere", 71.0),
    ("RTX 4080", 16_376, "Ada", 97.5),
    ("RTX 5090", 32_607, "Blackwell", 209.5),
    ("A100 40GB", 40_960, "Ampere", 312.0),
    ("A100 80GB", 81_920, "Ampere", 312.0),
    ("H100 80GB", 81_559, "Hopper", 989.4),
    ("L40S", 46_068, "Ada", 362.1),
];

/// Every card in the built-in list.
pub fn cards() -> Vec<GpuCard> {
    CARD_TABLE
        .iter()
        .map(|&(name, mib, architecture, tflops)| GpuCard {
            name: name.to_string(),
            memory_bytes: mib * MIB,
            architecture: architecture.to_string(),
            dense_bf16_tflops: tflops,
        })
        .collect()
}

/// The built-in card with this name (case and spaces ignored: "rtx4090", "A100 80GB").
pub fn card(name: &str) -> Option<GpuCard> {
    let wanted: String = name
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_lowercase();
    cards()
        .into_iter()
        .find(|card| card.name.replace(' ', "").to_lowercase() == wanted)
}

/// The built-in card a detected GPU is (its memory as the driver reports it), or a card with the
/// GPU's own name, memory and generation and an RTX 4090's throughput when it is not listed.
/// The planner takes the three facts, not a device type: it knows nothing of drivers.
pub fn card_for_gpu(name: &str, memory_total_bytes: u64, architecture: Option<&str>) -> GpuCard {
    let listed = cards().into_iter().find(|card| name.contains(&card.name));
    match listed {
        Some(card) => GpuCard {
            memory_bytes: memory_total_bytes,
            ..card
        },
        None => GpuCard {
            name: name.to_string(),
            memory_bytes: memory_total_bytes,
            architecture: architecture.unwrap_or_default().to_string(),
            dense_bf16_tflops: CARD_TABLE[0].3,
        },
    }
}

/// Memory kept free so a run does not die on fragmentation spikes.
pub const SAFETY_MARGIN: f64 = 0.05;

/// Whether a breakdown fits a card with the safety margin.
pub fn fits(breakdown: &MemoryBreakdown, memory_bytes: u64) -> bool {
    (breakdown.total() as f64) <= memory_bytes as f64 * (1.0 - SAFETY_MARGIN)
}

/// The largest micro-batch that fits, or `None` if not even 1 does.
pub fn max_micro_batch(
    model: &Model,
    setup: &TrainingSetup,
    memory_bytes: u64,
) -> Result<Option<u64>, PlanError> {
    let fits_with = |micro_batch: u64| -> Result<bool, PlanError> {
        let breakdown = estimate(
            model,
            &TrainingSetup {
                micro_batch,
                ..*setup
            },
        )?;
        Ok(fits(&breakdown, memory_bytes))
    };
    if !fits_with(1)? {
        return Ok(None);
    }
    // Memory grows with the batch, so bisect between a size that fits and one that does not.
    let (mut low, mut high) = (1u64, 2u64);
    while high <= 1 << 16 && fits_with(high)? {
        low = high;
        high *= 2;
    }
    if high > 1 << 16 {
        return Ok(Some(low));
    }
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if fits_with(middle)? {
            low = middle;
        } else {
            high = middle;
        }
    }
    Ok(Some(low))
}

/// Accumulation steps so that micro-batch × GPUs × steps reaches at least the target.
pub fn gradient_accumulation_steps(target_global_batch: u64, micro_batch: u64, gpus: u64) -> u64 {
    let per_step = micro_batch.max(1).saturating_mul(gpus.max(1));
    target_global_batch.max(1).div_ceil(per_step).max(1)
}

/// One row of the strategy table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Strategy {
    pub method: &'static str,
    pub precision: &'static str,
    pub checkpointing: bool,
    /// Per-GPU memory at micro-batch 1.
    pub per_gpu_bytes_at_batch_1: u64,
    /// `None` when even micro-batch 1 does not fit.
    pub max_micro_batch: Option<u64>,
}

/// Full / LoRA / QLoRA × precision × checkpointing on this card, best first: what fits before
/// what does not, then full before LoRA before QLoRA, then no recomputation before
/// checkpointing, then the larger micro-batch.
pub fn strategy_table(
    model: &Model,
    setup: &TrainingSetup,
    card: &GpuCard,
) -> Result<Vec<Strategy>, PlanError> {
    let (rank, targets) = match setup.method {
        Method::Lora { rank, targets } | Method::Qlora { rank, targets, .. } => (rank, targets),
        Method::Full => (16, LoraTargets::AllLinear),
    };
    let mut methods = vec![Method::Full];
    if !model.lora_target_shapes(targets).is_empty() {
        methods.push(Method::Lora { rank, targets });
        methods.push(Method::Qlora {
            rank,
            targets,
            double_quantization: true,
        });
    }
    let precisions: Vec<Precision> = if supports_bf16(&card.architecture) {
        vec![Precision::Bf16Mixed, Precision::Bf16, Precision::Fp32]
    } else {
        vec![Precision::Fp16Mixed, Precision::Fp32]
    };
    let mut rows = Vec::new();
    for (method_rank, method) in methods.iter().enumerate() {
        for (precision_rank, &precision) in precisions.iter().enumerate() {
            if matches!(method, Method::Qlora { .. }) && precision == Precision::Fp32 {
                continue;
            }
            for checkpointing in [Checkpointing::None, Checkpointing::Full] {
                let candidate = TrainingSetup {
                    method: *method,
                    precision,
                    checkpointing,
                    micro_batch: 1,
                    ..*setup
                };
                let at_one = estimate(model, &candidate)?;
                let max_batch = max_micro_batch(model, &candidate, card.memory_bytes)?;
                rows.push((
                    (
                        max_batch.is_none(),
                        method_rank,
                        checkpointing == Checkpointing::Full,
                        precision_rank,
                        std::cmp::Reverse(max_batch),
                    ),
                    Strategy {
                        method: method.name(),
                        precision: precision.name(),
                        checkpointing: checkpointing == Checkpointing::Full,
                        per_gpu_bytes_at_batch_1: at_one.total(),
                        max_micro_batch: max_batch,
                    },
                ));
            }
        }
    }
    rows.sort_by_key(|(rank, _)| *rank);
    Ok(rows.into_iter().map(|(_, row)| row).collect())
}

fn supports_bf16(architecture: &str) -> bool {
    matches!(architecture, "Ampere" | "Ada" | "Hopper" | "Blackwell")
}

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

/// Everything the planner answers for one setup on one card.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    pub breakdown: MemoryBreakdown,
    pub fits: bool,
    pub max_micro_batch: Option<u64>,
    pub grad_accum_steps: u64,
    pub strategies: Vec<Strategy>,
    pub advice: Vec<String>,
    pub summary: String,
}

/// The full answer: breakdown, fit, largest micro-batch, accumulation, strategy table, advice.
pub fn recommend(
    model: &Model,
    setup: &TrainingSetup,
    card: &GpuCard,
    target_global_batch: u64,
) -> Result<Recommendation, PlanError> {
    let breakdown = estimate(model, setup)?;
    let fits_now = fits(&breakdown, card.memory_bytes);
    let max_batch = max_micro_batch(model, setup, card.memory_bytes)?;
    let micro_batch = if fits_now {
        setup.micro_batch
    } else {
        max_batch.unwrap_or(setup.micro_batch)
    };
    let grad_accum_steps =
        gradient_accumulation_steps(target_global_batch, micro_batch, setup.gpus);
    let strategies = strategy_table(model, setup, card)?;
    let summary = summary(
        setup,
        card,
        fits_now,
        max_batch,
        grad_accum_steps,
        &strategies,
    );
    Ok(Recommendation {
        breakdown,
        fits: fits_now,
        max_micro_batch: max_batch,
        grad_accum_steps,
        strategies,
        advice: advice(card, setup),
        summary,
    })
}

fn summary(
    setup: &TrainingSetup,
    card: &GpuCard,
    fits_now: bool,
    max_batch: Option<u64>,
    grad_accum_steps: u64,
    strategies: &[Strategy],
) -> String {
    let gpus = if setup.gpus > 1 {
        format!("{} × {}", setup.gpus, card.name)
    } else {
        card.name.clone()
    };
    match (fits_now, max_batch) {
        (true, Some(max)) => format!(
            "Fits on {gpus}: micro-batch {} (up to {max}) with {grad_accum_steps} accumulation step(s).",
            setup.micro_batch
        ),
        (false, Some(max)) => format!(
            "Micro-batch {} does not fit on {gpus}; use micro-batch {max} with {grad_accum_steps} accumulation step(s).",
            setup.micro_batch
        ),
        (_, None) => match strategies.iter().find(|row| row.max_micro_batch.is_some()) {
            Some(best) => format!(
                "Does not fit on {gpus} even at micro-batch 1; {} in {}{} fits (micro-batch up to {}).",
                best.method,
                best.precision,
                if best.checkpointing {
                    " with gradient checkpointing"
                } else {
                    ""
                },
                best.max_micro_batch.unwrap_or(1)
            ),
            None => format!(
                "Does not fit on {gpus} in any strategy: shard across more GPUs or offload to the CPU."
            ),
        },
    }
}
