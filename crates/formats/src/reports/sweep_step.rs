//! A sweep's steps and what each measured, as `sweep --json` holds them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::card::Setting;
use crate::reports::sweep_box::CardStepStats;
use crate::tuning::TrialStats;

/// One setting of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepStep {
    /// For people: "70 % (315 W), cap 2100 MHz, +150 MHz".
    pub label: String,
    pub power_limit_pct: f64,
    pub power_limit_mw: u32,
    pub clock_cap_mhz: Option<u32>,
    pub gpu_clock_offset_mhz: Option<i32>,
    /// What is written, every control the sweep touches; each passed the validation gate.
    pub settings: Vec<Setting>,
    /// True for the first setting measured again at the end.
    pub is_repeat: bool,
    /// What else the card ran (a lock or offset kept or reset for the sweep, see `base`);
    /// empty when nothing else mattered.
    #[serde(default)]
    pub in_force_note: String,
}

impl SweepStep {
    /// Whether two steps run the card the same way.
    pub fn same_setting(&self, other: &SweepStep) -> bool {
        self.settings == other.settings
    }
}

/// How the sweep knows the job's speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MeasuredBy {
    /// The job's own progress output.
    Progress {
        source: ProgressSource,
        unit: WorkUnit,
    },
    /// No progress could be read: SM clock × utilization, a stand-in for the speed of a
    /// compute-bound job.
    Proxy,
}

impl MeasuredBy {
    /// The unit of work, for column heads: "step", "sample", "proxy unit".
    pub fn unit_name(&self) -> String {
        match self {
            MeasuredBy::Progress { unit, .. } => unit.to_string(),
            MeasuredBy::Proxy => "proxy unit".to_string(),
        }
    }

    /// One sentence for the report.
    pub fn describe(&self) -> String {
        match self {
            MeasuredBy::Progress { source, unit } => {
                format!("the job's own progress ({}, per {unit})", source.describe())
            }
            MeasuredBy::Proxy => "a GPU-side proxy (SM clock × utilization), because no progress could be read from the job: the speeds are estimates, not the job's own".to_string(),
        }
    }
}

/// A speed with its spread within the step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub units_per_s: f64,
    /// Standard deviation of the parts' throughputs over their mean, %; `None` with fewer
    /// than two parts measured.
    pub spread_pct: Option<f64>,
}

/// What one step measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub step: SweepStep,
    /// `None` when the job's progress did not show during the step (or the card gave no
    /// clock and utilization for the proxy).
    pub throughput: Option<Throughput>,
    pub average_power_w: Option<f64>,
    /// Joules per unit of work: average power over throughput.
    pub energy_per_unit_j: Option<f64>,
    /// Power, clocks, temperature, fans and throttling over the measured seconds.
    pub stats: TrialStats,
    pub measured_s: f64,
    /// Set when the card reported a critical error (Xid) or refused the setting: the step
    /// must not be recommended.
    pub unstable: Option<String>,
    /// Set when the step's spread is larger than the difference it measures.
    pub noisy: Option<String>,
    /// In a sweep over several cards, each card's readings (`stats` is then the box's: power
    /// and energy summed, the slowest card's clocks, the hottest card's temperature and fans,
    /// the longest any card spent under each throttle reason); empty for one card.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cards: Vec<CardStepStats>,
}

impl StepResult {
    /// A step that could not run (the driver refused it), with the reason.
    pub fn unmeasured(step: &SweepStep, why: String) -> StepResult {
        StepResult {
            step: step.clone(),
            throughput: None,
            average_power_w: None,
            energy_per_unit_j: None,
            stats: TrialStats::default(),
            measured_s: 0.0,
            unstable: Some(why),
            noisy: None,
            cards: Vec::new(),
        }
    }
}

/// What the job counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkUnit {
    Step,
    Sample,
    Token,
    Epoch,
    /// Any other name, as the job printed it (a plain string, like the others).
    #[serde(untagged)]
    Other(String),
}

impl fmt::Display for WorkUnit {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkUnit::Step => write!(formatter, "step"),
            WorkUnit::Sample => write!(formatter, "sample"),
            WorkUnit::Token => write!(formatter, "token"),
            WorkUnit::Epoch => write!(formatter, "epoch"),
            WorkUnit::Other(name) => write!(formatter, "{name}"),
        }
    }
}

/// Which format a reading came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressSource {
    Tqdm,
    Lightning,
    HuggingFace,
    Custom,
}

impl ProgressSource {
    pub fn describe(&self) -> &'static str {
        match self {
            ProgressSource::Tqdm => "tqdm",
            ProgressSource::Lightning => "PyTorch Lightning",
            ProgressSource::HuggingFace => "Hugging Face Trainer",
            ProgressSource::Custom => "--progress-regex",
        }
    }
}
