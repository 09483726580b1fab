//! What to change when a setup does not fit, in order of what costs the least speed: an 8-bit
//! optimizer and chunked cross-entropy (almost free), gradient checkpointing (a forward pass
//! again), offloading the saved activations (copies over PCIe), pure bf16 (no speed, some
//! accuracy), and only then another method (LoRA, then QLoRA).

use super::batch::fits;
use super::cards::{GpuCard, supports_bf16};
use crate::plan::PlanError;
use crate::plan::memory::estimate;
use crate::plan::model::{Architecture, Model};
use gputune_formats::reports::plan::{Change, ChangeKind};
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Checkpointing, Method, Offload, Optimizer, Precision, Task, TrainingSetup,
};

/// The memory-saving changes, cheapest in speed first.
pub const FALLBACK_ORDER: [ChangeKind; 5] = [
    ChangeKind::EightBitOptimizer,
    ChangeKind::ChunkedCrossEntropy,
    ChangeKind::Checkpointing,
    ChangeKind::ActivationOffload,
    ChangeKind::PureBf16,
];

/// `setup` with one change made, or `None` where it does not apply.
pub fn with_change(
    kind: ChangeKind,
    setup: &TrainingSetup,
    model: &Model,
    card: &GpuCard,
) -> Option<TrainingSetup> {
    let text_model = matches!(model.architecture, Architecture::Transformer(_));
    let mut changed = *setup;
    match kind {
        ChangeKind::Precision => changed.precision = preferred_precision(card),
        ChangeKind::EightBitOptimizer => {
            if !matches!(setup.optimizer, Optimizer::Adamw | Optimizer::AdamwFused)
                || setup.offload != Offload::None
            {
                return None;
            }
            changed.optimizer = if matches!(setup.method, Method::Qlora { .. }) {
                Optimizer::PagedAdamw8bit
            } else {
                Optimizer::Adamw8bit
            };
        }
        ChangeKind::ChunkedCrossEntropy => {
            if !text_model || setup.task != Task::LanguageModel || setup.chunked_cross_entropy {
                return None;
            }
            changed.chunked_cross_entropy = true;
        }
        ChangeKind::Checkpointing => changed.checkpointing = Checkpointing::Full,
        // Offloading follows checkpointing: what waits on the CPU is then each block's input,
        // which every trainer offloads (Hugging Face's only with checkpointing).
        ChangeKind::ActivationOffload => {
            if !text_model || setup.activation_offload || setup.checkpointing != Checkpointing::Full
            {
                return None;
            }
            changed.activation_offload = true;
        }
        ChangeKind::PureBf16 => {
            if !supports_bf16(&card.architecture)
                || !matches!(setup.precision, Precision::Bf16Mixed | Precision::Fp32)
            {
                return None;
            }
            changed.precision = Precision::Bf16;
        }
        ChangeKind::Method => return None,
    }
    (changed != *setup).then_some(changed)
}

/// The precision the card's advice prefers: bf16 mixed where bf16 is fast, else fp16 mixed.
pub fn preferred_precision(card: &GpuCard) -> Precision {
    if supports_bf16(&card.architecture) {
        Precision::Bf16Mixed
    } else {
        Precision::Fp16Mixed
    }
}

/// The instruction for a change that turns `before` into `after`.
pub fn advice(kind: ChangeKind, after: &TrainingSetup) -> String {
    match kind {
        ChangeKind::Precision => match after.precision {
            Precision::Fp16Mixed => "train in fp16 mixed precision (with loss scaling)".into(),
            other => format!(
                "train in {} mixed precision",
                other.name().trim_end_matches("-mixed")
            ),
        },
        ChangeKind::EightBitOptimizer if after.optimizer == Optimizer::PagedAdamw8bit => {
            "use paged 8-bit AdamW (bitsandbytes)".into()
        }
        ChangeKind::EightBitOptimizer => "use 8-bit AdamW (bitsandbytes)".into(),
        ChangeKind::ChunkedCrossEntropy => {
            "compute the loss in chunks (chunked cross-entropy)".into()
        }
        ChangeKind::Checkpointing => "turn on gradient checkpointing".into(),
        ChangeKind::ActivationOffload => "offload the saved activations to the CPU".into(),
        ChangeKind::PureBf16 => "train in pure bf16 (bf16 weights and optimizer states)".into(),
        ChangeKind::Method => match after.method {
            Method::Lora { rank, targets } | Method::Qlora { rank, targets, .. } => format!(
                "use {}, rank {rank} on {}",
                if matches!(after.method, Method::Qlora { .. }) {
                    "QLoRA"
                } else {
                    "LoRA"
                },
                match targets {
                    LoraTargets::AllLinear => "all linear layers",
                    LoraTargets::Attention => "the attention projections",
                }
            ),
            Method::Full => "train every parameter (full fine-tune)".into(),
        },
    }
}

/// The methods to try after `method`, cheapest in quality first: full → LoRA → QLoRA.
pub fn methods_after(method: &Method, model: &Model) -> Vec<Method> {
    let (rank, targets) = match *method {
        Method::Lora { rank, targets } | Method::Qlora { rank, targets, .. } => (rank, targets),
        Method::Full => (16, LoraTargets::AllLinear),
    };
    if matches!(model.architecture, Architecture::Cnn(_))
        || model.lora_target_shapes(targets).is_empty()
    {
        return Vec::new();
    }
    let lora = Method::Lora { rank, targets };
    let qlora = Method::Qlora {
        rank,
        targets,
        double_quantization: true,
    };
    match method {
        Method::Full => vec![lora, qlora],
        Method::Lora { .. } => vec![qlora],
        Method::Qlora { .. } => Vec::new(),
    }
}

/// Tests setups against one card at micro-batch 1.
pub struct Probe<'a> {
    pub model: &'a Model,
    pub card: &'a GpuCard,
    /// Accumulation steps at micro-batch 1 (held gradients count when above 1).
    pub steps_at_one: u64,
}

impl Probe<'_> {
    /// Per-GPU bytes of `setup` at micro-batch 1.
    pub fn bytes(&self, setup: &TrainingSetup) -> Result<u64, PlanError> {
        Ok(estimate(self.model, &self.at_one(setup))?.total())
    }

    pub fn fits(&self, setup: &TrainingSetup) -> Result<bool, PlanError> {
        let breakdown = estimate(self.model, &self.at_one(setup))?;
        Ok(fits(&breakdown, self.card.memory_bytes))
    }

    fn at_one(&self, setup: &TrainingSetup) -> TrainingSetup {
        TrainingSetup {
            micro_batch: 1,
            gradient_accumulation_steps: self.steps_at_one,
            ..*setup
        }
    }

    /// `base` with `kinds` made in order (those that do not apply are left out).
    fn rebuild(&self, base: &TrainingSetup, kinds: &[ChangeKind]) -> TrainingSetup {
        kinds.iter().fold(*base, |setup, &kind| {
            with_change(kind, &setup, self.model, self.card).unwrap_or(setup)
        })
    }

    /// The fewest fallbacks, cheapest first, that make `base` fit at micro-batch 1: each one
    /// that lowers memory is taken in turn until it fits, then every one the rest do not need
    /// is dropped again, costliest first. `None` when all of them are not enough.
    pub fn fallbacks(
        &self,
        base: &TrainingSetup,
    ) -> Result<Option<(TrainingSetup, Vec<ChangeKind>)>, PlanError> {
        let mut current = *base;
        let mut taken = Vec::new();
        let mut current_bytes = self.bytes(&current)?;
        for kind in FALLBACK_ORDER {
            if self.fits(&current)? {
                break;
            }
            let Some(next) = with_change(kind, &current, self.model, self.card) else {
                continue;
            };
            let next_bytes = self.bytes(&next)?;
            if next_bytes < current_bytes {
                (current, current_bytes) = (next, next_bytes);
                taken.push(kind);
            }
        }
        if !self.fits(&current)? {
            return Ok(None);
        }
        for index in (0..taken.len()).rev() {
            let mut fewer = taken.clone();
            fewer.remove(index);
            let candidate = self.rebuild(base, &fewer);
            if self.fits(&candidate)? {
                taken = fewer;
            }
        }
        Ok(Some((self.rebuild(base, &taken), taken)))
    }

    /// The changes from `yours` to `kinds` made on `base`, each with its memory so far.
    pub fn describe(
        &self,
        base: &TrainingSetup,
        leading: &[ChangeKind],
        kinds: &[ChangeKind],
    ) -> Result<Vec<Change>, PlanError> {
        let mut setup = *base;
        let mut changes = Vec::new();
        let bytes = self.bytes(base)?;
        for &kind in leading {
            changes.push(Change {
                kind,
                advice: advice(kind, base),
                per_gpu_bytes: bytes,
            });
        }
        for &kind in kinds {
            if let Some(next) = with_change(kind, &setup, self.model, self.card) {
                setup = next;
                changes.push(Change {
                    kind,
                    advice: advice(kind, &setup),
                    per_gpu_bytes: self.bytes(&setup)?,
                });
            }
        }
        Ok(changes)
    }
}
