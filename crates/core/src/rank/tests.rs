//! The verdict on measured figures: a hot slot named with its limit, a slow card's silicon, a
//! wrong result failing a card whatever its speed, gpu-fryer's 10 % rule, the box's pace.

use gputune_formats::card::Constraints;
use gputune_formats::reports::rank::{PhaseFigures, RankVerdict, SlowCause, ThrottleShare};
use gputune_formats::reports::stability::{Ending, Finding};
use gputune_formats::throttle::ThrottleReason;

use super::verdict::{Measured, rank};
use super::watch::IdlePoint;

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
        results: 1_000,
        wrong: 0,
        readings: 120,
        clock_mean_mhz: Some(2700.0 * tflops / 175.0),
        clock_min_mhz: Some(2400),
        clock_max_mhz: Some(2760),
        power_mean_w: Some(late_w),
        power_limit_w: Some(450.0),
        temperature_start_c: Some(40),
        temperature_peak_c: Some(late_c as u32 + 1),
        temperature_end_c: Some(late_c as u32),
        late_temperature_mean_c: Some(late_c),
        late_power_mean_w: Some(late_w),
        thermal_throttle_from_c: (thermal_pct > 0.0).then_some(84),
        throttled,
    }
}

fn card(index: u32, alone: PhaseFigures, together: PhaseFigures) -> Measured {
    Measured {
        gpu_index: index,
        gpu_uuid: format!("GPU-{index}"),
        gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
        constraints: Constraints {
            power_limit_min_mw: Some(150_000),
            power_limit_max_mw: Some(600_000),
            power_limit_default_mw: Some(450_000),
            ..Constraints::default()
        },
        idle: Some(IdlePoint {
            temperature_c: 36.0,
            power_w: 30.0,
        }),
        alone: Some(alone),
        together: Some(together),
    }
}

fn cool(index: u32) -> Measured {
    card(
        index,
        figures(175.0, 72.0, 445.0, 0.0),
        figures(174.0, 74.0, 445.0, 0.0),
    )
}

#[test]
fn a_card_throttling_for_heat_only_together_is_a_hot_slot_with_a_computed_limit() {
    let mut cards: Vec<Measured> = (0..4).map(cool).collect();
    cards[3] = card(
        3,
        figures(175.0, 76.0, 445.0, 0.0),
        figures(153.0, 86.0, 430.0, 64.0),
    );
    let ranked = rank(&cards);
    let hot = &ranked.cards[3];
    assert_eq!(hot.cause, Some(SlowCause::HotSlot));
    assert_eq!(hot.verdict, RankVerdict::Slow);
    let remedy = hot.remedy.as_ref().expect("a limit");
    // 86 °C at 430 W, 36 °C at 30 W: 0.125 °C/W; 82 °C is 32 W less: 88 %.
    assert_eq!(remedy.percent_of_default, 88);
    assert!(
        hot.sentence
            .starts_with("GPU 3: \u{2212}12 % vs the best, 153 TFLOP/s")
            && hot
                .sentence
                .contains("thermal throttling 64 % of the time (0 % alone)")
            && hot.sentence.contains("a hot slot")
            && hot
                .sentence
                .contains("a power limit of 88 % (396 W) on GPU 3"),
        "{}",
        hot.sentence
    );
    assert_eq!(ranked.best_gpu_index, Some(0));
    let pace = ranked.box_pace.expect("the box's pace");
    assert_eq!(pace.slowest_gpu_index, 3);
    assert_eq!(pace.box_tflops, 4.0 * 153.0);
    assert_eq!(pace.box_tflops_evened, Some(4.0 * 174.0));
    assert!(ranked.summary[0].contains("as fast as its slowest card, GPU 3: 4 × 153 = 612"));
    assert!(
        ranked.cards[0]
            .sentence
            .starts_with("GPU 0: the best, 174 TFLOP/s")
    );
}

#[test]
fn a_card_slow_alone_at_cool_temperatures_is_its_silicon_and_within_ten_percent_passes() {
    let mut cards: Vec<Measured> = (0..3).map(cool).collect();
    cards[1] = card(
        1,
        figures(163.0, 70.0, 445.0, 0.0),
        figures(162.0, 71.0, 445.0, 0.0),
    );
    let ranked = rank(&cards);
    let slow = &ranked.cards[1];
    assert_eq!(slow.cause, Some(SlowCause::Silicon));
    assert_eq!(slow.verdict, RankVerdict::Passes);
    assert_eq!(slow.remedy, None);
    assert!(slow.sentence.contains("its silicon"), "{}", slow.sentence);
    // The others: no cause to name.
    assert_eq!(ranked.cards[2].cause, None);
}

#[test]
fn a_wrong_result_fails_the_card_whatever_its_speed_and_leaves_it_out_of_the_best() {
    let mut cards: Vec<Measured> = (0..3).map(cool).collect();
    let mut wrong = figures(190.0, 70.0, 445.0, 0.0);
    wrong.ending = Ending::Unstable {
        finding: Finding::WrongResults {
            part: "GEMM".to_string(),
            wrong: 3,
            clock_mhz: Some(2745),
        },
    };
    cards[2].alone = Some(wrong);
    cards[2].together = None;
    let ranked = rank(&cards);
    assert_eq!(ranked.cards[2].verdict, RankVerdict::Failed);
    assert!(
        ranked.cards[2]
            .sentence
            .contains("fails: 3 wrong GEMM results at 2745 MHz under load alone"),
        "{}",
        ranked.cards[2].sentence
    );
    assert_eq!(ranked.best_gpu_index, Some(0));
    assert!(
        ranked
            .summary
            .iter()
            .any(|line| line.contains("1 of 3 cards fail"))
    );
}
