//! `gputune rank` against the fake libnvidia-ml's 8-GPU box: two cards ranked alone then
//! together, the JSON report and the table printed from it; cards at different power limits
//! refused before anything runs, with what to do. (What the ranking finds is tested on the
//! simulator on a ManualClock: crates/core/tests/core/rank.rs.)

use common::FakeMachine;
use gputune_formats::reports::rank::{RankReport, RankVerdict};

use crate::common;

fn text(bytes: &[u8]) -> String {
    common::text(bytes)
}

#[test]
fn two_cards_are_ranked_alone_and_together_with_a_table_and_json() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let output = machine.gputune(&["rank", "--gpu", "3,4", "--duration-s", "1", "--json"]);
    let stderr = text(&output.stderr);
    let report: RankReport = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is the report ({error}): {}\n{stderr}",
            text(&output.stdout)
        )
    });
    assert!(
        stderr.contains("ranking 2 cards at their current settings, changing nothing"),
        "{stderr}"
    );
    assert_eq!(report.format_version, 1);
    let indices: Vec<u32> = report.cards.iter().map(|card| card.gpu_index).collect();
    assert_eq!(indices, [3, 4]);
    for card in &report.cards {
        for figures in [&card.alone, &card.together] {
            // Readings come twice a second: a phase this short may have none (the simulator's
            // test on a ManualClock checks what they show).
            let figures = figures.as_ref().expect("both phases measured");
            assert!(figures.gemm_tflops.unwrap_or(0.0) > 100.0, "{card:?}");
            assert_eq!(figures.wrong, 0, "{card:?}");
        }
        assert!(
            matches!(card.verdict, RankVerdict::Passes | RankVerdict::Slow),
            "{}",
            card.sentence
        );
    }
    let slow = report
        .cards
        .iter()
        .any(|card| card.verdict == RankVerdict::Slow);
    assert_eq!(output.status.code(), Some(i32::from(slow)), "{stderr}");
    let mut table = Vec::new();
    gputune_core::cli::rank::print_table(&report, &mut table).expect("printed");
    let table = text(&table);
    assert!(
        table.contains("Ranked at stock settings (450 W limit): each card alone for 0.5 s, then all 2 together for 1.0 s.")
            && table.contains("TFLOP/s together")
            && table.contains(&report.cards[0].sentence)
            && table.contains("In a data-parallel job the box is as fast as its slowest card"),
        "{table}"
    );
    // Nothing was changed.
    assert!((0..8).all(|gpu| machine.settings(gpu).power_limit_mw == 450_000));
}

#[test]
fn cards_at_different_power_limits_are_refused_before_anything_runs() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let applied = machine.gputune(&["apply", "--gpu", "1", "--power-limit", "300"]);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let output = machine.gputune(&["rank", "--gpu", "0,1"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("The cards run different settings")
            && stderr.contains("GPU 1: 300 W")
            && stderr.contains("--force")
            && stderr.contains("Nothing was measured"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}
