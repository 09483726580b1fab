//! `gputune rank --json`, pinned byte for byte: a box of three cards where GPU 2 sits in a hot
//! slot, ranked from fixed figures by the ranking's own verdict, so the sentences are pinned
//! too.

use gputune_core::rank::verdict::{Measured, rank};
use gputune_core::rank::watch::IdlePoint;
use gputune_formats::reports::rank::{PhaseFigures, RANK_REPORT_FORMAT, RankReport, ThrottleShare};
use gputune_formats::reports::stability::Ending;
use gputune_formats::throttle::ThrottleReason;

use super::command_reports::printed;
use super::golden;
use super::values::constraints;

fn figures(tflops: f64, late_c: f64, late_w: f64, thermal_pct: f64) -> PhaseFigures {
    let mut throttled = vec![ThrottleShare {
        reason: ThrottleReason::SwPowerCap,
        time_pct: 100.0 - thermal_pct,
    }];
    if thermal_pct > 0.0 {
        throttled.push(ThrottleShare {
            reason: ThrottleReason::SwThermalSlowdown,
            time_pct: thermal_pct,
        });
    }
    PhaseFigures {
        ending: Ending::Completed,
        ran_s: 60.0,
        gemm_tflops: Some(tflops),
        results: 2_013_265_920,
        wrong: 0,
        readings: 120,
        clock_mean_mhz: Some(2685.0),
        clock_min_mhz: Some(2655),
        clock_max_mhz: Some(2700),
        power_mean_w: Some(late_w),
        power_limit_w: Some(450.0),
        temperature_start_c: Some(41),
        temperature_peak_c: Some(late_c as u32 + 1),
        temperature_end_c: Some(late_c as u32),
        late_temperature_mean_c: Some(late_c),
        late_power_mean_w: Some(late_w),
        thermal_throttle_from_c: (thermal_pct > 0.0).then_some(84),
        throttled,
    }
}

#[test]
fn rank_json_writes_its_bytes() {
    let card = |index: u32, alone: PhaseFigures, together: PhaseFigures| Measured {
        gpu_index: index,
        gpu_uuid: format!("GPU-5a1e0c2d-0000-4000-9000-00000000000{index}"),
        gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
        constraints: constraints(),
        idle: Some(IdlePoint {
            temperature_c: 35.0,
            power_w: 28.0,
        }),
        alone: Some(alone),
        together: Some(together),
    };
    let measured = [
        card(
            0,
            figures(176.0, 70.0, 445.0, 0.0),
            figures(175.5, 71.0, 446.0, 0.0),
        ),
        card(
            1,
            figures(175.2, 73.0, 447.0, 0.0),
            figures(174.8, 74.0, 447.0, 0.0),
        ),
        card(
            2,
            figures(170.1, 84.0, 440.0, 12.0),
            figures(154.3, 87.0, 431.0, 61.0),
        ),
    ];
    let ranked = rank(&measured);
    let report = RankReport {
        format_version: RANK_REPORT_FORMAT,
        alone_s: 60.0,
        together_s: 120.0,
        settings: "stock settings (450 W limit)".to_string(),
        forced_different_settings: false,
        cards: ranked.cards,
        best_gpu_index: ranked.best_gpu_index,
        box_pace: ranked.box_pace,
        summary: ranked.summary,
        stopped: None,
        put_back: Vec::new(),
        ran_s: 302.4,
        ended_at_ms: 1_764_410_400_000,
    };
    let bytes = printed(&report);
    let read: RankReport = match serde_json::from_slice(&bytes) {
        Ok(read) => read,
        Err(error) => panic!("the report reads back: {error}"),
    };
    // Floats read back to within their last bit; the verdicts exactly.
    let verdicts = |report: &RankReport| -> Vec<_> {
        report
            .cards
            .iter()
            .map(|card| {
                (
                    card.verdict,
                    card.cause,
                    card.remedy.clone(),
                    card.sentence.clone(),
                )
            })
            .collect()
    };
    assert_eq!(verdicts(&read), verdicts(&report));
    golden("reports/rank.json", &bytes);
}
