//! What a scan found: each measured step, the outcome, what it saves against stock, and the
//! confirmed offset as a profile.

use crate::profiles::checked::CheckedOffsets;
use crate::profiles::profile::ProfileOnCard;
use crate::stability::report::VerdictOfEnding;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ScanOptions;
use crate::profiles::store::{ProfileStore, StoreError};
use crate::stability::report::CheckReport;
use crate::stability::run::{Ending, RunResult};
use gputune_formats::profile::Profile;
use gputune_formats::profile::Verdict;
use gputune_formats::profile::{CheckedBy, CheckedCard};
use gputune_formats::tuning::GpuInfo;
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};

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

/// The summary of a scan whose long check confirmed `offset_mhz`, with the margin explained:
/// why the offset to use is below steps that passed.
pub fn confirmed_summary(
    options: &ScanOptions,
    offset_mhz: i32,
    first_unstable_mhz: Option<i32>,
    confirmed_s: f64,
) -> String {
    let lock = options.lock_mhz;
    let confirmed = gputune_formats::units::duration_s(confirmed_s);
    let Some(unstable_mhz) = first_unstable_mhz else {
        return format!(
            "The offset to use at the {lock} MHz lock is {offset_mhz:+} MHz, the card's highest, confirmed stable for {confirmed}: no step failed, so no margin was taken."
        );
    };
    let last_stable_mhz = unstable_mhz - options.step_mhz;
    let below_mhz = last_stable_mhz - offset_mhz;
    let margin_mhz = options.step_mhz * options.margin_steps as i32;
    let steps = options.margin_steps;
    if below_mhz <= 0 {
        return format!(
            "The offset to use at the {lock} MHz lock is {offset_mhz:+} MHz, confirmed stable for {confirmed}. {unstable_mhz:+} MHz was the first unstable step; this is the last step that passed, with no margin below it (--margin-steps {steps})."
        );
    }
    let why = if below_mhz > margin_mhz {
        format!(
            "the margin of {steps} steps ({margin_mhz} MHz), and a step more for each long check that failed above it"
        )
    } else if below_mhz < margin_mhz {
        format!("the margin of {steps} steps ({margin_mhz} MHz), which stops at +0 MHz")
    } else {
        format!(
            "a margin of {steps} steps, since a step near the edge passes a short check and can still fail in a long run"
        )
    };
    format!(
        "The offset to use at the {lock} MHz lock is {offset_mhz:+} MHz, confirmed stable for {confirmed}. {unstable_mhz:+} MHz was the first unstable step; the result is {below_mhz} MHz below the last step that passed ({last_stable_mhz:+} MHz): {why}."
    )
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

    /// Saves the confirmed offset in `store` as the profile `name`: the scan's own settings
    /// only (the offset, and a lock from the card's lowest clock to the scan's, so the card
    /// still clocks down when idle), never what others held on the card meanwhile, with its
    /// confirmation as its check and as the card's own checked offset. A profile of that name
    /// is replaced only when `replace` says so (its notes, boot-default flag and the other
    /// cards' checked offsets kept); a profile saved from another card keeps its settings and
    /// gains this card's own offset. The profile and its file, or `None` when no offset was
    /// confirmed. The CLI and the window save through here.
    pub fn save_profile(
        &self,
        store: &ProfileStore,
        name: &str,
        gpu: &GpuInfo,
        replace: bool,
    ) -> Result<Option<(Profile, PathBuf)>, StoreError> {
        let previous = match store.load(name) {
            Ok(existing) if existing.profile.name == name => Some(existing),
            Err(error @ StoreError::Ambiguous { .. }) => return Err(error),
            // Another name, none, or an unreadable file (which the store never overwrites).
            Ok(_) | Err(_) => None,
        };
        if let Some(existing) = &previous
            && !replace
        {
            return Err(StoreError::AlreadyExists {
                name: name.to_string(),
                path: existing.path.clone(),
            });
        }
        let previous = previous.map(|stored| stored.profile);
        let Some(profile) = self.profile(name, gpu, previous.as_ref()) else {
            return Ok(None);
        };
        let path = store.save(&profile)?;
        Ok(Some((profile, path)))
    }

    fn profile(&self, name: &str, gpu: &GpuInfo, previous: Option<&Profile>) -> Option<Profile> {
        let offset_mhz = self.stable_offset_mhz?;
        let report = self.confirmation.as_ref()?;
        let entry = CheckedCard {
            gpu_uuid: gpu.identity.uuid.clone(),
            gpu_name: gpu.identity.name.clone(),
            gpu_clock_offset_mhz: Some(offset_mhz),
            memory_clock_offset_mhz: None,
            checked_at_ms: report.ended_at_ms,
            ran_s: report.result.ran_s,
            by: CheckedBy::Scan,
            verdict: report.verdict,
        };
        if let Some(previous) = previous.filter(|previous| !previous.is_for(&gpu.identity.uuid)) {
            let mut profile = previous.clone();
            profile.record_checked_card(entry);
            return Some(profile);
        }
        let lowest_mhz = gpu
            .constraints
            .gpu_clock_range
            .map_or(self.options.lock_mhz, |range| range.min_mhz);
        let in_force = SettingsInForce {
            gpu_clock_offset_mhz: Some(offset_mhz),
            gpu_clock_lock: ClockLockInForce::Locked {
                min_mhz: lowest_mhz.min(self.options.lock_mhz),
                max_mhz: self.options.lock_mhz,
            },
            memory_clock_lock: ClockLockInForce::Unlocked,
            ..SettingsInForce::default()
        };
        let mut profile =
            Profile::from_in_force(name, &gpu.identity, &gpu.constraints, &in_force, None, None);
        if let Some(previous) = previous.filter(|previous| previous.is_for(&gpu.identity.uuid)) {
            profile.notes = previous.notes.clone();
            profile.default_for_card = previous.default_for_card;
        }
        profile.last_check = Some(report.record());
        profile.checked_cards = previous
            .map(|previous| previous.checked_cards.clone())
            .unwrap_or_default();
        profile.record_checked_card(entry);
        if profile.notes.is_empty() {
            profile.notes = format!("Found by gputune scan: {}", self.summary);
        }
        Some(profile)
    }
}

/// Said when a scan's offset is recorded into a profile saved from another card whose GPU
/// clocks may go above the scan's lock, where the offset was not found stable.
pub fn lock_caveat(profile: &Profile, lock_mhz: u32, gpu_uuid: &str) -> Option<String> {
    if profile.is_for(gpu_uuid)
        || profile
            .gpu_clock_lock
            .is_some_and(|lock| lock.max_mhz <= lock_mhz)
    {
        return None;
    }
    Some(format!(
        "The offset was found at a {lock_mhz} MHz lock and the profile \"{}\" lets the GPU clock {}; `gputune stability --profile \"{}\" --gpu {gpu_uuid}` checks it at the profile's settings.",
        profile.name,
        profile.gpu_clock_lock.map_or_else(
            || "as high as the card goes".to_string(),
            |lock| format!("up to {} MHz", lock.max_mhz)
        ),
        profile.name
    ))
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
