//! `gputune scan --json`: the undervolt scanner's options, each measured step, the confirmed
//! offset and its check, and what it saves against stock.

use serde::{Deserialize, Serialize};

use super::stability::{CheckReport, Ending, RunResult, Verdict};

/// The scan report's `format_version`.
pub const SCAN_REPORT_FORMAT: u32 = 1;

/// The whole of `scan --json`: the version, then the outcome's fields.
#[derive(Debug, Serialize)]
pub struct ScanReport<'a> {
    pub format_version: u32,
    #[serde(flatten)]
    pub outcome: &'a ScanOutcome,
}

/// How a scan ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanOutcome {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub gpu_name: String,
    pub options: ScanOptions,
    pub stock: Option<ScanStep>,
    pub steps: Vec<ScanStep>,
    /// The first offset found unstable, if any was.
    pub first_unstable_mhz: Option<i32>,
    /// The offset the long check confirmed stable.
    pub stable_offset_mhz: Option<i32>,
    /// The long check of the confirmed offset (or of the last one tried).
    pub confirmation: Option<CheckReport>,
    /// One sentence: what was found, or why there is no result.
    pub summary: String,
    /// What it saves against stock at the confirmed offset.
    pub savings: Option<String>,
    pub put_back: Vec<String>,
    pub put_back_complete: bool,
    pub ran_s: f64,
}

impl ScanOutcome {
    /// `offset_mhz` was confirmed stable: it, and what it saves against stock and against
    /// +0 MHz at the lock.
    pub fn confirmed(&mut self, offset_mhz: i32) {
        self.stable_offset_mhz = Some(offset_mhz);
        let at = |offset: i32| {
            self.steps
                .iter()
                .find(|step| step.offset_mhz == Some(offset))
        };
        let (Some(stock), Some(step)) = (&self.stock, at(offset_mhz)) else {
            return;
        };
        let mut text = savings("Against stock", stock, step);
        if let Some(zero) = at(0).filter(|_| offset_mhz != 0) {
            text.push(' ');
            text.push_str(&savings(
                &format!("Against +0 MHz at the {} MHz lock", self.options.lock_mhz),
                zero,
                step,
            ));
        }
        self.savings = Some(text);
    }
}

/// The scanner's options, checked against the card before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScanOptions {
    pub lock_mhz: u32,
    pub step_mhz: i32,
    pub step_s: f64,
    pub margin_steps: u32,
    pub confirm_s: f64,
    /// The highest offset tried: the card's.
    pub max_offset_mhz: i32,
}

impl ScanOptions {
    /// Steps at most (the stock step and the confirmation aside).
    pub fn most_steps(&self) -> u32 {
        (self.max_offset_mhz / self.step_mhz) as u32 + 1
    }
}

/// One measured setting of the scan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanStep {
    /// None for the stock step (the card's settings as the scan found them).
    pub offset_mhz: Option<i32>,
    pub verdict: Verdict,
    /// What went wrong, when it did.
    pub finding: Option<String>,
    pub clock_min_mhz: Option<u32>,
    pub clock_max_mhz: Option<u32>,
    pub power_mean_w: Option<f64>,
    pub temperature_peak_c: Option<u32>,
    pub wrong: u64,
    pub results: u64,
    pub gemm_tflops: Option<f64>,
    /// Energy per unit of GEMM work, joules per TFLOP.
    pub joules_per_tflop: Option<f64>,
    pub ran_s: f64,
}

impl ScanStep {
    pub fn of(offset_mhz: Option<i32>, result: &RunResult) -> ScanStep {
        let watched = &result.watched;
        let tally = &result.tally;
        // The readings span less than the run: their average power times the run's length.
        let energy_j = watched
            .counter_power_w()
            .or(watched.power_mean_w)
            .map(|power| power * result.ran_s);
        let tflop = tally.gemm.flop / 1e12;
        ScanStep {
            offset_mhz,
            verdict: Verdict::of(&result.ending),
            finding: match &result.ending {
                Ending::Unstable { finding } => Some(finding.describe()),
                Ending::Stopped { reason } | Ending::NotRun { reason } => Some(reason.clone()),
                Ending::Completed => None,
            },
            clock_min_mhz: watched.clock_min_mhz,
            clock_max_mhz: watched.clock_max_mhz,
            power_mean_w: watched.power_mean_w,
            temperature_peak_c: watched.temperature_peak_c,
            wrong: tally.wrong(),
            results: tally.results(),
            gemm_tflops: tally.gemm_tflops(),
            joules_per_tflop: energy_j
                .filter(|_| tflop > 0.0)
                .map(|energy| energy / tflop),
            ran_s: result.ran_s,
        }
    }

    /// "+45 MHz", "stock".
    pub fn label(&self) -> String {
        self.offset_mhz
            .map_or_else(|| "stock".to_string(), |offset| format!("{offset:+} MHz"))
    }

    /// "stable", "UNSTABLE (14 wrong GEMM results at 2520 MHz)", "stopped (stopped by
    /// Ctrl-C or SIGTERM)": a step that was stopped or could not run is no verdict.
    pub fn verdict_text(&self) -> String {
        let finding = self
            .finding
            .as_ref()
            .map(|finding| format!(" ({finding})"))
            .unwrap_or_default();
        match self.verdict {
            Verdict::Stable => "stable".to_string(),
            Verdict::Unstable => format!("UNSTABLE{finding}"),
            Verdict::Stopped => format!("stopped{finding}, not a verdict"),
            Verdict::NotRun => format!("not run{finding}"),
        }
    }
}

/// "Against stock: power 398 to 341 W (-14 %), 2.91 to 2.45 J per TFLOP of GEMM work (-16 %),
/// peak clock 2610 to 2520 MHz." (Words, not arrows: the window's font has no arrow.)
pub fn savings(against: &str, stock: &ScanStep, step: &ScanStep) -> String {
    let mut parts = Vec::new();
    let change = |before: f64, after: f64| {
        if before > 0.0 {
            format!(" ({:+.0} %)", (after / before - 1.0) * 100.0)
        } else {
            String::new()
        }
    };
    if let (Some(before), Some(after)) = (stock.power_mean_w, step.power_mean_w) {
        parts.push(format!(
            "power {before:.0} to {after:.0} W{}",
            change(before, after)
        ));
    }
    if let (Some(before), Some(after)) = (stock.joules_per_tflop, step.joules_per_tflop) {
        parts.push(format!(
            "{before:.2} to {after:.2} J per TFLOP of GEMM work{}",
            change(before, after)
        ));
    }
    if let (Some(before), Some(after)) = (stock.clock_max_mhz, step.clock_max_mhz)
        && before != after
    {
        parts.push(format!("peak clock {before} to {after} MHz"));
    }
    if parts.is_empty() {
        format!("{against}: no readings to compare.")
    } else {
        format!("{against}: {}.", parts.join(", "))
    }
}
