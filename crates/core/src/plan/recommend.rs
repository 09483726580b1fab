//! Recommendations: whether a setup fits, the micro-batch, accumulation and precision to use,
//! what to change when it does not fit (cheapest in speed first), a strategy table, precision
//! advice and a time estimate. The user's own setup stays beside the recommendation, with its
//! numbers, to compare.

mod advice;
mod batch;
mod cards;
mod fallback;
mod strategies;

pub use advice::{advice, training_seconds};
pub use batch::{
    BatchAnswer, BatchChoice, MaxBatches, batch_product, choose_batch, fits,
    gradient_accumulation_steps, max_micro_batch, usable_bytes,
};
pub use cards::{GpuCard, card, card_for_gpu, cards, supports_bf16};
pub use fallback::{FALLBACK_ORDER, methods_after, preferred_precision};
use gputune_formats::reports::plan::{Change, ChangeKind, PlannedSetup, Strategy};
pub use strategies::strategy_table;

use super::PlanError;
use super::memory::estimate;
use super::model::{Architecture, CnnConfig, Model};
use fallback::Probe;
use gputune_formats::reports::plan::MemoryBreakdown;
use gputune_formats::reports::plan_setup::{Precision, TrainingSetup};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The user's setup (or a changed one) at `choice`'s micro-batch and accumulation, with its
/// breakdown on `card`.
fn planned_setup(
    model: &Model,
    setup: TrainingSetup,
    choice: BatchChoice,
    card: &GpuCard,
) -> Result<PlannedSetup, PlanError> {
    let setup = TrainingSetup {
        micro_batch: choice.micro_batch,
        gradient_accumulation_steps: choice.grad_accum_steps,
        ..setup
    };
    let breakdown = estimate(model, &setup)?;
    Ok(PlannedSetup {
        setup,
        global_batch: choice.global_batch,
        per_gpu_bytes: breakdown.total(),
        breakdown_bytes: breakdown,
        fits: fits(&breakdown, card.memory_bytes),
    })
}

/// A planned setup's micro-batch, accumulation and global batch.
pub fn planned_batch(planned: &PlannedSetup) -> BatchChoice {
    BatchChoice {
        micro_batch: planned.setup.micro_batch,
        grad_accum_steps: planned.setup.gradient_accumulation_steps,
        global_batch: planned.global_batch,
    }
}

/// Everything the planner answers for one setup on one card.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    /// The user's setup at their own micro-batch (with the accumulation that reaches the
    /// target).
    pub breakdown: MemoryBreakdown,
    /// Whether the user's setup fits at their own micro-batch.
    pub fits: bool,
    /// The largest micro-batch the user's setup allows (with its accumulation).
    pub max_micro_batch: Option<u64>,
    /// The recommendation's accumulation steps (the user's when nothing fits).
    pub grad_accum_steps: u64,
    pub target_global_batch: Option<u64>,
    /// The user's own setup, as they set it, with its numbers.
    pub yours: PlannedSetup,
    /// What gputune recommends: `None` when nothing fits the card.
    pub recommended: Option<PlannedSetup>,
    /// Whether the user's method and memory options fit at some micro-batch: the
    /// recommendation then only chooses the micro-batch, accumulation and precision.
    pub fits_as_set_up: bool,
    /// From the user's setup to the recommendation, in order (micro-batch and accumulation
    /// are in the two rows).
    pub changes: Vec<Change>,
    /// About the recommended batch: the nearest global batch when none is exact, BatchNorm.
    pub batch_notes: Vec<String>,
    pub strategies: Vec<Strategy>,
    pub advice: Vec<String>,
    pub summary: String,
}

/// The full answer for a target global batch (see [`recommend_for_target`]).
pub fn recommend(
    model: &Model,
    setup: &TrainingSetup,
    card: &GpuCard,
    target_global_batch: u64,
) -> Result<Recommendation, PlanError> {
    recommend_for_target(model, setup, card, Some(target_global_batch))
}

/// The full answer: the user's row, the recommended setup (micro-batch, accumulation,
/// precision, and the fallbacks it needs), the strategy table and advice. Without a target,
/// the recommended micro-batch is the largest that fits, without accumulation.
pub fn recommend_for_target(
    model: &Model,
    setup: &TrainingSetup,
    card: &GpuCard,
    target: Option<u64>,
) -> Result<Recommendation, PlanError> {
    let yours_batch = BatchChoice::with_micro_batch(setup.micro_batch, setup.gpus, target);
    let yours = planned_setup(model, *setup, yours_batch, card)?;
    let yours_max = MaxBatches::find(model, setup, card.memory_bytes)?;
    let probe = Probe {
        model,
        card,
        steps_at_one: target.map_or(1, |target| {
            gradient_accumulation_steps(target, 1, setup.gpus)
        }),
    };
    let fits_as_set_up = probe.fits(setup)?;
    let route = if fits_as_set_up {
        Some(choose_precision(&probe, setup, target, yours_max)?)
    } else {
        with_fallbacks(&probe, setup)?
    };
    let mut recommended = None;
    let mut changes = Vec::new();
    let mut batch_notes = Vec::new();
    if let Some(route) = route {
        let max = MaxBatches::find(model, &route.chosen, card.memory_bytes)?;
        if let Some(answer) = choose_batch(max, setup.gpus, target) {
            let planned = planned_setup(model, route.chosen, answer.choice, card)?;
            changes = probe.describe(&route.base, &route.leading, &route.fallbacks)?;
            batch_notes = notes(model, &planned, answer.note)?;
            recommended = Some(planned);
        }
    }
    if let Some(target) = target
        && yours.global_batch != target
    {
        batch_notes.push(format!(
            "Your micro-batch {} gives a global batch of {}, not your target of {target}.",
            yours.setup.micro_batch,
            batch_product(planned_batch(&yours), yours.setup.gpus)
        ));
    }
    let strategies = strategy_table(model, setup, card)?;
    let summary = summary(
        card,
        setup.gpus,
        probe.bytes(setup)?,
        recommended.as_ref(),
        fits_as_set_up,
        &changes,
    );
    Ok(Recommendation {
        breakdown: yours.breakdown_bytes,
        fits: yours.fits,
        max_micro_batch: if yours_batch.grad_accum_steps > 1 {
            yours_max.accumulating
        } else {
            yours_max.single_step
        },
        grad_accum_steps: recommended
            .as_ref()
            .map_or(yours_batch.grad_accum_steps, |planned| {
                planned.setup.gradient_accumulation_steps
            }),
        target_global_batch: target,
        yours,
        recommended,
        fits_as_set_up,
        changes,
        batch_notes,
        strategies,
        advice: advice(card, setup),
        summary,
    })
}

/// How the recommendation gets from the user's setup to its own: `leading` changes made
/// first (precision, method), giving `base`; then `fallbacks`, giving `chosen`.
struct Route {
    base: TrainingSetup,
    leading: Vec<ChangeKind>,
    fallbacks: Vec<ChangeKind>,
    chosen: TrainingSetup,
}

/// For a setup that fits as it is: the card's preferred mixed precision when it fits with at
/// least half the micro-batch the user's precision allows, else the user's precision.
fn choose_precision(
    probe: &Probe,
    setup: &TrainingSetup,
    target: Option<u64>,
    yours_max: MaxBatches,
) -> Result<Route, PlanError> {
    let keep = Route {
        base: *setup,
        leading: Vec::new(),
        fallbacks: Vec::new(),
        chosen: *setup,
    };
    let preferred = TrainingSetup {
        precision: preferred_precision(probe.card),
        ..*setup
    };
    if preferred.precision == setup.precision || !probe.fits(&preferred)? {
        return Ok(keep);
    }
    let max = MaxBatches::find(probe.model, &preferred, probe.card.memory_bytes)?;
    let micro = |max| choose_batch(max, setup.gpus, target).map(|answer| answer.choice.micro_batch);
    match (micro(max), micro(yours_max)) {
        (Some(preferred_micro), Some(yours_micro)) if preferred_micro * 2 >= yours_micro => {
            Ok(Route {
                base: preferred,
                leading: vec![ChangeKind::Precision],
                fallbacks: Vec::new(),
                chosen: preferred,
            })
        }
        _ => Ok(keep),
    }
}

/// For a setup that does not fit: the user's method with the fewest fallbacks, cheapest in
/// speed first; only when none are enough, the next method (LoRA, then QLoRA).
fn with_fallbacks(probe: &Probe, setup: &TrainingSetup) -> Result<Option<Route>, PlanError> {
    // A user's pure bf16 stays; anything else starts from the card's preferred precision.
    let precision = if setup.precision == Precision::Bf16 && supports_bf16(&probe.card.architecture)
    {
        Precision::Bf16
    } else {
        preferred_precision(probe.card)
    };
    let methods = std::iter::once(setup.method).chain(methods_after(&setup.method, probe.model));
    for method in methods {
        let base = TrainingSetup {
            method,
            precision,
            ..*setup
        };
        let Some((chosen, fallbacks)) = probe.fallbacks(&base)? else {
            continue;
        };
        let mut leading = Vec::new();
        if precision != setup.precision
            && chosen.precision != setup.precision
            && !fallbacks.contains(&ChangeKind::PureBf16)
        {
            leading.push(ChangeKind::Precision);
        }
        if method != setup.method {
            leading.push(ChangeKind::Method);
        }
        return Ok(Some(Route {
            base,
            leading,
            fallbacks,
            chosen,
        }));
    }
    Ok(None)
}

/// Sentences about the recommended batch: the nearest global batch when none is exact,
/// BatchNorm with small micro-batches, and the CPU memory offloading takes.
fn notes(
    model: &Model,
    planned: &PlannedSetup,
    batch_note: Option<String>,
) -> Result<Vec<String>, PlanError> {
    let mut notes: Vec<String> = batch_note.into_iter().collect();
    if matches!(
        model.architecture,
        Architecture::Cnn(CnnConfig::ResNet { .. })
    ) && planned.setup.micro_batch < 16
    {
        notes.push(format!(
            "ResNet's BatchNorm averages over each GPU's micro-batch: at {} its statistics are noisy; use SyncBatchNorm across GPUs or a larger card.",
            planned.setup.micro_batch
        ));
    }
    if planned.setup.activation_offload {
        let kept = estimate(
            model,
            &TrainingSetup {
                activation_offload: false,
                ..planned.setup
            },
        )?;
        let host_gib = kept
            .tensors()
            .saturating_sub(planned.breakdown_bytes.tensors()) as f64
            / GIB;
        notes.push(format!(
            "Offloading keeps about {host_gib:.1} GiB of saved activations per GPU in pinned CPU memory."
        ));
    }
    Ok(notes)
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / GIB)
}

/// The answer in one or two sentences.
fn summary(
    card: &GpuCard,
    gpus: u64,
    yours_at_one_bytes: u64,
    recommended: Option<&PlannedSetup>,
    fits_as_set_up: bool,
    changes: &[Change],
) -> String {
    let on = if gpus > 1 {
        format!("{gpus} × {}", card.name)
    } else {
        card.name.clone()
    };
    let Some(planned) = recommended else {
        return format!(
            "Does not fit on {on} in any strategy: shard across more GPUs or offload to the CPU."
        );
    };
    let batch = format!(
        "micro-batch {} × {} accumulation step(s) = global batch {}, {}, {} per GPU",
        planned.setup.micro_batch,
        planned.setup.gradient_accumulation_steps,
        planned.global_batch,
        planned.setup.precision.name(),
        gib(planned.per_gpu_bytes)
    );
    if fits_as_set_up {
        return format!("Fits on {on}: {batch}.");
    }
    let steps: Vec<String> = changes
        .iter()
        .map(|change| format!("{} ({})", change.advice, gib(change.per_gpu_bytes)))
        .collect();
    format!(
        "Does not fit on {on} as set ({} per GPU even at micro-batch 1, {} usable): {}. Then {batch}.",
        gib(yours_at_one_bytes),
        gib(usable_bytes(card.memory_bytes) as u64),
        steps.join(", then ")
    )
}
