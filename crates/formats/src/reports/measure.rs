//! `gputune plan --measure --json`: every run of the user's job, the line fitted through
//! their peaks, and the plan for the same setup beside it (docs/json.md says each field).

use serde::{Deserialize, Serialize};

/// How one run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunResult {
    /// It ran its steps (or its time), then was stopped.
    Measured,
    /// It ran out of GPU memory: `because` says how that was seen.
    OutOfMemory { because: String },
    /// It ended by itself before its steps, not out of memory.
    Failed { because: String },
}

/// One run of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRun {
    /// The size put where `{mb}` is; `None` for a command without `{mb}`.
    pub micro_batch: Option<u64>,
    pub result: RunResult,
    /// The largest GPU memory the job's processes held on one GPU, as NVML listed them.
    pub peak_bytes: Option<u64>,
    /// The GPU that peak was on.
    pub gpu_index: Option<u32>,
    /// Progress steps read from its output.
    pub steps_read: u64,
    pub seconds: f64,
}

/// The measured line: fixed bytes plus bytes per sample, and what it says fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitReport {
    pub fixed_bytes: u64,
    pub per_sample_bytes: u64,
    /// The largest micro-batch the line puts under the card's memory (0: not even 1).
    pub max_micro_batch: u64,
    /// The smallest micro-batch that ran out of memory, when one did and it set the answer.
    pub limited_by_out_of_memory: Option<u64>,
    pub predicted_peak_bytes: u64,
}

/// A whole measurement: every run, the fit and the one-line answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// The card's name, as NVML gives it.
    pub card: Option<String>,
    pub gpu_memory_bytes: Option<u64>,
    pub runs: Vec<JobRun>,
    /// `None` without `{mb}` in the command, or when no line could be fitted (`no_fit`).
    pub fit: Option<FitReport>,
    /// Why there is no fit, when there is none.
    pub no_fit: Option<String>,
    /// Whether the run at the recommended micro-batch ran its steps (only when confirming).
    pub confirmed: Option<bool>,
    pub summary: String,
    /// The stop signal ended it (Ctrl-C, the window's Stop).
    pub interrupted: bool,
}

impl JobReport {
    /// Whether the measurement says nothing fits: the fit found no micro-batch, or every run
    /// ran out of memory.
    pub fn nothing_fits(&self) -> bool {
        self.fit
            .as_ref()
            .is_some_and(|fit| fit.max_micro_batch == 0)
            || (self.fit.is_none()
                && !self.runs.is_empty()
                && self
                    .runs
                    .iter()
                    .all(|run| matches!(run.result, RunResult::OutOfMemory { .. })))
    }

    /// Whether anything was measured (a fit, or a run that ran its steps).
    pub fn measured_something(&self) -> bool {
        self.fit.is_some()
            || self
                .runs
                .iter()
                .any(|run| run.result == RunResult::Measured)
    }
}

/// The plan for the same setup at a measured micro-batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanComparison {
    pub micro_batch: u64,
    pub measured_bytes: u64,
    pub planned_bytes: u64,
    /// (planned − measured) / measured, percent.
    pub difference_pct: f64,
}

/// The plan's line against the measured one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanVersusMeasured {
    pub model: String,
    pub runs: Vec<PlanComparison>,
    pub planned_fixed_bytes: Option<u64>,
    pub planned_per_sample_bytes: Option<u64>,
    pub planned_cuda_context_bytes: u64,
    /// What differs, in words.
    pub differences: Vec<String>,
}

/// What `plan --measure --json` prints: the measurement, and the plan beside it (with
/// `--model`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasureReport {
    #[serde(flatten)]
    pub job: JobReport,
    pub plan: Option<PlanVersusMeasured>,
}
