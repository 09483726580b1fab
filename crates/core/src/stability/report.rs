//! A finished check as people and programs read it: the verdict sentence, the figures behind
//! it (`--json`), and the short record a profile keeps of its last check.

use serde::{Deserialize, Serialize};

use super::plan::{CheckOptions, LoadShape};
use super::run::{Ending, RunResult};
use gputune_formats::profile::{CheckRecord, Verdict};
use gputune_formats::tuning::GpuInfo;
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};
use gputune_formats::units::{duration_s, gib, large_count};

/// A check this long is thorough (`gputune stability`'s default); a shorter one finds only
/// gross instability, and its verdict says so.
pub const THOROUGH_CHECK_S: f64 = 600.0;
/// A card whose peak clock came this close to the top of its clock lock ran at the lock.
const AT_LOCK_MHZ: u32 = 30;

/// The verdict a check's ending gives.
pub trait VerdictOfEnding {
    fn of(ending: &Ending) -> Verdict;
}

impl VerdictOfEnding for Verdict {
    fn of(ending: &Ending) -> Verdict {
        match ending {
            Ending::Completed => Verdict::Stable,
            Ending::Unstable { .. } => Verdict::Unstable,
            Ending::Stopped { .. } => Verdict::Stopped,
            Ending::NotRun { .. } => Verdict::NotRun,
        }
    }
}

/// Everything one card's check found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub gpu_name: String,
    /// What was checked: "+150 MHz offset / 2520 MHz lock", "stock settings".
    pub settings: String,
    pub pattern: LoadShape,
    pub duration_asked_s: f64,
    pub verdict: Verdict,
    #[serde(flatten)]
    pub result: RunResult,
    /// The GEMM's rate, TFLOP/s.
    pub gemm_tflops: Option<f64>,
    /// The memory test's rate (written plus read), GiB/s.
    pub vram_gib_per_s: Option<f64>,
    /// Whether the card drew within 5 % of its power limit at some reading.
    pub reached_power_limit: bool,
    /// What was put back when the check's session ended (empty when it changed nothing).
    pub put_back: Vec<String>,
    /// False when a setting could not be put back.
    pub put_back_complete: bool,
    /// Unix time the check ended, ms.
    pub ended_at_ms: u64,
    pub driver_version: Option<String>,
    pub gputune_version: String,
}

impl CheckReport {
    /// The report of `result` on `gpu`, checked at `settings` (the verdict and rates derived
    /// from the result), ended now. A check and a scan's confirmation both report through here.
    pub fn new(
        gpu: &GpuInfo,
        settings: String,
        options: &CheckOptions,
        result: RunResult,
        (put_back, put_back_complete): (Vec<String>, bool),
    ) -> CheckReport {
        CheckReport {
            gpu_index: gpu.identity.index,
            gpu_uuid: gpu.identity.uuid.clone(),
            gpu_name: gpu.identity.name.clone(),
            settings,
            pattern: options.shape,
            duration_asked_s: options.duration_s,
            verdict: Verdict::of(&result.ending),
            gemm_tflops: result.tally.gemm_tflops(),
            vram_gib_per_s: result.tally.vram_gib_per_s(),
            reached_power_limit: result.watched.reached_power_limit(),
            result,
            put_back,
            put_back_complete,
            ended_at_ms: crate::clock::wall_clock_ms(),
            driver_version: gpu.identity.driver_version.clone(),
            gputune_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// "GEMM 175.2 TFLOP/s (bf16, fp32 accumulate), VRAM 931 GiB/s written and read back
    /// (simulated)", with what was measured; None before any GEMM ran.
    pub fn rates(&self) -> Option<String> {
        let tflops = self.gemm_tflops?;
        let runtime = self
            .result
            .prepared
            .as_ref()
            .map(|prepared| format!("; {}", prepared.runtime))
            .unwrap_or_default();
        let vram = self
            .vram_gib_per_s
            .map(|gib_s| format!(", VRAM {gib_s:.0} GiB/s written and read back"))
            .unwrap_or_default();
        Some(format!(
            "GEMM {tflops:.1} TFLOP/s (bf16, fp32 accumulate{runtime}){vram}."
        ))
    }

    /// The verdict sentence: "Stable for 10 min at +150 MHz offset / 2520 MHz lock: 0 wrong of
    /// 3.1 × 10¹² checked results, 20.1 GiB of VRAM read back 240 times, no Xid; 2415–2745 MHz,
    /// 71 °C peak, …" or "Unstable after 3 min 12 s at …: 14 wrong GEMM results at 2745 MHz;
    /// put back."
    pub fn sentence(&self) -> String {
        let ran = duration_s(self.result.ran_s);
        let tally = &self.result.tally;
        match &self.result.ending {
            Ending::Completed => {
                let vram = match &self.result.prepared {
                    Some(prepared) if prepared.vram_tested_bytes > 0 => format!(
                        ", {} of VRAM read back {} times",
                        gib(prepared.vram_tested_bytes),
                        tally.vram_patterns
                    ),
                    _ => ", no VRAM tested".to_string(),
                };
                format!(
                    "Stable for {ran} at {}: 0 wrong of {} checked results{vram}, no Xid; {}.{}{}",
                    self.settings,
                    large_count(tally.results()),
                    self.result.watched.summary(),
                    self.stress_note(),
                    self.short_note()
                )
            }
            Ending::Unstable { finding } => format!(
                "Unstable after {ran} at {}: {}{}",
                self.settings,
                finding.describe(),
                self.put_back_note()
            ),
            Ending::Stopped { reason } => format!(
                "Stopped after {ran} at {} ({reason}): {} wrong of {} results checked so far; not a verdict.",
                self.settings,
                tally.wrong(),
                large_count(tally.results())
            ),
            Ending::NotRun { reason } => format!("Not checked: {reason}"),
        }
    }

    fn put_back_note(&self) -> String {
        if self.put_back.is_empty() && self.settings != STOCK_SETTINGS {
            "; the check changed nothing, so the card still runs these settings.".to_string()
        } else if self.put_back.is_empty() {
            ".".to_string()
        } else if self.put_back_complete {
            "; put back.".to_string()
        } else {
            "; NOT everything could be put back (see above).".to_string()
        }
    }

    /// Said only where it means something: a card held at its clock lock below the power
    /// limit was not meant to reach it.
    fn stress_note(&self) -> String {
        let watched = &self.result.watched;
        let held_at_lock = watched
            .locked_max_mhz
            .zip(watched.clock_max_mhz)
            .is_some_and(|(lock_mhz, peak_mhz)| peak_mhz + AT_LOCK_MHZ >= lock_mhz);
        if watched.readings > 0 && !watched.reached_power_limit() && !held_at_lock {
            " The card never reached its power limit, so it was not fully stressed.".to_string()
        } else {
            String::new()
        }
    }

    /// Whether it was asked to run for less than a thorough check.
    pub fn is_short(&self) -> bool {
        self.duration_asked_s < THOROUGH_CHECK_S
    }

    fn short_note(&self) -> String {
        if self.is_short() {
            format!(
                " This was a short check ({}): it finds only gross instability; a thorough one runs {}.",
                duration_s(self.duration_asked_s),
                duration_s(THOROUGH_CHECK_S)
            )
        } else {
            String::new()
        }
    }

    /// "GPU 0 (NVIDIA GeForce RTX 4090, GPU-5a1e…)": the card that was checked.
    pub fn card(&self) -> String {
        format!(
            "GPU {} ({}, {})",
            self.gpu_index, self.gpu_name, self.gpu_uuid
        )
    }

    /// The short record a profile keeps, naming the card checked.
    pub fn record(&self) -> CheckRecord {
        CheckRecord {
            ended_at_ms: self.ended_at_ms,
            ran_s: self.result.ran_s,
            verdict: self.verdict,
            summary: format!("{}: {}", self.card(), self.sentence()),
            driver_version: self.driver_version.clone(),
            gputune_version: self.gputune_version.clone(),
            gpu_uuid: Some(self.gpu_uuid.clone()),
            gpu_name: Some(self.gpu_name.clone()),
        }
    }
}

/// What [`describe_settings`] calls a card that runs nothing gputune tunes.
pub const STOCK_SETTINGS: &str = "stock settings";

/// What a card runs, as a check names it: "+150 MHz offset / 2520 MHz lock", "stock settings".
pub fn describe_settings(in_force: &SettingsInForce, default_power_mw: Option<u32>) -> String {
    let mut parts = Vec::new();
    if let Some(offset) = in_force.gpu_clock_offset_mhz.filter(|offset| *offset != 0) {
        parts.push(format!("{offset:+} MHz offset"));
    }
    if let ClockLockInForce::Locked { min_mhz, max_mhz } = in_force.gpu_clock_lock {
        if min_mhz == max_mhz {
            parts.push(format!("{max_mhz} MHz lock"));
        } else {
            parts.push(format!("{min_mhz}-{max_mhz} MHz lock"));
        }
    }
    if let Some(offset) = in_force
        .memory_clock_offset_mhz
        .filter(|offset| *offset != 0)
    {
        parts.push(format!("{offset:+} MHz memory offset"));
    }
    if let Some(limit) = in_force.power_limit_mw
        && default_power_mw.is_some_and(|default| default != limit)
    {
        parts.push(format!(
            "{} limit",
            gputune_formats::units::power_limit_with_share(limit, default_power_mw)
        ));
    }
    if parts.is_empty() {
        STOCK_SETTINGS.to_string()
    } else {
        parts.join(" / ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stability::compute::{Checked, Prepared};
    use crate::stability::record::RecordedCheck;
    use crate::stability::run::{Finding, Tally};
    use crate::stability::watch::Watched;

    fn report(ending: Ending) -> CheckReport {
        let tally = Tally {
            gemm: Checked {
                results: 3_000_000_000_000,
                ..Checked::default()
            },
            fma: Checked {
                results: 100_000_000_000,
                ..Checked::default()
            },
            vram: Checked::default(),
            vram_patterns: 240,
        };
        CheckReport {
            gpu_index: 0,
            gpu_uuid: "GPU-1".to_string(),
            gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
            settings: "+150 MHz offset / 2520 MHz lock".to_string(),
            pattern: LoadShape::Both,
            duration_asked_s: 600.0,
            verdict: Verdict::of(&ending),
            result: RunResult {
                ending,
                ran_s: 600.0,
                tally,
                watched: Watched::default(),
                prepared: Some(Prepared {
                    device_name: "sim".to_string(),
                    runtime: "simulated".to_string(),
                    vram_tested_bytes: 20_100 << 20,
                }),
            },
            gemm_tflops: None,
            vram_gib_per_s: None,
            reached_power_limit: false,
            put_back: vec!["Put back GPU 0 (GPU offset 0 MHz).".to_string()],
            put_back_complete: true,
            ended_at_ms: 0,
            driver_version: None,
            gputune_version: "0.1.0".to_string(),
        }
    }

    #[test]
    fn a_stable_verdict_says_what_was_checked_and_seen() {
        assert_eq!(
            report(Ending::Completed).sentence(),
            "Stable for 10 min at +150 MHz offset / 2520 MHz lock: 0 wrong of 3.1 × 10¹² checked results, 19.6 GiB of VRAM read back 240 times, no Xid; no readings of the card."
        );
    }

    #[test]
    fn an_unstable_verdict_says_what_went_wrong_and_that_it_was_put_back() {
        let mut unstable = report(Ending::Unstable {
            finding: Finding::WrongResults {
                part: "GEMM".to_string(),
                wrong: 14,
                clock_mhz: Some(2745),
            },
        });
        unstable.result.ran_s = 192.0;
        assert_eq!(
            unstable.sentence(),
            "Unstable after 3 min 12 s at +150 MHz offset / 2520 MHz lock: 14 wrong GEMM results at 2745 MHz; put back."
        );
        assert_eq!(unstable.record().verdict, Verdict::Unstable);
    }

    #[test]
    fn a_card_held_at_its_clock_lock_is_not_called_unstressed_and_a_short_check_says_so() {
        let mut stable = report(Ending::Completed);
        for at_ms in [0, 500] {
            stable
                .result
                .watched
                .take(&gputune_formats::card::Telemetry {
                    sampled_at_ms: at_ms,
                    sm_clock_mhz: Some(2520),
                    power_draw_mw: Some(330_000),
                    power_limit_mw: Some(450_000),
                    ..gputune_formats::card::Telemetry::default()
                });
        }
        let unstressed = "never reached its power limit";
        assert!(stable.sentence().contains(unstressed));
        stable.result.watched.locked_max_mhz = Some(2520);
        assert!(!stable.sentence().contains(unstressed));
        assert!(!stable.sentence().contains("short check"));
        stable.duration_asked_s = 30.0;
        assert!(
            stable
                .sentence()
                .ends_with("This was a short check (30 s): it finds only gross instability; a thorough one runs 10 min."),
            "{}",
            stable.sentence()
        );
    }

    #[test]
    fn a_record_counts_only_on_the_card_it_was_made_on() {
        let record = report(Ending::Completed).record();
        assert!(record.counts_on("gpu-1"));
        assert!(
            record
                .summary
                .starts_with("GPU 0 (NVIDIA GeForce RTX 4090, GPU-1): Stable")
        );
        assert!(!record.counts_on("GPU-2"));
        assert!(
            record
                .describe_for("GPU-2")
                .ends_with(", on GPU-1 (another card: NVIDIA GeForce RTX 4090), not on this one")
        );
        let old = CheckRecord {
            gpu_uuid: None,
            gpu_name: None,
            ..record
        };
        assert!(!old.counts_on("GPU-1"));
        assert!(
            old.describe_for("GPU-1")
                .ends_with("so it counts as checked on no card")
        );
    }

    #[test]
    fn settings_are_named_as_the_verdict_says_them() {
        let mut in_force = SettingsInForce {
            power_limit_mw: Some(450_000),
            gpu_clock_lock: ClockLockInForce::Unlocked,
            memory_clock_lock: ClockLockInForce::Unlocked,
            gpu_clock_offset_mhz: Some(0),
            memory_clock_offset_mhz: Some(0),
            fans: None,
            ..SettingsInForce::default()
        };
        assert_eq!(
            describe_settings(&in_force, Some(450_000)),
            "stock settings"
        );
        in_force.gpu_clock_offset_mhz = Some(150);
        in_force.gpu_clock_lock = ClockLockInForce::Locked {
            min_mhz: 2520,
            max_mhz: 2520,
        };
        in_force.power_limit_mw = Some(315_000);
        assert_eq!(
            describe_settings(&in_force, Some(450_000)),
            "+150 MHz offset / 2520 MHz lock / 315 W (70 % of 450 W) limit"
        );
    }
}
