//! A finished check as people and programs read it: the verdict sentence, the figures behind
//! it (`--json`), and the short record a profile keeps of its last check.

use super::rounds::CheckOptions;
use gputune_formats::profile::Verdict;
use gputune_formats::reports::stability::RunResult;
use gputune_formats::reports::stability::{CheckReport, STOCK_SETTINGS};
use gputune_formats::tuning::GpuInfo;
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};

/// The report of `result` on `gpu`, checked at `settings` (the verdict and rates derived
/// from the result), ended now. A check and a scan's confirmation both report through here.
pub fn check_report(
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
    use crate::stability::record::RecordedCheck;
    use gputune_formats::profile::CheckRecord;
    use gputune_formats::reports::stability::LoadShape;
    use gputune_formats::reports::stability::{Checked, Prepared};
    use gputune_formats::reports::stability::{Ending, Finding, Tally};
    use gputune_formats::reports::stability_watched::Watched;

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
