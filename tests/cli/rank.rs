//! `gputune rank` against the fake libnvidia-ml's 8-GPU box: three cards ranked alone then
//! together, the JSON report and the table printed from it; cards at different power limits
//! refused before anything runs, with what to do.

use common::FakeMachine;
use gputune_formats::reports::rank::{RankReport, RankVerdict, SlowCause};

use crate::common;

fn text(bytes: &[u8]) -> String {
    common::text(bytes)
}

#[test]
fn three_cards_are_ranked_alone_and_together_with_a_table_and_json() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let output = machine.gputune(&["rank", "--gpu", "2,3,4", "--duration-s", "2", "--json"]);
    let stderr = text(&output.stderr);
    let report: RankReport = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is the report ({error}): {}\n{stderr}",
            text(&output.stdout)
        )
    });
    assert!(
        stderr.contains("ranking 3 cards at their current settings, changing nothing"),
        "{stderr}"
    );
    assert_eq!(report.format_version, 1);
    let indices: Vec<u32> = report.cards.iter().map(|card| card.gpu_index).collect();
    assert_eq!(indices, [2, 3, 4]);
    for card in &report.cards {
        for figures in [&card.alone, &card.together] {
            let figures = figures.as_ref().expect("both phases measured");
            assert!(figures.gemm_tflops.unwrap_or(0.0) > 100.0, "{card:?}");
            assert!(figures.readings > 0 && figures.wrong == 0, "{card:?}");
        }
        assert_ne!(card.verdict, RankVerdict::Failed, "{}", card.sentence);
    }
    // The hot slot: GPU 3 throttles for heat, and is named.
    let hot = &report.cards[1];
    assert_eq!(hot.cause, Some(SlowCause::HotSlot), "{}", hot.sentence);
    let expected = match report
        .cards
        .iter()
        .any(|card| card.verdict == RankVerdict::Slow)
    {
        true => 1,
        false => 0,
    };
    assert_eq!(output.status.code(), Some(expected), "{stderr}");
    let mut table = Vec::new();
    gputune_core::cli::rank::print_table(&report, &mut table).expect("printed");
    let table = text(&table);
    assert!(
        table.contains("Ranked at stock settings (450 W limit): each card alone for 1.0 s, then all 3 together for 2.0 s.")
            && table.contains("TFLOP/s together")
            && table.contains(&hot.sentence)
            && table.contains("In a data-parallel job the box is as fast as its slowest card"),
        "{table}"
    );
    // Nothing was changed: every card still at its default limit.
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
