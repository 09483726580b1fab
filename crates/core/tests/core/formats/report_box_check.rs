//! `gputune stability --together --json` and the box-check journal, pinned byte for byte
//! (docs/json.md promises the report's fields to scripts; the daemon reads its journal back
//! after a reboot).

use gputune_formats::reports::box_check::{
    BOX_CHECK_REPORT_FORMAT, BOX_JOURNAL_FORMAT, BoxCheckReport, BoxFailure, BoxJournal,
    BoxRecommendation, BoxStep, CardAtStep, StepReport,
};
use gputune_formats::reports::stability::{Ending, Finding, Verdict};

use super::command_reports::{check_report, printed};
use super::golden;

fn step(step: BoxStep, started_s: f64, edges: u32) -> StepReport {
    StepReport {
        step,
        started_s,
        seconds: 100.0,
        box_power_mean_w: Some(3412.5),
        box_power_peak_w: Some(3561.0),
        cards: vec![CardAtStep {
            gpu_index: 3,
            power_mean_w: Some(421.0),
            power_peak_w: Some(449.5),
            clock_min_mhz: Some(2475),
            clock_max_mhz: Some(2685),
            temperature_peak_c: Some(86),
        }],
        edges,
        edge_spread_max_ms: (edges > 0).then_some(0.06),
    }
}

#[test]
fn box_check_json_writes_its_bytes() {
    let report = BoxCheckReport {
        format_version: BOX_CHECK_REPORT_FORMAT,
        verdict: Verdict::Unstable,
        sentence: "GPU 3 failed first, 2 min 41 s into the box check during 50 ms pulses every 100 ms (50 % duty): 14 wrong GEMM results at 2685 MHz. Try a clock cap of 2595 MHz on every card (…).".to_string(),
        clock_cap_mhz: None,
        steps: vec![
            step(
                BoxStep::Pulsed {
                    period_ms: 20,
                    duty_pct: 50,
                },
                0.0,
                5000,
            ),
            step(BoxStep::Full, 500.0, 1),
        ],
        cards: vec![check_report(
            Ending::Unstable {
                finding: Finding::WrongResults {
                    part: "GEMM".to_string(),
                    wrong: 14,
                    clock_mhz: Some(2685),
                },
            },
            161.0,
        )],
        first_failure: Some(BoxFailure {
            gpu_index: 3,
            gpu_uuid: "GPU-5a1e0c2d-0000-4000-9000-000000000003".to_string(),
            step: Some(BoxStep::Pulsed {
                period_ms: 100,
                duty_pct: 50,
            }),
            at_s: 161.0,
            finding: "14 wrong GEMM results at 2685 MHz".to_string(),
            all_cards_lost: false,
        }),
        recommendation: Some(BoxRecommendation {
            clock_cap_mhz: 2595,
            confirmed: true,
            how: "the failing step ran again on every card at lower clock caps: at 2595 MHz every card passed it.".to_string(),
        }),
        put_back: vec!["Put back GPU 3 (GPU clock reset).".to_string()],
        put_back_complete: true,
        journaled: true,
        ended_at_ms: 1_764_400_000_000,
        gputune_version: "0.1.0".to_string(),
    };
    golden("reports/box-check.json", &printed(&report));
    let journal = BoxJournal {
        format_version: BOX_JOURNAL_FORMAT,
        gpu_uuids: vec!["GPU-5a1e0c2d-0000-4000-9000-000000000003".to_string()],
        started_at_ms: 1_764_400_000_000,
        updated_at_ms: 1_764_400_041_000,
        box_power_w: Some(1650.0),
        box_power_peak_w: Some(1702.5),
        clock_max_mhz: Some(2745),
        clock_cap_mhz: None,
        boot_id: Some("0e1d5c3a-8f4b-4f64-9a57-2b1c6d7e8f90".to_string()),
        cards_lost: Vec::new(),
    };
    golden("box-check-journal.json", &printed(&journal));
    assert!(
        journal
            .went_down_sentence("GPU 0")
            .starts_with("The box went down 41 s into an all-card check of GPU 0 at about 1,650 W: suspect the power supply; try a clock cap of 2595 MHz"),
        "{}",
        journal.went_down_sentence("GPU 0")
    );
}
