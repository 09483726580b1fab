//! The plan for the same setup set against a measured job: the planned peak at each measured
//! micro-batch, and the plan's line (fixed + per sample) against the measured one.

use crate::plan::memory::estimate;
use crate::plan::model::Model;
use gputune_formats::reports::measure::{
    FitReport, JobRun, PlanComparison, PlanVersusMeasured, RunResult,
};
use gputune_formats::reports::plan_setup::TrainingSetup;

/// The plan for the same setup at each measured micro-batch, and what differs.
/// `setup.micro_batch` stands for a run without `{mb}`.
pub fn compare_with_plan(
    model: &Model,
    setup: &TrainingSetup,
    runs: &[JobRun],
    fit: Option<&FitReport>,
) -> PlanVersusMeasured {
    let setup = *setup;
    let planned_at = |micro_batch: u64| -> Option<u64> {
        let mut at = setup;
        at.micro_batch = micro_batch;
        estimate(model, &at).ok().map(|breakdown| breakdown.total())
    };
    let mut comparisons = Vec::new();
    for run in runs {
        let (RunResult::Measured, Some(measured_bytes)) = (&run.result, run.peak_bytes) else {
            continue;
        };
        let micro_batch = run.micro_batch.unwrap_or(setup.micro_batch);
        let Some(planned_bytes) = planned_at(micro_batch) else {
            continue;
        };
        comparisons.push(PlanComparison {
            micro_batch,
            measured_bytes,
            planned_bytes,
            difference_pct: (planned_bytes as f64 - measured_bytes as f64) / measured_bytes as f64
                * 100.0,
        });
    }
    // The plan's own line through two micro-batches, against the measured one.
    let (planned_fixed, planned_per_sample) = match (planned_at(1), planned_at(2)) {
        (Some(one), Some(two)) if two >= one => {
            let per_sample = two - one;
            (Some(one.saturating_sub(per_sample)), Some(per_sample))
        }
        _ => (None, None),
    };
    let mut differences = Vec::new();
    if let (Some(fit), Some(fixed), Some(per_sample)) = (fit, planned_fixed, planned_per_sample) {
        let share = |planned: f64, measured: f64| (planned - measured) / measured.max(1.0) * 100.0;
        differences.push(format!(
            "Fixed part (context, weights, optimizer states): planned {}, measured {} ({:+.1} %).",
            mib(fixed as f64),
            mib(fit.fixed_bytes as f64),
            share(fixed as f64, fit.fixed_bytes as f64)
        ));
        differences.push(format!(
            "Per sample (activations and the allocator's reserve for them): planned {}, measured {} ({:+.1} %).",
            mib(per_sample as f64),
            mib(fit.per_sample_bytes as f64),
            share(per_sample as f64, fit.per_sample_bytes as f64)
        ));
    }
    differences.push(format!(
        "The plan assumed a {} MiB CUDA context; it differs per card and driver, and the measurement holds this card's.",
        setup.overheads.cuda_context_bytes / (1024 * 1024)
    ));
    PlanVersusMeasured {
        model: model.name.clone(),
        runs: comparisons,
        planned_fixed_bytes: planned_fixed,
        planned_per_sample_bytes: planned_per_sample,
        planned_cuda_context_bytes: setup.overheads.cuda_context_bytes,
        differences,
    }
}

/// Bytes as whole MiB, for the messages.
pub fn mib(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / 1024.0 / 1024.0)
}
