//! Micro-batch and gradient accumulation: the largest micro-batch that fits, and the pair that
//! reaches a target global batch exactly, or the nearest global batch, said so.

use crate::plan::PlanError;
use crate::plan::memory::estimate;
use crate::plan::model::Model;
use gputune_formats::reports::plan::MemoryBreakdown;
use gputune_formats::reports::plan_setup::TrainingSetup;

/// Whether a breakdown fits a card: its total (the allocator's reserve included, which
/// PyTorch gives back before it runs out of memory) and its safety margin, if any
/// (`MemoryBreakdown::safety_margin`: CNNs' workspaces, and the hole a loss-dominated full
/// fine-tune leaves in the default allocator; the measurements on a real GPU show no other
/// margin is needed, docs/planner.md).
pub fn fits(breakdown: &MemoryBreakdown, memory_bytes: u64) -> bool {
    (breakdown.total().saturating_add(breakdown.safety_margin) as f64) <= usable_bytes(memory_bytes)
}

/// What a card offers a training process: all of its memory (the plan's total counts the
/// CUDA context and the allocator's reserve).
pub fn usable_bytes(memory_bytes: u64) -> f64 {
    memory_bytes as f64
}

/// The largest micro-batch that fits (with the setup's own accumulation), or `None` if not
/// even 1 does.
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

/// The largest micro-batch that fits in one step and when gradients accumulate: accumulated
/// gradients are held through the next micro-batch's passes, so the second is never larger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxBatches {
    pub single_step: Option<u64>,
    pub accumulating: Option<u64>,
}

impl MaxBatches {
    /// Both limits for `setup` on a card with `memory_bytes`.
    pub fn find(
        model: &Model,
        setup: &TrainingSetup,
        memory_bytes: u64,
    ) -> Result<MaxBatches, PlanError> {
        let with_steps = |gradient_accumulation_steps| TrainingSetup {
            gradient_accumulation_steps,
            ..*setup
        };
        Ok(MaxBatches {
            single_step: max_micro_batch(model, &with_steps(1), memory_bytes)?,
            accumulating: max_micro_batch(model, &with_steps(2), memory_bytes)?,
        })
    }

    /// Whether `micro_batch` fits with `steps` accumulation steps.
    pub fn fits(&self, micro_batch: u64, steps: u64) -> bool {
        let limit = if steps > 1 {
            self.accumulating
        } else {
            self.single_step
        };
        limit.is_some_and(|limit| micro_batch >= 1 && micro_batch <= limit)
    }
}

/// A micro-batch, its accumulation steps and the global batch they make on `gpus` GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchChoice {
    pub micro_batch: u64,
    pub grad_accum_steps: u64,
    pub global_batch: u64,
}

impl BatchChoice {
    pub fn new(micro_batch: u64, grad_accum_steps: u64, gpus: u64) -> BatchChoice {
        BatchChoice {
            micro_batch,
            grad_accum_steps,
            global_batch: micro_batch
                .saturating_mul(grad_accum_steps)
                .saturating_mul(gpus.max(1)),
        }
    }

    /// The user's own micro-batch with the accumulation that reaches at least the target.
    pub fn with_micro_batch(micro_batch: u64, gpus: u64, target: Option<u64>) -> BatchChoice {
        let steps = target.map_or(1, |target| {
            gradient_accumulation_steps(target, micro_batch, gpus)
        });
        BatchChoice::new(micro_batch, steps, gpus)
    }
}

/// The recommended micro-batch and accumulation, and a sentence when the global batch is not
/// the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchAnswer {
    pub choice: BatchChoice,
    pub note: Option<String>,
}

/// The micro-batch and accumulation for `target` global samples on `gpus` GPUs: the largest
/// micro-batch that fits and divides the target's share per GPU, as long as it is at least
/// half of the largest usable one; otherwise the micro-batch from that half up whose global
/// batch comes nearest the target, with a note naming both. Without a target, the largest
/// micro-batch that fits, without accumulation. `None` when not even micro-batch 1 fits.
pub fn choose_batch(max: MaxBatches, gpus: u64, target: Option<u64>) -> Option<BatchAnswer> {
    let gpus = gpus.max(1);
    let single_step = max.single_step?;
    let answer = |choice: BatchChoice, note: Option<String>| Some(BatchAnswer { choice, note });
    let Some(target) = target else {
        return answer(BatchChoice::new(single_step, 1, gpus), None);
    };
    let target = target.max(1);
    if target < gpus {
        return answer(
            BatchChoice::new(1, 1, gpus),
            Some(format!(
                "A global batch of {target} is less than one sample per GPU: {gpus} GPUs take at least {gpus}."
            )),
        );
    }
    let per_gpu = target.div_ceil(gpus);
    if max.fits(per_gpu, 1) && target % gpus == 0 {
        return answer(BatchChoice::new(per_gpu, 1, gpus), None);
    }
    let Some(accumulating) = max.accumulating else {
        let choice = BatchChoice::new(single_step.min(per_gpu), 1, gpus);
        return answer(
            choice,
            Some(format!(
                "Accumulating gradients does not fit (they are held through the next micro-batch): {} is the largest global batch, short of your target of {target}.",
                batch_product(choice, gpus)
            )),
        );
    };
    // The largest micro-batch worth using: the whole share in one step if it fits, else the
    // largest that fits while accumulating.
    let cap = if max.fits(per_gpu, 1) {
        per_gpu
    } else {
        accumulating.min(per_gpu)
    };
    let exact = (target % gpus == 0)
        .then(|| {
            (1..=cap)
                .rev()
                .find(|&micro| per_gpu % micro == 0 && max.fits(micro, per_gpu / micro))
        })
        .flatten();
    if let Some(micro) = exact
        && micro * 2 >= cap
    {
        return answer(BatchChoice::new(micro, per_gpu / micro, gpus), None);
    }
    let nearest = nearest_global_batch(max, gpus, target, cap)
        .unwrap_or_else(|| BatchChoice::new(1, gradient_accumulation_steps(target, 1, gpus), gpus));
    let product = batch_product(nearest, gpus);
    let note = match exact {
        _ if target % gpus != 0 => format!(
            "A global batch of {target} cannot be split evenly over {gpus} GPUs: {product} is the nearest."
        ),
        Some(micro) => format!(
            "No micro-batch from {} to {cap} divides a global batch of {target}: {product} is the nearest; micro-batch {micro} would reach it exactly ({}).",
            cap.div_ceil(2).max(1),
            batch_product(BatchChoice::new(micro, per_gpu / micro, gpus), gpus)
        ),
        None => format!(
            "No micro-batch that fits divides a global batch of {target}: {product} is the nearest."
        ),
    };
    answer(nearest, Some(note))
}

/// The micro-batch from `cap / 2` to `cap` and the accumulation whose global batch comes
/// nearest `target` (ties: the larger micro-batch, then the fewer steps).
fn nearest_global_batch(max: MaxBatches, gpus: u64, target: u64, cap: u64) -> Option<BatchChoice> {
    let mut best: Option<(u64, BatchChoice)> = None;
    for micro in cap.div_ceil(2).max(1)..=cap {
        let per_step = micro * gpus;
        let below = (target / per_step).max(1);
        for steps in [below, below + 1] {
            if !max.fits(micro, steps) {
                continue;
            }
            let choice = BatchChoice::new(micro, steps, gpus);
            let distance = choice.global_batch.abs_diff(target);
            let better = match best {
                None => true,
                Some((best_distance, best_choice)) => {
                    (distance, std::cmp::Reverse(micro), steps)
                        < (
                            best_distance,
                            std::cmp::Reverse(best_choice.micro_batch),
                            best_choice.grad_accum_steps,
                        )
                }
            };
            if better {
                best = Some((distance, choice));
            }
        }
    }
    best.map(|(_, choice)| choice)
}

/// "8 × 4 = 32", or "8 × 4 × 2 GPUs = 64".
pub fn batch_product(choice: BatchChoice, gpus: u64) -> String {
    if gpus > 1 {
        format!(
            "{} × {} × {gpus} GPUs = {}",
            choice.micro_batch, choice.grad_accum_steps, choice.global_batch
        )
    } else {
        format!(
            "{} × {} = {}",
            choice.micro_batch, choice.grad_accum_steps, choice.global_batch
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{BatchChoice, MaxBatches, choose_batch};

    fn max(single_step: u64, accumulating: u64) -> MaxBatches {
        MaxBatches {
            single_step: Some(single_step),
            accumulating: Some(accumulating),
        }
    }

    fn chosen(max: MaxBatches, gpus: u64, target: Option<u64>) -> (BatchChoice, Option<String>) {
        let answer = choose_batch(max, gpus, target).unwrap_or_else(|| panic!("an answer"));
        (answer.choice, answer.note)
    }

    #[test]
    fn the_largest_divisor_that_fits_reaches_the_target_exactly() {
        // Up to 11 fits: 8 × 4 = 32, not 3 × 11 = 33.
        assert_eq!(
            chosen(max(11, 11), 1, Some(32)),
            (BatchChoice::new(8, 4, 1), None)
        );
        assert_eq!(
            chosen(max(11, 11), 1, Some(33)),
            (BatchChoice::new(11, 3, 1), None)
        );
        // The whole target in one step when it fits.
        assert_eq!(
            chosen(max(491, 480), 1, Some(32)),
            (BatchChoice::new(32, 1, 1), None)
        );
        // Per GPU: 32 over 2 GPUs is 16 each, 4 × 4.
        assert_eq!(
            chosen(max(5, 5), 2, Some(32)),
            (BatchChoice::new(4, 4, 2), None)
        );
    }

    #[test]
    fn accumulation_that_needs_more_memory_lowers_the_micro_batch() {
        // 16 fits in one step, but accumulating holds gradients: only 6 fits then.
        assert_eq!(
            chosen(max(16, 6), 1, Some(16)),
            (BatchChoice::new(16, 1, 1), None)
        );
        assert_eq!(
            chosen(max(12, 6), 1, Some(16)),
            (BatchChoice::new(4, 4, 1), None)
        );
    }

    #[test]
    fn without_an_exact_divisor_the_nearest_global_batch_is_named() {
        let (choice, note) = chosen(max(11, 11), 1, Some(31));
        assert_eq!(choice, BatchChoice::new(10, 3, 1));
        let note = note.unwrap_or_default();
        assert!(note.contains("10 × 3 = 30 is the nearest"), "{note}");
        assert!(
            note.contains("micro-batch 1 would reach it exactly (1 × 31 = 31)"),
            "{note}"
        );
        // 30 samples cannot be split over 4 GPUs.
        let (choice, note) = chosen(max(8, 8), 4, Some(30));
        assert_eq!(choice.global_batch, 32);
        assert!(
            note.unwrap_or_default()
                .contains("cannot be split evenly over 4 GPUs")
        );
    }

    #[test]
    fn no_target_takes_the_largest_micro_batch_and_nothing_fitting_gives_none() {
        assert_eq!(
            chosen(max(491, 480), 1, None),
            (BatchChoice::new(491, 1, 1), None)
        );
        let nothing = MaxBatches {
            single_step: None,
            accumulating: None,
        };
        assert_eq!(choose_batch(nothing, 1, Some(32)), None);
        let (choice, note) = chosen(max(4, 4), 8, Some(4));
        assert_eq!(choice, BatchChoice::new(1, 1, 8));
        assert!(
            note.unwrap_or_default()
                .contains("less than one sample per GPU")
        );
    }

    #[test]
    fn when_accumulating_does_not_fit_the_global_batch_falls_short_and_says_so() {
        let single_only = MaxBatches {
            single_step: Some(6),
            accumulating: None,
        };
        let (choice, note) = chosen(single_only, 1, Some(32));
        assert_eq!(choice, BatchChoice::new(6, 1, 1));
        assert!(
            note.unwrap_or_default()
                .contains("short of your target of 32")
        );
    }
}
