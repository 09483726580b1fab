//! Measuring the user's own training job (`gputune plan --measure` and the Plan tab's "Measure
//! my job", one engine for both): runs the command for a few steps (at each micro-batch when
//! `{mb}` is in it), watches its processes' GPU memory in NVML's process list on a
//! `DeviceWorker`, stops it (the `job` room's one policy: SIGTERM to its process group, a
//! grace, then SIGKILL to every process it started), and fits the
//! peaks to a fixed cost plus a cost per sample (`plan::measure`). Progress is read by the
//! job room's reader (`Job::read_output`, with the sweep's `ProgressParser`). A run that runs out of
//! memory (CUDA's out-of-memory text in its output, or its memory reaching the card's) is a
//! result, not a failure. No printing and no UI: a [`Watcher`] gets the messages, the job's
//! output and the progress; the front ends say it in their own way.

mod compare;
mod run;
mod spec;

use std::sync::mpsc::Receiver;

pub use compare::{compare_with_plan, mib};
pub use run::{RunProgress, Watcher};
pub use spec::{DEFAULT_MICRO_BATCHES, DEFAULT_STEPS, JobSpec, RunLimit};

use crate::device::worker::DeviceWorker;
use crate::plan::PlanError;
use crate::plan::measure::{MeasuredFit, MeasuredRun, fit_runs, with_micro_batch};
use gputune_formats::reports::measure::{FitReport, JobReport, JobRun, RunResult};
use run::{Runner, read_cards};

/// The run behind a point of the fit: its peak, or that it ran out of memory; `None` for a
/// run without a micro-batch or one that failed.
fn measured_run(run: &JobRun) -> Option<MeasuredRun> {
    let micro_batch = run.micro_batch?;
    match (&run.result, run.peak_bytes) {
        (RunResult::OutOfMemory { .. }, _) => Some(MeasuredRun::OutOfMemory { micro_batch }),
        (RunResult::Measured, Some(peak_bytes)) => Some(MeasuredRun::Peak {
            micro_batch,
            peak_bytes,
        }),
        _ => None,
    }
}

/// The fit as the report says it: whole bytes.
fn fit_report(fit: &MeasuredFit) -> FitReport {
    FitReport {
        fixed_bytes: fit.fixed_bytes.max(0.0) as u64,
        per_sample_bytes: fit.per_sample_bytes as u64,
        max_micro_batch: fit.max_micro_batch,
        limited_by_out_of_memory: fit.limited_by_out_of_memory,
        predicted_peak_bytes: fit.predicted_bytes(fit.max_micro_batch).max(0.0) as u64,
    }
}

/// Measures the job in `spec` on the GPUs `worker` reads; `stop` ends it early (the report
/// then says `interrupted`). An error only when nothing could be measured at all (no GPU to
/// read, a command that cannot start); a run out of memory or failing is in the report.
pub fn measure_job(
    worker: &mut DeviceWorker,
    spec: &JobSpec,
    stop: &Receiver<()>,
    watcher: &mut dyn Watcher,
) -> anyhow::Result<JobReport> {
    let cards = read_cards(worker)?;
    let mut runner = Runner {
        worker,
        cards: &cards,
        limit: spec.limit,
        progress_regex: spec.progress_regex.as_deref(),
        stop,
        watcher,
        interrupted: false,
        runs_started: 0,
    };
    let mut runs = Vec::new();
    if spec.micro_batches.is_empty() {
        runs.push(runner.run(&spec.command, None)?);
    } else {
        for &micro_batch in &spec.micro_batches {
            let command = with_micro_batch(&spec.command, micro_batch)?;
            runs.push(runner.run(&command, Some(micro_batch))?);
            if runner.interrupted {
                break;
            }
        }
    }
    let gpu_index = runs.iter().find_map(|run| run.gpu_index).unwrap_or(0);
    let card_bytes = cards
        .memory_bytes
        .get(gpu_index as usize)
        .copied()
        .flatten();
    let card_name = cards.names.get(gpu_index as usize).cloned().flatten();
    let fit_of = |runs: &[JobRun]| -> Result<MeasuredFit, PlanError> {
        let measured: Vec<MeasuredRun> = runs.iter().filter_map(measured_run).collect();
        fit_runs(&measured, card_bytes.unwrap_or(0))
    };
    let mut fit = if spec.micro_batches.is_empty() {
        None
    } else {
        Some(fit_of(&runs))
    };
    let mut confirmed = None;
    if spec.confirm
        && !runner.interrupted
        && let Some(Ok(first)) = &fit
        && first.max_micro_batch > 0
    {
        let size = first.max_micro_batch;
        let already = runs
            .iter()
            .find(|run| run.micro_batch == Some(size) && run.result == RunResult::Measured);
        if already.is_some() {
            confirmed = Some(true);
        } else {
            let command = with_micro_batch(&spec.command, size)?;
            let run = runner.run(&command, Some(size))?;
            confirmed = Some(run.result == RunResult::Measured);
            runs.push(run);
            // An out-of-memory run at the answer lowers it.
            fit = Some(fit_of(&runs));
        }
    }
    let (fit, no_fit) = match fit {
        Some(Ok(fit)) => (Some(fit_report(&fit)), None),
        Some(Err(error)) => (None, Some(error.to_string())),
        None => (None, None),
    };
    let summary = summary(&runs, fit.as_ref(), no_fit.as_deref(), confirmed);
    Ok(JobReport {
        card: card_name,
        gpu_memory_bytes: card_bytes,
        runs,
        fit,
        no_fit,
        confirmed,
        summary,
        interrupted: runner.interrupted,
    })
}

fn summary(
    runs: &[JobRun],
    fit: Option<&FitReport>,
    no_fit: Option<&str>,
    confirmed: Option<bool>,
) -> String {
    if let Some(fit) = fit {
        let checked = match confirmed {
            Some(true) => " (a run at that size ran its steps)",
            Some(false) => " (the run at the size first found did not; this is one below it)",
            None => " (not run: confirming runs it)",
        };
        if fit.max_micro_batch == 0 {
            return format!(
                "Not even micro-batch 1 fits the card: the job needs {} before its first sample.",
                mib(fit.fixed_bytes as f64)
            );
        }
        return format!(
            "The largest micro-batch that fits the card is {}{checked}: {} predicted.",
            fit.max_micro_batch,
            mib(fit.predicted_peak_bytes as f64)
        );
    }
    // Runs that failed say why before the fit's own reason ("No run finished").
    let failure = runs.iter().find_map(|run| match &run.result {
        RunResult::Failed { because } => Some(because),
        _ => None,
    });
    if let (Some(reason), Some(because)) = (no_fit, failure) {
        return format!("{reason} A run could not be measured: {because}.");
    }
    if let Some(reason) = no_fit {
        return reason.to_string();
    }
    match runs.first() {
        Some(JobRun {
            result: RunResult::Measured,
            peak_bytes: Some(peak),
            ..
        }) => format!(
            "The job's peak was {}; put {{mb}} where its micro-batch goes to find the largest that fits.",
            mib(*peak as f64)
        ),
        Some(JobRun {
            result: RunResult::OutOfMemory { because },
            ..
        }) => format!("The job ran out of memory ({because})."),
        Some(JobRun {
            result: RunResult::Failed { because },
            ..
        }) => format!("The job could not be measured: {because}."),
        _ => "The job could not be measured.".to_string(),
    }
}
