//! The link test on the simulator's 8-GPU box: each copy checked bit for bit (a wrong byte
//! injected in a card's copy or a pair's is caught and named), the link read idle and under
//! load, P2P as the driver allows it, and the rates the simulated links give.

use std::ops::ControlFlow;

use gputune_core::device::sim::{LoadPattern, P2pDriver, SimBackend, SimOptions, SimScenario};
use gputune_core::device::{Backend, BackendChoice, BackendOptions};
use gputune_core::pcie::simulated::{CopyFaults, FaultAt, SimulatedBench};
use gputune_core::pcie::{
    CopyBench, CopyChecked, LinksOptions, LinksProgress, Route, run_links, test_links,
    test_links_opening,
};
use gputune_core::stability::ComputeError;
use gputune_formats::card::GpuIdentity;
use gputune_formats::reports::links::{
    CopyPath, LinkVerdict, LinksOutcome, LinksReport, PcieLink, Topology,
};

const SMALL: LinksOptions = LinksOptions {
    size_bytes: 1 << 20,
    passes: 2,
};

fn backend(load: LoadPattern) -> SimBackend {
    SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        load,
    })
}

fn identities(backend: &mut SimBackend, gpus: &[u32]) -> Vec<GpuIdentity> {
    gpus.iter()
        .map(|gpu| {
            backend
                .identity(*gpu)
                .unwrap_or_else(|error| panic!("{error}"))
        })
        .collect()
}

/// The test on `gpus` with wrong bytes `inject`ed into the simulated copies.
fn run_with(gpus: &[u32], inject: impl FnOnce(&CopyFaults)) -> LinksReport {
    let mut backend = backend(LoadPattern::Training);
    let cards = identities(&mut backend, gpus);
    let mut bench = SimulatedBench::new(&cards);
    inject(&bench.faults());
    run_links(&mut backend, &cards, &mut bench, &SMALL, &mut |_| {
        ControlFlow::Continue(())
    })
}

#[test]
fn a_wrong_byte_in_a_cards_copy_is_caught_and_named() {
    let report = run_with(&[2, 3], |faults| {
        faults.wrong_byte(FaultAt::HostToDevice { gpu: 3 }, 4096 + 2);
    });
    assert_eq!(report.outcome, LinksOutcome::WrongData);
    let card = &report.gpus[1];
    assert_eq!(card.gpu_index, 3);
    assert_eq!(card.verdict, LinkVerdict::WrongData);
    let copies = card.host_to_device.as_ref().expect("host→device copies");
    // The warm-up copy and both timed ones: one wrong word each.
    assert_eq!(copies.wrong_words, 3);
    assert_eq!(copies.first_wrong_offset_bytes, Some(4096));
    assert_eq!(card.note, "wrong data host→device at byte 4096");
    assert_eq!(report.gpus[0].verdict, LinkVerdict::Good);
    assert!(
        report.sentences[0].starts_with("WRONG DATA: GPU 3's copies came back wrong"),
        "{:?}",
        report.sentences
    );
}

#[test]
fn a_wrong_byte_between_two_cards_is_caught_and_named() {
    let report = run_with(&[2, 3], |faults| {
        faults.wrong_byte(FaultAt::Pair { from: 3, to: 2 }, 65_536);
    });
    assert_eq!(report.outcome, LinksOutcome::WrongData);
    let wrong: Vec<_> = report
        .pairs
        .iter()
        .filter(|pair| pair.verdict == LinkVerdict::WrongData)
        .collect();
    assert_eq!(wrong.len(), 1, "{:?}", report.pairs);
    assert_eq!((wrong[0].from_gpu, wrong[0].to_gpu), (3, 2));
    assert_eq!(wrong[0].note, "wrong data at byte 65536");
    assert!(
        report
            .gpus
            .iter()
            .all(|card| card.verdict == LinkVerdict::Good)
    );
    assert!(
        report.sentences[0]
            .contains("WRONG DATA: copies from GPU 3 to GPU 2 (through the host) came back wrong"),
        "{:?}",
        report.sentences
    );
}

#[test]
fn an_idle_card_is_read_at_gen_1_and_under_load_at_its_best() {
    let mut backend = backend(LoadPattern::Idle);
    let mut steps = Vec::new();
    let report = test_links(
        &mut backend,
        &[0, 1],
        &SMALL,
        &mut |step: &LinksProgress| {
            steps.push(step.clone());
            ControlFlow::Continue(())
        },
    );
    let full = PcieLink {
        generation: 4,
        width: 16,
    };
    for card in &report.gpus {
        assert_eq!(card.link_idle.map(|link| link.generation), Some(1));
        assert_eq!(card.link_loaded, Some(full), "{card:?}");
        assert_eq!(card.link_max, Some(full));
        assert_eq!(card.verdict, LinkVerdict::Good, "{card:?}");
    }
    assert_eq!(report.outcome, LinksOutcome::AllRight);
    // Two cards, two ordered pairs, then done.
    assert_eq!(steps.len(), 5);
    assert_eq!(steps[2].doing, "GPU 0 → GPU 1");
    assert_eq!(steps[4].done, steps[4].total);
}

#[test]
fn copies_run_at_the_simulated_links_rate_and_through_the_host_without_p2p() {
    // Big enough copies that their start-up (10 µs) hardly counts.
    let mut backend = backend(LoadPattern::Training);
    let cards = identities(&mut backend, &[0, 1, 4]);
    let mut bench = SimulatedBench::new(&cards);
    let options = LinksOptions {
        size_bytes: 64 << 20,
        passes: 1,
    };
    let report = run_links(&mut backend, &cards, &mut bench, &options, &mut |_| {
        ControlFlow::Continue(())
    });
    for card in &report.gpus {
        let up = card.host_to_device.as_ref().expect("host→device");
        // 83 % of Gen 4 x16's 31.5 GB/s, against 25.2 expected.
        assert!((up.gb_per_s - 26.1).abs() < 0.3, "{up:?}");
        assert!((up.expected_gb_per_s.unwrap_or(0.0) - 25.2).abs() < 0.1);
    }
    let pair = &report.pairs[0];
    assert_eq!((pair.from_gpu, pair.to_gpu), (0, 1));
    assert_eq!(pair.topology, Some(Topology::SingleSwitch));
    let copy = pair.copy.as_ref().expect("a copy");
    assert_eq!(copy.path, CopyPath::ThroughHost);
    assert!((copy.gb_per_s - 13.1).abs() < 0.3, "{copy:?}");
    assert!(
        report
            .sentences
            .iter()
            .any(|sentence| sentence.starts_with("P2P is off (CNS")),
        "{:?}",
        report.sentences
    );
}

#[test]
fn a_patched_driver_copies_peer_to_peer_within_a_socket() {
    let mut backend = backend(LoadPattern::Training);
    backend.set_p2p_driver(P2pDriver::Patched);
    let cards = identities(&mut backend, &[2, 3, 4]);
    let mut bench = SimulatedBench::new(&cards);
    let report = run_links(&mut backend, &cards, &mut bench, &SMALL, &mut |_| {
        ControlFlow::Continue(())
    });
    let path = |from, to| {
        report
            .pairs
            .iter()
            .find(|pair| pair.from_gpu == from && pair.to_gpu == to)
            .and_then(|pair| pair.copy.as_ref())
            .map(|copy| copy.path)
    };
    assert_eq!(path(2, 3), Some(CopyPath::PeerToPeer));
    assert_eq!(path(3, 4), Some(CopyPath::ThroughHost));
    assert_eq!(report.outcome, LinksOutcome::AllRight, "{report:?}");
}

#[test]
fn the_card_at_x8_is_named_with_what_it_costs_the_all_reduce() {
    let report = run_with(&[4, 5], |_| {});
    let card = &report.gpus[1];
    assert_eq!(card.gpu_index, 5);
    assert_eq!(card.verdict, LinkVerdict::Slow);
    assert_eq!(
        card.link_loaded,
        Some(PcieLink {
            generation: 4,
            width: 8
        })
    );
    assert_eq!(card.note, "at Gen 4 x8 of Gen 4 x16");
    // The copies run at the x8 link's rate: about half of GPU 4's (a little more at 1 MiB,
    // where each copy's start-up counts).
    let rate = |index: usize| {
        report.gpus[index]
            .host_to_device
            .as_ref()
            .map_or(0.0, |copy| copy.gb_per_s)
    };
    let share = rate(1) / rate(0);
    assert!((0.45..0.6).contains(&share), "{share}: {report:?}");
    assert_eq!(report.gpus[0].verdict, LinkVerdict::Good);
    assert_eq!(report.outcome, LinksOutcome::AllRight);
    assert!(
        report.sentences.iter().any(|sentence| sentence.starts_with(
            "GPU 5 is at x8 (of x16): its all-reduce is about half as fast as the others'"
        )),
        "{:?}",
        report.sentences
    );
}

/// The simulated copies, but every copy touching GPU `failing` fails as CUDA would.
struct FailingOn {
    inner: SimulatedBench,
    failing: u32,
}

impl CopyBench for FailingOn {
    fn runtime(&self) -> String {
        self.inner.runtime()
    }
    fn prepare(&mut self, bytes: u64) -> Result<(), ComputeError> {
        self.inner.prepare(bytes)
    }
    fn copy(&mut self, route: Route, pass: u32) -> Result<CopyChecked, ComputeError> {
        let touches = match route {
            Route::HostToDevice { gpu } | Route::DeviceToHost { gpu } => gpu == self.failing,
            Route::DeviceToDevice { from, to, .. } => from == self.failing || to == self.failing,
        };
        if touches {
            return Err(ComputeError::Fault(
                "The GPU failed while copying host to device (CUDA_ERROR_LAUNCH_FAILED)".into(),
            ));
        }
        self.inner.copy(route, pass)
    }
}

#[test]
fn a_card_whose_copies_fail_is_not_tested_and_said_so() {
    let mut backend = backend(LoadPattern::Training);
    let cards = identities(&mut backend, &[0, 1, 2]);
    let mut bench = FailingOn {
        inner: SimulatedBench::new(&cards),
        failing: 1,
    };
    let report = run_links(&mut backend, &cards, &mut bench, &SMALL, &mut |_| {
        ControlFlow::Continue(())
    });
    assert_eq!(report.outcome, LinksOutcome::NotTested);
    assert_eq!(report.gpus[1].verdict, LinkVerdict::NotTested);
    assert!(report.gpus[1].note.contains("CUDA_ERROR_LAUNCH_FAILED"));
    assert_eq!(report.gpus[0].verdict, LinkVerdict::Good);
    let untested = report
        .pairs
        .iter()
        .filter(|pair| pair.verdict == LinkVerdict::NotTested)
        .count();
    assert_eq!(untested, 4);
    let said = report.sentences.join("\n");
    assert!(
        said.contains("GPU 1 was not tested: The GPU failed"),
        "{said}"
    );
    assert!(
        said.contains("4 of 6 pairs were not tested (GPU 0 → GPU 1:"),
        "{said}"
    );
}

#[test]
fn the_window_can_test_on_a_handle_of_its_own() {
    let options = BackendOptions {
        choice: BackendChoice::Sim,
        nvml_library_path: None,
        sim: SimOptions {
            scenario: SimScenario::EightRtx4090,
            load: LoadPattern::Training,
        },
    };
    let report = test_links_opening(
        &options,
        &[6, 7],
        &SMALL,
        &mut |_| ControlFlow::Continue(()),
    );
    assert_eq!(report.outcome, LinksOutcome::AllRight, "{report:?}");
    assert_eq!(report.pairs.len(), 2);
    assert_eq!(report.runtime, "simulated");
}

#[test]
fn a_stop_asked_between_copies_ends_the_test_there_with_what_was_tested() {
    let mut backend = backend(LoadPattern::Idle);
    let cards = identities(&mut backend, &[0, 1, 2]);
    let mut bench = SimulatedBench::new(&cards);
    let mut told = 0;
    let report = run_links(&mut backend, &cards, &mut bench, &SMALL, &mut |_| {
        told += 1;
        if told > 2 {
            ControlFlow::Break("stopped from the window".to_string())
        } else {
            ControlFlow::Continue(())
        }
    });
    assert_eq!(report.gpus.len(), 2, "two cards tested before the stop");
    assert!(report.pairs.is_empty());
    assert_eq!(report.outcome, LinksOutcome::NotTested);
    assert_eq!(
        report.stopped.as_deref(),
        Some("stopped from the window, after 2 of 9 cards and pairs")
    );
    assert!(
        report.sentences[0].starts_with("Stopped before its end (stopped from the window"),
        "{:?}",
        report.sentences
    );
}
