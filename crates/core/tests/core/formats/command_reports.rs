//! The `--json` reports, pinned byte for byte (docs/json.md promises their fields to scripts):
//! one realistic value of each, printed as the command prints it, compared with
//! `tests/data/formats/reports/`. Reports are only written, so nothing reads them back.

use serde::Serialize;

use gputune_core::formats::reports::status::{
    GpuEntry, GpuFailure, GpuStatus, STATUS_REPORT_FORMAT, SessionStatus, StatusReport,
};

use gputune_core::formats::reports::profile_list::{
    ListedProblem, ListedProfile, PROFILE_LIST_FORMAT, ProfileList,
};

use gputune_core::formats::card::{EccCounts, Telemetry};
use gputune_core::formats::reports::scan::{
    SCAN_REPORT_FORMAT, ScanOptions, ScanOutcome, ScanReport, ScanStep,
};
use gputune_core::formats::reports::stability::{
    CheckReport, Checked, Ending, Finding, LoadShape, Prepared, RunResult, STABILITY_REPORT_FORMAT,
    StabilityReport, Tally, Verdict,
};
use gputune_core::formats::reports::stability_watched::Watched;

use gputune_core::formats::card::Setting;
use gputune_core::formats::reports::sweep::{
    ChosenStep, Comparison, Noise, Objective, SWEEP_REPORT_FORMAT, SweepEnd, SweepOutcome,
    SweepReport,
};
use gputune_core::formats::reports::sweep_step::{
    MeasuredBy, ProgressSource, StepResult, SweepStep, Throughput, WorkUnit,
};

use gputune_core::formats::reports::fan_curves::{
    FAN_CURVE_REPORT_FORMAT, FanCurveReport, ShownGpu,
};

use super::disk::profile;
use super::golden;
use super::values::{constraints, curve, identity, in_force, stats, telemetry, tuning};

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
fn check_report(ending: Ending, ran_s: f64) -> CheckReport {
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

fn sweep_step(power_limit_pct: f64, clock_cap_mhz: Option<u32>, is_repeat: bool) -> SweepStep {
    let power_limit_mw = (450_000.0 * power_limit_pct / 100.0) as u32;
    let mut settings = vec![Setting::PowerLimit { power_limit_mw }];
    settings.push(match clock_cap_mhz {
        Some(max_mhz) => Setting::LockGpuClocks {
            min_mhz: 210,
            max_mhz,
        },
        None => Setting::ResetGpuClocks,
    });
    let cap = clock_cap_mhz.map_or(String::new(), |cap| format!(", cap {cap} MHz"));
    SweepStep {
        label: format!("{power_limit_pct} % ({} W){cap}", power_limit_mw / 1000),
        power_limit_pct,
        power_limit_mw,
        clock_cap_mhz,
        gpu_clock_offset_mhz: None,
        settings,
        is_repeat,
        in_force_note: if clock_cap_mhz.is_some() {
            String::new()
        } else {
            "GPU clock lock 210-2520 MHz reset for the sweep".to_string()
        },
    }
}

fn step_result(step: SweepStep, units_per_s: f64, average_power_w: f64) -> StepResult {
    StepResult {
        step,
        throughput: Some(Throughput {
            units_per_s,
            spread_pct: Some(1.4),
        }),
        average_power_w: Some(average_power_w),
        energy_per_unit_j: Some(average_power_w / units_per_s),
        stats: stats(),
        measured_s: 50.0,
        unstable: None,
        noisy: None,
    }
}

#[test]
fn sweep_json_writes_its_bytes() {
    let mut refused = StepResult::unmeasured(
        &sweep_step(60.0, Some(1800), false),
        "the driver refused the GPU clock lock (not supported)".to_string(),
    );
    refused.noisy = None;
    let mut noisy = step_result(sweep_step(80.0, None, false), 4.52, 357.0);
    noisy.noisy = Some("its spread (4.1 %) is larger than the difference it measures".to_string());
    let results = vec![
        step_result(sweep_step(100.0, None, false), 4.61, 441.5),
        noisy,
        step_result(sweep_step(70.0, Some(2100), false), 4.48, 309.2),
        refused,
        step_result(sweep_step(100.0, None, true), 4.59, 439.8),
    ];
    let chosen = ChosenStep {
        step_index: 2,
        label: results[2].step.label.clone(),
        comparison: Comparison {
            slowdown_pct: 2.6,
            energy_saved_pct: 27.9,
        },
        noise: Some(Noise {
            throughput_drift_pct: 0.4,
            energy_drift_pct: Some(0.3),
        }),
        within_noise: false,
        sentence: "70 % (315 W), cap 2100 MHz: 28 % less energy per step, 2.6 % slower."
            .to_string(),
    };
    let outcome = |recommendation, ended, measured_by| SweepOutcome {
        gpu_index: 0,
        gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
        gpu_uuid: super::values::UUID.to_string(),
        objective: Objective::EnergyWithinSlowdown {
            max_slowdown_pct: 3.0,
        },
        measured_by,
        results: results.clone(),
        recommendation,
        ended,
        restored: vec!["Put back GPU 0: power limit 450 W, GPU clocks unlocked.".to_string()],
        restore_complete: true,
        duration_s: 300.0,
    };
    let recommended = outcome(
        Ok(chosen),
        SweepEnd::Completed,
        Some(MeasuredBy::Progress {
            source: ProgressSource::Tqdm,
            unit: WorkUnit::Step,
        }),
    );
    golden(
        "reports/sweep.json",
        &printed(&SweepReport {
            format_version: SWEEP_REPORT_FORMAT,
            outcome: &recommended,
        }),
    );
    // Every other kind once: the endings, the measures, the objectives, no recommendation.
    let others: Vec<SweepOutcome> = [
        (
            SweepEnd::Stopped {
                reason: "stopped by Ctrl-C or SIGTERM".to_string(),
            },
            Some(MeasuredBy::Proxy),
        ),
        (
            SweepEnd::JobFailed {
                exit_code: 1,
                message: "the job exited with status 1".to_string(),
            },
            Some(MeasuredBy::Progress {
                source: ProgressSource::Custom,
                unit: WorkUnit::Other("frame".to_string()),
            }),
        ),
        (
            SweepEnd::Failed {
                reason: "the daemon went away".to_string(),
            },
            None,
        ),
    ]
    .into_iter()
    .map(|(ended, measured_by)| {
        outcome(
            Err("No setting was measured twice: no noise to compare with.".to_string()),
            ended,
            measured_by,
        )
    })
    .collect();
    /// The parts of an outcome that differ by kind, in the order an outcome prints them.
    #[derive(Serialize)]
    struct Kinds<'a> {
        objectives: [Objective; 2],
        endings: Vec<&'a SweepEnd>,
        measures: Vec<&'a Option<MeasuredBy>>,
        no_recommendation: &'a SweepOutcome,
    }
    let kinds = Kinds {
        objectives: [Objective::LeastEnergy, Objective::PerfPerWatt],
        endings: others.iter().map(|other| &other.ended).collect(),
        measures: others.iter().map(|other| &other.measured_by).collect(),
        no_recommendation: &others[0],
    };
    golden("reports/sweep-kinds.json", &printed(&kinds));
    // What `sweep --json` printed reads back (the tests of the CLI read it so).
    let back: SweepOutcome = match serde_json::from_slice(&printed(&others[0])) {
        Ok(back) => back,
        Err(error) => panic!("the sweep's JSON reads back: {error}"),
    };
    // (serde_json's float parsing may move a last digit: the kinds are what matter here.)
    assert_eq!(back.recommendation, others[0].recommendation);
    assert_eq!(back.ended, others[0].ended);
    assert_eq!(back.measured_by, others[0].measured_by);
    assert_eq!(back.objective, others[0].objective);
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
