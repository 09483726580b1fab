//! `gputune stability --together --json`: the box check, every card loaded at once with the
//! same pulse edges (docs/box.md, "The box check"). Each card's own report is the one a
//! single-card check gives; the box adds its steps (box power, each card's power and clocks, how
//! well the edges lined up), which card failed first and where, and the clock cap to use.

use serde::{Deserialize, Serialize};

use super::stability::CheckReport;
use crate::profile::Verdict;

pub const BOX_CHECK_REPORT_FORMAT: u32 = 1;

/// One step of the in-phase schedule: every card runs it from the same edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BoxStep {
    /// GEMM bursts of `duty_pct` % of every `period_ms`, idle in between, on every card at once.
    Pulsed { period_ms: u32, duty_pct: u32 },
    /// GEMM back to back on every card.
    Full,
}

impl BoxStep {
    /// "10 ms pulses every 20 ms (50 % duty)", "full load".
    pub fn describe(self) -> String {
        match self {
            BoxStep::Pulsed {
                period_ms,
                duty_pct,
            } => {
                let burst_ms = u64::from(period_ms) * u64::from(duty_pct) / 100;
                format!("{burst_ms} ms pulses every {period_ms} ms ({duty_pct} % duty)")
            }
            BoxStep::Full => "full load".to_string(),
        }
    }
}

/// One card during one step, from the service's readings.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CardAtStep {
    pub gpu_index: u32,
    pub power_mean_w: Option<f64>,
    pub power_peak_w: Option<f64>,
    pub clock_min_mhz: Option<u32>,
    pub clock_max_mhz: Option<u32>,
    pub temperature_peak_c: Option<u32>,
}

/// One step as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    pub step: BoxStep,
    /// When it began, seconds after the load started.
    pub started_s: f64,
    pub seconds: f64,
    /// The box's power (every checked card's summed at one reading), average and peak.
    pub box_power_mean_w: Option<f64>,
    pub box_power_peak_w: Option<f64>,
    pub cards: Vec<CardAtStep>,
    /// Pulse edges every card began at the shared instant.
    pub edges: u32,
    /// The widest spread of one edge's start across the cards, ms (how far from in phase).
    pub edge_spread_max_ms: Option<f64>,
}

/// The first card to fail, and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxFailure {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    /// The step running when it failed (`None`: before the load began).
    pub step: Option<BoxStep>,
    /// Seconds after the load started.
    pub at_s: f64,
    /// "14 wrong GEMM results at 2745 MHz", "Xid 79 (…)".
    pub finding: String,
    /// Every card was lost at once: the machine (its power supply) went down.
    pub all_cards_lost: bool,
}

/// The setting under which the in-phase check passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxRecommendation {
    /// The top of a clock lock on every card, MHz.
    pub clock_cap_mhz: u32,
    /// Whether the failing step was run again at that cap and passed (else it is worked out
    /// from the box power, and unproven).
    pub confirmed: bool,
    /// How it was found, in a sentence.
    pub how: String,
}

/// Near the top of the voltage/frequency curve a card's power rises about as the cube of its
/// clock (the voltage rises with the clock); a cap that lowers it by this share keeps the
/// pulses' sum under what tripped.
const POWER_CUT_AFTER_TRIP: f64 = 0.15;
/// A cap is never set below this: lower, the card is not the problem.
pub const LOWEST_CAP_MHZ: u32 = 1500;

impl BoxRecommendation {
    /// The cap to try after the machine went down with the cards at up to `clock_max_mhz` and
    /// the box at `box_power_w`: worked out, not proven. `None` without a clock to start from.
    pub fn after_trip(clock_max_mhz: Option<u32>, box_power_w: Option<f64>) -> Option<Self> {
        let clock = clock_max_mhz.filter(|clock| *clock > 0)?;
        let scale = (1.0 - POWER_CUT_AFTER_TRIP).cbrt();
        let cap = ((f64::from(clock) * scale) as u32 / 15 * 15).max(LOWEST_CAP_MHZ);
        let power = box_power_w
            .map(|watts| format!(" and the box drew about {}", watts_text(watts)))
            .unwrap_or_default();
        Some(BoxRecommendation {
            clock_cap_mhz: cap,
            confirmed: false,
            how: format!(
                "worked out from the trip, not proven: the cards ran at up to {clock} MHz{power}; near the top of the curve a card's power rises about as the cube of its clock, so a cap of {cap} MHz cuts each card's pulse power by about {:.0} %. Run the box check again with --clock-cap-mhz {cap} to prove it",
                POWER_CUT_AFTER_TRIP * 100.0
            ),
        })
    }
}

/// "1,650 W".
pub fn watts_text(watts: f64) -> String {
    let whole = watts.round().max(0.0) as u64;
    if whole >= 1000 {
        format!("{},{:03} W", whole / 1000, whole % 1000)
    } else {
        format!("{whole} W")
    }
}

impl BoxJournal {
    /// What a journal left behind says: "The box went down 41 s into an all-card check (GPUs
    /// …) at about 1,650 W: suspect the power supply; try a clock cap of 2595 MHz on every card
    /// (…)." `gpus` names the cards as this machine numbers them.
    pub fn went_down_sentence(&self, gpus: &str) -> String {
        let into_s = self.updated_at_ms.saturating_sub(self.started_at_ms) as f64 / 1000.0;
        // The last reading before it went down: what the box drew then.
        let power = self
            .box_power_w
            .or(self.box_power_peak_w)
            .map(|watts| format!(" at about {}", watts_text(watts)))
            .unwrap_or_default();
        let cap = self
            .clock_cap_mhz
            .map(|cap| format!(" with every card capped at {cap} MHz"))
            .unwrap_or_default();
        let advice = match BoxRecommendation::after_trip(
            self.clock_max_mhz,
            self.box_power_w.or(self.box_power_peak_w),
        ) {
            Some(recommendation) => format!(
                "try a clock cap of {} MHz on every card ({})",
                recommendation.clock_cap_mhz, recommendation.how
            ),
            None => {
                "try a clock cap on every card (`gputune stability --together --clock-cap-mhz N`)"
                    .to_string()
            }
        };
        format!(
            "The box went down {} into an all-card check of {gpus}{power}{cap}: suspect the power supply; {advice}.",
            crate::units::duration_s(into_s)
        )
    }
}

/// The whole of `stability --together --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxCheckReport {
    pub format_version: u32,
    pub verdict: Verdict,
    /// "The box is stable: 8 cards, 6 steps in phase, 3,610 W peak" and the like.
    pub sentence: String,
    /// The clock cap every card was held at (a recommendation's confirmation), when one was.
    pub clock_cap_mhz: Option<u32>,
    pub steps: Vec<StepReport>,
    /// Each card's report, as a single-card check gives it.
    pub cards: Vec<CheckReport>,
    pub first_failure: Option<BoxFailure>,
    pub recommendation: Option<BoxRecommendation>,
    /// What was put back when the check's session ended (empty when it changed nothing).
    pub put_back: Vec<String>,
    /// False when a setting could not be put back.
    pub put_back_complete: bool,
    /// Whether the engine kept a box-check journal (the daemon's, so that a machine that goes
    /// down is said at its next start).
    pub journaled: bool,
    /// Unix time the check ended, ms.
    pub ended_at_ms: u64,
    pub gputune_version: String,
}

impl BoxCheckReport {
    /// A pulsed step counts as in phase when every card began its bursts at the shared edges, the
    /// widest spread a quarter of a burst at most: further apart, the cards' surges no longer add
    /// up, and the step did not test what it is for. "10 ms pulses every 20 ms (50 % duty): edges up
    /// to 41.6 ms apart" for each step that was not.
    pub fn out_of_phase(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter_map(|step| {
                let BoxStep::Pulsed {
                    period_ms,
                    duty_pct,
                } = step.step
                else {
                    return None;
                };
                let burst_ms = f64::from(period_ms) * f64::from(duty_pct) / 100.0;
                match step.edge_spread_max_ms {
                    _ if step.edges == 0 => Some(format!(
                        "{}: no edge began on every card at once",
                        step.step.describe()
                    )),
                    Some(spread_ms) if spread_ms > burst_ms / 4.0 => Some(format!(
                        "{}: edges up to {spread_ms:.1} ms apart",
                        step.step.describe()
                    )),
                    _ => None,
                }
            })
            .collect()
    }
}

/// A box-check journal: what the engine writes before the load starts and updates every second
/// while it runs, removed when the check ends. One left behind at the engine's start means the
/// machine went down mid-check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxJournal {
    pub format_version: u32,
    /// The cards checked, by UUID.
    pub gpu_uuids: Vec<String>,
    /// Unix time the load started, ms.
    pub started_at_ms: u64,
    /// Unix time of the last update, ms.
    pub updated_at_ms: u64,
    /// The box power at the last reading (the checked cards' sum), and the highest so far.
    pub box_power_w: Option<f64>,
    pub box_power_peak_w: Option<f64>,
    /// The highest graphics clock of any checked card at the last reading, MHz.
    pub clock_max_mhz: Option<u32>,
    /// The clock cap held on the cards, when the check held one.
    pub clock_cap_mhz: Option<u32>,
    /// The boot the check ran in (`/proc/sys/kernel/random/boot_id`): a journal left in the
    /// same boot means a process died, not the machine.
    #[serde(default)]
    pub boot_id: Option<String>,
    /// The cards found lost (fallen off the bus, not answering) when the check ended, by UUID:
    /// why the journal was kept although the engine saw the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cards_lost: Vec<String>,
}

pub const BOX_JOURNAL_FORMAT: u32 = 1;
