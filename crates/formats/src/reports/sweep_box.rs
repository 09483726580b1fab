//! A sweep over several cards at once (`gputune sweep --gpu 0,1,2,3`): the cards, each card's
//! readings in every step, and the advice for a card that needs a setting of its own (a hot
//! slot). A sweep of one card has none of these: its report is as it always was.

use serde::{Deserialize, Serialize};

use crate::tuning::TrialStats;

/// One card of a sweep over several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepCard {
    pub gpu_index: u32,
    pub gpu_name: String,
    pub gpu_uuid: String,
}

/// One card's readings over a step's measured seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardStepStats {
    pub gpu_index: u32,
    pub stats: TrialStats,
}

/// Why a card needs its own setting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CardAdviceReason {
    /// It throttled for heat at the recommended step while the others did not.
    ThermalThrottle { throttled_s: f64 },
    /// It ran this much hotter than the median of the others at the recommended step.
    Hotter { above_others_c: f64 },
}

/// A card that needs a setting of its own, with the one the sweep's own measurements suggest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardAdvice {
    pub gpu_index: u32,
    pub reason: CardAdviceReason,
    /// Its temperature at the recommended step, °C (the mean over the measured seconds).
    pub temperature_c: Option<f64>,
    /// The highest power limit tried (at or under the recommended one) at which this card
    /// neither throttled for heat nor ran more than the margin hotter than the others;
    /// `None` when no setting tried was cool enough.
    pub power_limit_pct: Option<f64>,
    pub power_limit_mw: Option<u32>,
    /// The advice in one sentence.
    pub sentence: String,
}
