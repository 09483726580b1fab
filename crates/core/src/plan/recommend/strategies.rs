//! The strategy table: full / LoRA / QLoRA × precision × checkpointing on one card.

use super::batch::max_micro_batch;
use super::cards::{GpuCard, supports_bf16};
use crate::plan::PlanError;
use crate::plan::memory::estimate;
use crate::plan::model::Model;
use gputune_formats::reports::plan::Strategy;
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{Checkpointing, Method, Precision, TrainingSetup};

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
                        method: *method,
                        precision,
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
