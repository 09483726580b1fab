//! What a scan found: each measured step, the outcome, what it saves against stock, and the
//! confirmed offset as a profile.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ScanOptions;
use crate::profiles::profile::Profile;
use crate::profiles::store::{ProfileStore, StoreError};
use crate::stability::report::{CheckReport, Verdict};
use crate::stability::run::{Ending, RunResult};
use crate::tuning::engine::{GpuInfo, GpuTuning};
use crate::tuning::in_force::ClockLock;

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
    pub(super) fn of(offset_mhz: Option<i32>, result: &RunResult) -> ScanStep {
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
    pub(super) fn confirmed(&mut self, offset_mhz: i32) {
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

    /// Saves the confirmed offset at the scan's lock in `store` as the profile `name` (the
    /// card's other settings as they were, a profile of that name's notes kept), with its
    /// confirmation as its check: the profile and its file, or `None` when no offset was
    /// confirmed. The CLI and the window save through here.
    pub fn save_profile(
        &self,
        store: &ProfileStore,
        name: &str,
        gpu: &GpuInfo,
        tuning: &GpuTuning,
    ) -> Result<Option<(Profile, PathBuf)>, StoreError> {
        let previous = store.load(name).ok().map(|stored| stored.profile);
        let Some(profile) = self.profile(name, gpu, tuning, previous.as_ref()) else {
            return Ok(None);
        };
        let path = store.save(&profile)?;
        Ok(Some((profile, path)))
    }

    fn profile(
        &self,
        name: &str,
        gpu: &GpuInfo,
        tuning: &GpuTuning,
        previous: Option<&Profile>,
    ) -> Option<Profile> {
        let offset_mhz = self.stable_offset_mhz?;
        let report = self.confirmation.as_ref()?;
        let mut in_force = tuning.in_force.clone();
        in_force.gpu_clock_offset_mhz = Some(offset_mhz);
        in_force.gpu_clock_lock = ClockLock::Locked {
            min_mhz: self.options.lock_mhz,
            max_mhz: self.options.lock_mhz,
        };
        let mut profile = Profile::from_in_force(
            name,
            &gpu.identity,
            &gpu.constraints,
            &in_force,
            tuning.fan_curve.as_ref(),
            previous,
        );
        profile.last_check = Some(report.record());
        if profile.notes.is_empty() {
            profile.notes = format!("Found by gputune scan: {}", self.summary);
        }
        Some(profile)
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
