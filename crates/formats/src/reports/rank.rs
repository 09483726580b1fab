//! `gputune rank --json`: the same checked GEMM load on every listed card at the same
//! settings, first one card at a time (alone), then all at once (together, as a data-parallel
//! job loads them); each card's figures in both phases, its place against the best, the cause
//! the evidence names, and a remedy that evens the box.

use serde::{Deserialize, Serialize};

use super::stability::Ending;
use crate::throttle::ThrottleReason;

/// The ranking report's `format_version`.
pub const RANK_REPORT_FORMAT: u32 = 1;

/// huggingface/gpu-fryer's rule: a card more than this much slower than the best fails.
pub const SLOWER_THAN_BEST_FAILS_PCT: f64 = 10.0;

/// The whole of `rank --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankReport {
    pub format_version: u32,
    /// Seconds of load each card had alone, and all of them together.
    pub alone_s: f64,
    pub together_s: f64,
    /// The settings every card ran ("stock settings", "+150 MHz offset / 2520 MHz lock").
    pub settings: String,
    /// Whether the cards ran different settings and were ranked anyway (`--force`).
    pub forced_different_settings: bool,
    pub cards: Vec<CardRank>,
    /// The card the others are set against (the fastest together, else alone).
    pub best_gpu_index: Option<u32>,
    /// What a data-parallel job on these cards gets: every card at the slowest one's pace.
    pub box_pace: Option<BoxPace>,
    /// Sentences about the whole box, after each card's own.
    pub summary: Vec<String>,
    /// Why the ranking ended early, when it did (Ctrl-C, the engine ending a session).
    pub stopped: Option<String>,
    /// What the sessions' ends put back (nothing unless the engine says otherwise).
    pub put_back: Vec<String>,
    pub ran_s: f64,
    pub ended_at_ms: u64,
}

/// One card's place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardRank {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub gpu_name: String,
    pub alone: Option<PhaseFigures>,
    pub together: Option<PhaseFigures>,
    /// Its GEMM rate against the best card's, together (alone when it has no together
    /// figure), percent: −12.0 is 12 % slower.
    pub vs_best_pct: Option<f64>,
    pub verdict: RankVerdict,
    pub cause: Option<SlowCause>,
    pub remedy: Option<PowerLimitRemedy>,
    /// "GPU 3: −12 % vs the best, 86 °C, thermal throttling: a hot slot; …".
    pub sentence: String,
}

/// A card's verdict in the ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankVerdict {
    /// Within 10 % of the best, every result right.
    Passes,
    /// More than 10 % slower than the best (gpu-fryer's rule).
    Slow,
    /// A wrong result, a CUDA fault, an Xid or a hung kernel: the card fails whatever its speed.
    Failed,
    /// It could not be loaded (no CUDA, not enough memory) or was stopped first.
    NotRanked,
}

/// What the evidence says makes a card slower than the best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlowCause {
    /// Thermal throttling with all cards loaded, not alone, or well hotter than the others:
    /// its slot's air (its neighbours' heat).
    HotSlot,
    /// Thermal throttling alone too, no hotter than the others: its own cooling.
    Cooling,
    /// Held at a lower power limit than the best card (ranked with `--force`).
    PowerLimit,
    /// Slower alone at cool temperatures, or at the power limit at a lower clock than the
    /// best card: its silicon needs more power for the same clock.
    Silicon,
    /// Slower together than alone with no throttle reason to show for it: the host (its PCIe
    /// link, CPU threads) or the power supply.
    Unexplained,
}

/// A power limit that keeps a hot card under its throttle temperature, from its measured
/// heating.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerLimitRemedy {
    pub gpu_index: u32,
    pub power_limit_mw: u32,
    /// The limit as a share of the card's default, percent (within the card's range).
    pub percent_of_default: u32,
    /// The temperature it should stay under: the lowest at which it was seen thermal
    /// throttling, less a margin.
    pub target_c: f64,
    /// Its heating: degrees above its idle temperature per watt above its idle power.
    pub heating_c_per_w: f64,
    /// Where that heating came from ("its reading at rest and under load", …).
    pub heating_from: String,
    /// Its GEMM rate at that limit, predicted from its rate alone (cool) by power ∝ clock³;
    /// `None` when it throttled for heat alone too.
    pub predicted_tflops: Option<f64>,
    /// Whether that is faster than it ran throttled together: the limit evens the box.
    pub evens_the_box: bool,
}

/// The figures of one card in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseFigures {
    pub ending: Ending,
    /// Seconds of load.
    pub ran_s: f64,
    /// The checked GEMM's rate, TFLOP/s (its FLOP over the device's time).
    pub gemm_tflops: Option<f64>,
    /// GEMM results compared, and those that were wrong.
    pub results: u64,
    pub wrong: u64,
    pub readings: u32,
    pub clock_mean_mhz: Option<f64>,
    pub clock_min_mhz: Option<u32>,
    pub clock_max_mhz: Option<u32>,
    pub power_mean_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub temperature_start_c: Option<u32>,
    pub temperature_peak_c: Option<u32>,
    pub temperature_end_c: Option<u32>,
    /// Over the phase's second half, when the card is nearest its steady state.
    pub late_temperature_mean_c: Option<f64>,
    pub late_power_mean_w: Option<f64>,
    /// The lowest temperature at which a thermal throttle reason was read.
    pub thermal_throttle_from_c: Option<u32>,
    /// Each throttle reason read, as a share of the phase's time (idle and the clock lock
    /// left out).
    pub throttled: Vec<ThrottleShare>,
}

impl PhaseFigures {
    /// The share of the time held back by `reasons`, percent (any of them at a time).
    pub fn share_pct(&self, reasons: &[ThrottleReason]) -> f64 {
        self.throttled
            .iter()
            .filter(|share| reasons.contains(&share.reason))
            .map(|share| share.time_pct)
            .fold(0.0, f64::max)
    }

    /// The share of the time held back by heat (the driver's or the hardware's slowdown).
    pub fn thermal_pct(&self) -> f64 {
        self.share_pct(&[
            ThrottleReason::SwThermalSlowdown,
            ThrottleReason::HwThermalSlowdown,
        ])
    }

    /// The share of the time held at the power limit.
    pub fn power_pct(&self) -> f64 {
        self.share_pct(&[ThrottleReason::SwPowerCap])
    }
}

/// How long a throttle reason held the card back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThrottleShare {
    pub reason: ThrottleReason,
    pub time_pct: f64,
}

/// The box's pace in a data-parallel job: each step waits for the slowest card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxPace {
    pub slowest_gpu_index: u32,
    /// Every card at the slowest one's GEMM rate, TFLOP/s.
    pub box_tflops: f64,
    /// The sum of every card's own rate: what the box would give if none waited.
    pub sum_tflops: f64,
    /// The box with its slowest card as fast as the next slowest, TFLOP/s.
    pub box_tflops_evened: Option<f64>,
    /// The other way to even it: each faster card at the power limit that runs it at the
    /// slowest card's pace, the box no slower and drawing less.
    pub at_the_slowest_pace: Vec<PaceLimit>,
    /// The power those limits save, watts (from each card's draw together).
    pub at_the_slowest_pace_saves_w: Option<f64>,
}

/// A faster card's power limit at the slowest card's pace (power ∝ clock³ from its own rate and
/// draw together), within its range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaceLimit {
    pub gpu_index: u32,
    pub power_limit_mw: u32,
    pub percent_of_default: u32,
}
