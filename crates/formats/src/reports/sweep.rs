//! `gputune sweep --json`: every setting the sweep measured, the one it recommends for its
//! objective, and how it ended. (The steps and their measurements: [`super::sweep_step`].)

use serde::{Deserialize, Serialize};

use super::sweep_box::{CardAdvice, SweepCard};
use super::sweep_step::{MeasuredBy, StepResult};

/// The sweep report's `format_version`.
pub const SWEEP_REPORT_FORMAT: u32 = 1;

/// The whole of `sweep --json`: the version, then the outcome's fields.
#[derive(Debug, Serialize)]
pub struct SweepReport<'a> {
    pub format_version: u32,
    #[serde(flatten)]
    pub outcome: &'a SweepOutcome,
}

/// How a sweep ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SweepEnd {
    Completed,
    /// Stopped before its end (Ctrl-C, the window's Stop, the job ending early).
    Stopped {
        reason: String,
    },
    /// The job exited with an error.
    JobFailed {
        exit_code: i32,
        message: String,
    },
    /// The service ended the session or went away.
    Failed {
        reason: String,
    },
}

/// Everything a sweep found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepOutcome {
    pub gpu_index: u32,
    pub gpu_name: String,
    pub gpu_uuid: String,
    pub objective: Objective,
    /// `None` when no step was measured.
    pub measured_by: Option<MeasuredBy>,
    pub results: Vec<StepResult>,
    /// The step recommended, or why none is: `{"type":"chosen",…}` or
    /// `{"type":"none","reason":…}` (never serde's `{"Ok":…}`).
    #[serde(with = "chosen_or_why")]
    pub recommendation: Result<ChosenStep, String>,
    pub ended: SweepEnd,
    /// What was put back, as the engine reported it.
    pub restored: Vec<String>,
    pub restore_complete: bool,
    pub duration_s: f64,
    /// In a sweep over several cards, every card (the first is also `gpu_index`, `gpu_name`
    /// and `gpu_uuid`); empty for one card.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cards: Vec<SweepCard>,
    /// The cards that need a setting of their own at the recommended step (a hot slot).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub card_advice: Vec<CardAdvice>,
}

/// The slowdown the default objective accepts, % of the first setting's throughput.
pub const DEFAULT_MAX_SLOWDOWN_PCT: f64 = 3.0;

/// What "best" means.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Objective {
    /// The least energy per unit of work, however slow.
    LeastEnergy,
    /// The most throughput per watt of average power. On one card this ranks settings as
    /// energy per unit does (it is its inverse); it is offered under the name people use.
    PerfPerWatt,
    /// The least energy per unit of work among settings at most this much slower.
    EnergyWithinSlowdown { max_slowdown_pct: f64 },
}

impl Objective {
    /// Parses `energy`, `perf-per-watt` or `within-slowdown` (with the slowdown given).
    pub fn parse(name: &str, max_slowdown_pct: f64) -> Result<Objective, String> {
        if !max_slowdown_pct.is_finite() || !(0.0..=90.0).contains(&max_slowdown_pct) {
            return Err(format!(
                "A slowdown of {max_slowdown_pct} % makes no sense: give 0 to 90 (the default is {DEFAULT_MAX_SLOWDOWN_PCT})."
            ));
        }
        match name.trim() {
            "energy" => Ok(Objective::LeastEnergy),
            "perf-per-watt" => Ok(Objective::PerfPerWatt),
            "within-slowdown" => Ok(Objective::EnergyWithinSlowdown { max_slowdown_pct }),
            other => Err(format!(
                "Unknown objective {other:?}: give energy, perf-per-watt or within-slowdown."
            )),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Objective::LeastEnergy => "least energy per unit of work".to_string(),
            Objective::PerfPerWatt => "best throughput per watt".to_string(),
            Objective::EnergyWithinSlowdown { max_slowdown_pct } => format!(
                "least energy per unit of work at most {} % slower",
                // Two decimals at most: never small enough for `text::number`'s exponent.
                (max_slowdown_pct * 100.0).round() / 100.0
            ),
        }
    }
}

impl Default for Objective {
    fn default() -> Objective {
        Objective::EnergyWithinSlowdown {
            max_slowdown_pct: DEFAULT_MAX_SLOWDOWN_PCT,
        }
    }
}

/// The run's noise: how much the first setting moved between its two measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    pub throughput_drift_pct: f64,
    pub energy_drift_pct: Option<f64>,
}

impl Noise {
    /// The band within which two settings cannot be told apart, %.
    pub fn band_pct(&self) -> f64 {
        self.throughput_drift_pct
            .max(self.energy_drift_pct.unwrap_or(0.0))
    }
}

/// The reference every step is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    pub units_per_s: f64,
    pub energy_per_unit_j: f64,
}

/// One step against the reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Positive: slower than the reference.
    pub slowdown_pct: f64,
    /// Positive: less energy per unit of work than the reference.
    pub energy_saved_pct: f64,
}

/// The step a sweep recommends for its objective, compared with the first setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChosenStep {
    /// Index into the results.
    pub step_index: usize,
    pub label: String,
    pub comparison: Comparison,
    pub noise: Option<Noise>,
    /// The recommendation differs from the first setting by less than the noise.
    pub within_noise: bool,
    /// The answer in one or two sentences.
    pub sentence: String,
}

/// A recommendation or why there is none, in the one style: internally tagged.
mod chosen_or_why {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ChosenStep;

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Tagged {
        Chosen(ChosenStep),
        None { reason: String },
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum TaggedRef<'a> {
        Chosen(&'a ChosenStep),
        None { reason: &'a str },
    }

    pub fn serialize<S: Serializer>(
        value: &Result<ChosenStep, String>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Ok(chosen) => TaggedRef::Chosen(chosen),
            Err(reason) => TaggedRef::None { reason },
        }
        .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Result<ChosenStep, String>, D::Error> {
        Ok(match Tagged::deserialize(deserializer)? {
            Tagged::Chosen(chosen) => Ok(chosen),
            Tagged::None { reason } => Err(reason),
        })
    }
}
