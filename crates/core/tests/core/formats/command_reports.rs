//! The `--json` reports, pinned byte for byte (docs/json.md promises their fields to scripts):
//! one realistic value of each, printed as the command prints it, compared with
//! `tests/data/formats/reports/`. Reports are only written, so nothing reads them back.

use serde::Serialize;

use gputune_formats::reports::status::{
    GpuEntry, GpuFailure, GpuStatus, STATUS_REPORT_FORMAT, SessionStatus, StatusReport,
};

use gputune_formats::reports::profile_list::{
    ListedProblem, ListedProfile, PROFILE_LIST_FORMAT, ProfileList,
};

use gputune_formats::card::{EccCounts, Telemetry};
use gputune_formats::reports::scan::{
    SCAN_REPORT_FORMAT, ScanOptions, ScanOutcome, ScanReport, ScanStep,
};
use gputune_formats::reports::stability::{
    CheckReport, Checked, Ending, Finding, LoadShape, Prepared, RunResult, STABILITY_REPORT_FORMAT,
    StabilityReport, Tally, Verdict,
};
use gputune_formats::reports::stability_watched::Watched;

use gputune_formats::reports::fan_curves::{FAN_CURVE_REPORT_FORMAT, FanCurveReport, ShownGpu};
use gputune_formats::reports::temperature_holds::{
    ShownHold, TEMPERATURE_HOLD_REPORT_FORMAT, TemperatureHoldReport,
};

use super::disk::profile;
use super::golden;
use super::values::{constraints, curve, identity, in_force, telemetry, tuning};

/// What `--json` prints: the pretty layout and a newline.
pub fn printed<T: Serialize>(report: &T) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Err(error) = gputune_core::text::write_json_pretty(&mut bytes, report) {
        panic!("the report did not serialize: {error}");
    }
    bytes.push(b'\n');
    bytes
}

#[test]
fn status_json_writes_its_bytes() {
    let tuning = tuning();
    let telemetry = telemetry();
    let sessions = tuning
        .holders
        .iter()
        .map(|holder| SessionStatus {
            holder: holder.clone(),
            energy_used_mj: Some(12_345_678),
        })
        .collect();
    let read = GpuStatus {
        identity: identity(),
        constraints: constraints(),
        fan_speed_pct: Some(vec![Some(48), Some(55)]),
        fan_speed_rpm: Some(vec![Some(1450), None]),
        telemetry,
        clock_offsets_supported: true,
        sessions,
        not_read: vec![
            "processes (the driver did not answer within 30 s; nothing after it was asked)"
                .to_string(),
        ],
        has_readings: true,
        settings_in_force: Some(in_force()),
        last_critical: tuning.last_critical.clone(),
        temperature_hold: tuning.temperature_hold.clone(),
    };
    let report = StatusReport {
        format_version: STATUS_REPORT_FORMAT,
        backend: "nvml".to_string(),
        simulated_because: None,
        gpus: vec![
            GpuEntry::Read(Box::new(read)),
            GpuEntry::Failed(GpuFailure {
                index: 1,
                error: "GPU 1 is lost: it fell off the bus (Xid 79); reboot to get it back"
                    .to_string(),
            }),
        ],
    };
    golden("reports/status.json", &printed(&report));
}

#[test]
fn profile_list_json_writes_its_bytes() {
    let (quiet, checked) = (profile(false), profile(true));
    let report = ProfileList {
        format_version: PROFILE_LIST_FORMAT,
        folder: "/home/alice/.config/gputune/profiles".to_string(),
        profiles: vec![
            ListedProfile {
                path: "/home/alice/.config/gputune/profiles/quiet.toml".to_string(),
                profile: &quiet,
            },
            ListedProfile {
                path: "/home/alice/.config/gputune/profiles/checked.toml".to_string(),
                profile: &checked,
            },
        ],
        problems: vec![ListedProblem {
            path: "/home/alice/.config/gputune/profiles/broken.toml".to_string(),
            message: "broken.toml: not a profile (TOML parse error at line 3: expected `=`)"
                .to_string(),
        }],
    };
    golden("reports/profile-list.json", &printed(&report));
}

/// A reading during a check: the card near its limit, clocks `clock_mhz`.
fn check_reading(at_ms: u64, clock_mhz: u32, power_w: u32, energy_mj: u64) -> Telemetry {
    let mut reading = telemetry();
    reading.sampled_at_ms = at_ms;
    reading.sm_clock_mhz = Some(clock_mhz);
    reading.power_draw_mw = Some(power_w * 1000);
    reading.energy_total_mj = Some(energy_mj);
    reading.ecc = Some(EccCounts {
        corrected_volatile: 3,
        uncorrected_volatile: 0,
    });
    reading
}

fn watched() -> Watched {
    let mut watched = Watched::default();
    watched.take(&check_reading(1_764_000_000_000, 2745, 309, 912_345_678));
    watched.take(&check_reading(1_764_000_001_000, 2415, 314, 912_657_678));
    watched.locked_max_mhz = Some(2520);
    watched
}

/// A check that found wrong GEMM results after 3 minutes, put back.
pub(super) fn check_report(ending: Ending, ran_s: f64) -> CheckReport {
    let tally = Tally {
        gemm: Checked {
            results: 2_181_038_080,
            wrong: 14,
            flop: 1.8e16,
            bytes: 0,
            elapsed_s: 102.5,
        },
        fma: Checked {
            results: 130_023_424,
            wrong: 0,
            flop: 3.9e14,
            bytes: 0,
            elapsed_s: 11.2,
        },
        vram: Checked {
            results: 11_542_724_608_000,
            wrong: 0,
            flop: 0.0,
            bytes: 46_170_898_432_000,
            elapsed_s: 48.3,
        },
        vram_patterns: 7,
    };
    CheckReport {
        gpu_index: 0,
        gpu_uuid: super::values::UUID.to_string(),
        gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
        settings: "+150 MHz offset / 2520 MHz lock".to_string(),
        pattern: LoadShape::Both,
        duration_asked_s: 600.0,
        verdict: Verdict::of(&ending),
        gemm_tflops: tally.gemm_tflops(),
        vram_gib_per_s: tally.vram_gib_per_s(),
        result: RunResult {
            ending,
            ran_s,
            tally,
            watched: watched(),
            prepared: Some(Prepared {
                device_name: "NVIDIA GeForce RTX 4090".to_string(),
                runtime: "CUDA 12.8, sm_89".to_string(),
                vram_tested_bytes: 22_548_578_304,
            }),
        },
        reached_power_limit: true,
        put_back: vec!["Put back GPU 0: GPU clock offset +0 MHz, GPU clocks unlocked.".to_string()],
        put_back_complete: true,
        ended_at_ms: 1_764_000_192_000,
        driver_version: Some("580.65.06".to_string()),
        gputune_version: "0.2.0".to_string(),
    }
}

#[test]
fn stability_json_writes_its_bytes() {
    let checks = [
        check_report(
            Ending::Unstable {
                finding: Finding::WrongResults {
                    part: "GEMM".to_string(),
                    wrong: 14,
                    clock_mhz: Some(2745),
                },
            },
            192.0,
        ),
        check_report(
            Ending::Unstable {
                finding: Finding::Xid {
                    xid: 13,
                    meaning: "a graphics engine exception".to_string(),
                },
            },
            12.0,
        ),
        check_report(Ending::Completed, 600.0),
        check_report(
            Ending::Stopped {
                reason: "stopped by Ctrl-C or SIGTERM".to_string(),
            },
            31.5,
        ),
        check_report(
            Ending::NotRun {
                reason: "no CUDA driver (libcuda.so.1 not found)".to_string(),
            },
            0.0,
        ),
    ];
    let report = StabilityReport {
        format_version: STABILITY_REPORT_FORMAT,
        checks: &checks,
    };
    golden("reports/stability.json", &printed(&report));
    // Every finding once, in the form a report holds it.
    let findings = [
        Finding::Fault {
            message: "CUDA_ERROR_ILLEGAL_ADDRESS".to_string(),
        },
        Finding::Hung { waited_s: 20.0 },
        Finding::UncorrectedEcc { errors: 2 },
    ];
    golden("reports/stability-findings.json", &printed(&findings));
}

fn scan_step(offset_mhz: Option<i32>, verdict: Verdict, power_mean_w: f64) -> ScanStep {
    ScanStep {
        offset_mhz,
        verdict,
        finding: (verdict == Verdict::Unstable)
            .then(|| "14 wrong GEMM results at 2520 MHz".to_string()),
        clock_min_mhz: Some(2505),
        clock_max_mhz: Some(2520),
        power_mean_w: Some(power_mean_w),
        temperature_peak_c: Some(71),
        wrong: if verdict == Verdict::Unstable { 14 } else { 0 },
        results: 2_181_038_080,
        gemm_tflops: Some(165.3),
        joules_per_tflop: Some(power_mean_w / 165.3),
        ran_s: 60.0,
    }
}

#[test]
fn scan_json_writes_its_bytes() {
    let outcome = ScanOutcome {
        gpu_index: 0,
        gpu_uuid: super::values::UUID.to_string(),
        gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
        options: ScanOptions {
            lock_mhz: 2520,
            step_mhz: 15,
            step_s: 60.0,
            margin_steps: 2,
            confirm_s: 600.0,
            max_offset_mhz: 1000,
        },
        stock: Some(scan_step(None, Verdict::Stable, 398.0)),
        steps: vec![
            scan_step(Some(0), Verdict::Stable, 372.0),
            scan_step(Some(15), Verdict::Stable, 361.0),
            scan_step(Some(30), Verdict::Stable, 352.0),
            scan_step(Some(45), Verdict::Unstable, 345.0),
        ],
        first_unstable_mhz: Some(45),
        stable_offset_mhz: Some(0),
        confirmation: Some(check_report(Ending::Completed, 600.0)),
        summary: "The offset to use at the 2520 MHz lock is +0 MHz, confirmed stable for 10 min."
            .to_string(),
        savings: Some("Against stock: power 398 to 372 W (-7 %).".to_string()),
        put_back: vec!["Put back GPU 0: GPU clock offset +0 MHz, GPU clocks unlocked.".to_string()],
        put_back_complete: true,
        ran_s: 840.0,
    };
    let report = ScanReport {
        format_version: SCAN_REPORT_FORMAT,
        outcome: &outcome,
    };
    golden("reports/scan.json", &printed(&report));
}

#[test]
fn fan_curve_show_json_writes_its_bytes() {
    let report = FanCurveReport {
        format_version: FAN_CURVE_REPORT_FORMAT,
        daemon: true,
        gpus: vec![
            ShownGpu {
                index: 0,
                uuid: super::values::UUID.to_string(),
                curve: Some(curve()),
                kept: true,
                by: Some("gputune fan curve set (pid 77, user bob)".to_string()),
                boot_curve: Some(curve()),
                safety_net_engaged: false,
                last_critical: tuning().last_critical,
            },
            ShownGpu {
                index: 1,
                uuid: "GPU-5a1e0c2d-0000-4000-8000-000000000002".to_string(),
                curve: None,
                kept: false,
                by: None,
                boot_curve: None,
                safety_net_engaged: true,
                last_critical: None,
            },
        ],
    };
    golden("reports/fan-curve-show.json", &printed(&report));
}

#[test]
fn hold_temp_show_json_writes_its_bytes() {
    let report = TemperatureHoldReport {
        format_version: TEMPERATURE_HOLD_REPORT_FORMAT,
        daemon: true,
        gpus: vec![
            ShownHold {
                index: 0,
                uuid: super::values::UUID.to_string(),
                hold: tuning().temperature_hold,
                boot_hold: Some(super::values::temperature_hold()),
            },
            ShownHold {
                index: 1,
                uuid: "GPU-5a1e0c2d-0000-4000-8000-000000000002".to_string(),
                hold: None,
                boot_hold: None,
            },
        ],
    };
    golden("reports/hold-temp-show.json", &printed(&report));
}

/// The window's screenshots start from a check and a scan as `--json` printed them: those
/// files still read (the screenshot test itself runs only on demand).
#[test]
fn the_windows_check_and_scan_fixtures_read() {
    let fixtures = super::formats_dir().join("../stability");
    let read = |name: &str| match std::fs::read_to_string(fixtures.join(name)) {
        Ok(text) => text,
        Err(error) => panic!("tests/data/stability/{name} could not be read: {error}"),
    };
    let checks: Vec<CheckReport> = match serde_json::from_str(&read("check-unstable-rtx4090.json"))
    {
        Ok(checks) => checks,
        Err(error) => panic!("the check fixture reads: {error}"),
    };
    assert!(matches!(
        checks.first().map(|check| &check.result.ending),
        Some(Ending::Unstable {
            finding: Finding::WrongResults { .. }
        })
    ));
    let scan: ScanOutcome = match serde_json::from_str(&read("scan-rtx4090.json")) {
        Ok(scan) => scan,
        Err(error) => panic!("the scan fixture reads: {error}"),
    };
    assert!(
        scan.confirmation
            .is_some_and(|check| check.verdict == Verdict::Stable)
    );
}
