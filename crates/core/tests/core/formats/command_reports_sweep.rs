//! `gputune sweep --json`, pinned byte for byte like the other reports
//! ([`super::command_reports`]): a sweep with a recommendation, and every other kind of ending,
//! measure, objective and a sweep without one.

use serde::Serialize;

use gputune_formats::card::Setting;
use gputune_formats::reports::sweep::{
    ChosenStep, Comparison, Noise, Objective, SWEEP_REPORT_FORMAT, SweepEnd, SweepOutcome,
    SweepReport,
};
use gputune_formats::reports::sweep_box::{CardAdvice, CardAdviceReason, CardStepStats, SweepCard};
use gputune_formats::reports::sweep_step::{
    MeasuredBy, ProgressSource, StepResult, SweepStep, Throughput, WorkUnit,
};

use super::command_reports::printed;
use super::golden;
use super::values::stats;

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
        cards: Vec::new(),
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
        cards: Vec::new(),
        card_advice: Vec::new(),
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
    // A sweep over two cards of a box: each card's readings in every row, the cards, and a
    // hot slot's advice (a sweep of one card has none of these fields).
    let mut hot = stats();
    hot.average_temperature_c = Some(81.0);
    let mut box_results = results.clone();
    box_results.truncate(2);
    for result in &mut box_results {
        result.cards = vec![
            CardStepStats {
                gpu_index: 0,
                stats: stats(),
            },
            CardStepStats {
                gpu_index: 3,
                stats: hot.clone(),
            },
        ];
    }
    let two_cards = SweepOutcome {
        results: box_results,
        cards: vec![
            SweepCard {
                gpu_index: 0,
                gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
                gpu_uuid: super::values::UUID.to_string(),
            },
            SweepCard {
                gpu_index: 3,
                gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
                gpu_uuid: "GPU-00000003-0000-4000-9000-000000000003".to_string(),
            },
        ],
        card_advice: vec![CardAdvice {
            gpu_index: 3,
            reason: CardAdviceReason::Hotter {
                above_others_c: 17.5,
            },
            temperature_c: Some(81.0),
            power_limit_pct: Some(70.0),
            power_limit_mw: Some(315_000),
            sentence: "GPU 3 runs 18 °C hotter than the others at 90 % (405 W): a hot slot; give it its own power limit of 70 % (315 W).".to_string(),
        }],
        ..recommended.clone()
    };
    /// The box's report, and the advice's other reason.
    #[derive(Serialize)]
    struct BoxKinds<'a> {
        report: SweepReport<'a>,
        other_reason: CardAdviceReason,
    }
    golden(
        "reports/sweep-box.json",
        &printed(&BoxKinds {
            report: SweepReport {
                format_version: SWEEP_REPORT_FORMAT,
                outcome: &two_cards,
            },
            other_reason: CardAdviceReason::ThermalThrottle { throttled_s: 12.0 },
        }),
    );
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
