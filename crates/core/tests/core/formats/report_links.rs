//! `gputune links --json` pinned: the simulator's GPUs 4 and 5 (5 at x8), with a wrong byte
//! injected into the copies from 5 to 4, made by the engine itself (the simulated copies' times
//! are modeled, so every figure repeats but the run's own length, fixed here).

use std::ops::ControlFlow;

use gputune_core::device::Backend;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_core::pcie::simulated::{FaultAt, SimulatedBench};
use gputune_core::pcie::{LinksOptions, run_links};
use gputune_formats::reports::links::{LinksOutcome, LinksReport};

use super::command_reports::printed;
use super::golden;

#[test]
fn links_json_writes_its_bytes_and_reads_back() {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        load: LoadPattern::Idle,
    });
    let cards: Vec<_> = [4, 5]
        .iter()
        .map(|gpu| {
            backend
                .identity(*gpu)
                .unwrap_or_else(|error| panic!("{error}"))
        })
        .collect();
    let mut bench = SimulatedBench::new(&cards);
    bench
        .faults()
        .wrong_byte(FaultAt::Pair { from: 5, to: 4 }, 8192);
    let options = LinksOptions {
        size_bytes: 16 << 20,
        passes: 2,
    };
    let mut report = run_links(&mut backend, &cards, &mut bench, &options, &mut |_| {
        ControlFlow::Continue(())
    });
    report.ran_s = 0.75;
    assert_eq!(report.outcome, LinksOutcome::WrongData);
    let bytes = printed(&report);
    golden("reports/links.json", &bytes);
    let read: LinksReport =
        serde_json::from_slice(&bytes).unwrap_or_else(|error| panic!("it reads back: {error}"));
    assert_eq!(read, report);
}
