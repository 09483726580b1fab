//! The Box tab as a user sees it: on the simulated 8-GPU box, eight columns with their slots,
//! temperatures and headroom; a click on a card's title opens its graphs; a one-GPU machine
//! gets a sentence instead; a ranking the link thread runs shows its progress, Stop, and each
//! card's place when it ends.

use std::time::{Duration, Instant};

use common_ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::common_ui;
use gputune::ui::app::AppCommand;
use gputune::ui::box_view::BoxAction;
use gputune_core::device::sim::{LoadPattern, SimOptions, SimScenario};
use gputune_core::device::{BackendChoice, BackendOptions};
use gputune_core::folders::Folders;
use gputune_core::link::box_runs::{
    BoxLaunch, BoxProgress, BoxRunKind, BoxRunNews, BoxRunView, ProgressUnit,
};
use gputune_core::link::{Link, LinkCommand, LinkEvent};
use gputune_core::service::client::{SocketChoice, TuningOptions};
use gputune_formats::profile::Verdict;
use gputune_formats::reports::box_check::{
    BoxCheckReport, BoxFailure, BoxRecommendation, BoxStep, StepReport,
};
use gputune_formats::reports::links::{
    CardLinks, CopyPath, CopyResult, LinkVerdict, LinksOutcome, LinksReport, P2pAccess, P2pStatus,
    PairLinks, PcieLink, Topology,
};
use gputune_formats::reports::rank::RankReport;
use gputune_formats::window::Tab;

fn harness(scenario: SimScenario, size: [f32; 2]) -> Harness<'static, Window> {
    let mut state = app_state(scenario, LoadPattern::Training, None, 20, 500);
    state.tab = Tab::Box;
    window_harness(state, size)
}

#[test]
fn the_eight_gpu_box_shows_a_column_per_card_with_its_slot_and_headroom() {
    let mut harness = harness(SimScenario::EightRtx4090, [1280.0, 720.0]);
    harness.run();
    let slots = [
        "01:00.0", "21:00.0", "41:00.0", "61:00.0", "81:00.0", "A1:00.0", "C1:00.0", "E1:00.0",
    ];
    for (index, slot) in slots.iter().enumerate() {
        harness.get_by_label(&format!("GPU {index}"));
        harness.get_by_label(slot);
    }
    // Every card's headroom to its slowdown temperature, from its own reading.
    let headrooms: Vec<String> = {
        let model = &harness.state().state.model;
        model
            .gpus
            .iter()
            .map(|gpu| {
                let reading = match &gpu.latest {
                    Some(Ok(reading)) => reading.clone(),
                    other => panic!("GPU {} has no reading: {other:?}", gpu.info.identity.index),
                };
                gputune::ui::box_view::cells::headroom(
                    &reading,
                    gpu.info.constraints.slowdown_temperature_c,
                )
                .text
            })
            .collect()
    };
    for headroom in &headrooms {
        assert!(headroom.ends_with(" °C"), "{headrooms:?}");
        assert!(
            harness.query_all_by_label(headroom).next().is_some(),
            "{headroom} is shown"
        );
    }
    assert_eq!(harness.query_all_by_label("Headroom").count(), 1);
    // Every card trains: its link is said as reached under load, but GPU 5's, at x8 of x16.
    assert_eq!(harness.query_all_by_label("reached under load").count(), 7);
    assert_eq!(harness.query_all_by_label("Gen 4 x8 of 4 x16").count(), 1);
    harness.get_by_label("under load: below max");
    harness.get_by_label_contains("GPU 5's link runs at Gen 4 x8 under load");
    // The hot slot: GPU 3, hotter than its neighbours and throttling for heat.
    harness.get_by_label_contains("GPU 3 runs");
    harness.get_by_label_contains("slows down for heat: a hot slot");
    harness.get_by_label("GPU 3").click();
    harness.run();
    let state = &harness.state().state;
    assert_eq!((state.tab, state.selected_gpu), (Tab::Monitor, Some(3)));
}

#[test]
fn a_one_gpu_machine_gets_a_sentence_not_a_table() {
    let mut harness = harness(SimScenario::Rtx4090, [1280.0, 720.0]);
    harness.run();
    harness.get_by_label(gputune::ui::box_view::ONE_GPU);
    assert!(harness.query_by_label("Headroom").is_none());
}

/// Every event the link sent until `done`, within a minute.
fn events_until(link: &Link, done: impl Fn(&[LinkEvent]) -> bool) -> Vec<LinkEvent> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut events = Vec::new();
    while !done(&events) {
        assert!(Instant::now() < deadline, "no such events: {events:?}");
        events.extend(link.drain_events());
        std::thread::sleep(Duration::from_millis(10));
    }
    events
}

fn rank_news(event: &LinkEvent) -> Option<&BoxRunView<RankReport>> {
    match event {
        LinkEvent::BoxRun(news) => match news.as_ref() {
            BoxRunNews::Rank(view) => Some(view),
            _ => None,
        },
        _ => None,
    }
}

/// The window's "Rank the cards", "Test the links" and "Check the whole box" on the simulated
/// box, driven by the link thread as the window drives them: a second run is refused while one
/// runs; the finished ranking shows each card's place, the finished link test the x8 card's
/// link and the copies, the finished box check each card's verdict.
#[test]
fn a_ranking_a_link_test_and_a_box_check_the_link_runs_show_their_results() {
    let state = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let options = TuningOptions {
        backend: BackendOptions {
            choice: BackendChoice::Sim,
            sim: SimOptions {
                scenario: SimScenario::EightRtx4090,
                load: LoadPattern::Idle,
            },
            ..BackendOptions::default()
        },
        socket: SocketChoice::None,
        folders: Folders::inside(state.path()),
    };
    let link = Link::spawn(options, 250, || {}).unwrap_or_else(|error| panic!("{error}"));
    let mut events = events_until(&link, |events| {
        events
            .iter()
            .any(|event| matches!(event, LinkEvent::Samples(_)))
    });
    let launch = BoxLaunch {
        kind: BoxRunKind::Rank { together_s: 1.0 },
        gpu_indices: vec![3],
    };
    link.send(LinkCommand::StartBoxRun(Box::new(launch.clone())));
    link.send(LinkCommand::StartBoxRun(Box::new(launch)));
    events.extend(events_until(&link, |events| {
        events
            .iter()
            .filter_map(rank_news)
            .any(|view| view.report.is_some())
    }));
    let refused: Vec<&String> = events
        .iter()
        .filter_map(rank_news)
        .filter_map(|view| view.refused.as_ref())
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("Another run over the box"),
        "{refused:?}"
    );
    assert!(
        events
            .iter()
            .filter_map(rank_news)
            .any(|view| view.running && view.progress.is_some()),
        "its progress came while it ran"
    );
    link.send(LinkCommand::StartBoxRun(Box::new(BoxLaunch {
        kind: BoxRunKind::Links {
            size_bytes: 64 << 20,
        },
        gpu_indices: vec![0, 5],
    })));
    events.extend(events_until(&link, |events| {
        events.iter().any(|event| {
            matches!(event, LinkEvent::BoxRun(news)
                if matches!(news.as_ref(), BoxRunNews::Links(view) if !view.running))
        })
    }));
    link.send(LinkCommand::StartBoxRun(Box::new(BoxLaunch {
        kind: BoxRunKind::BoxCheck {
            duration_s: 4.0,
            clock_cap_mhz: None,
        },
        gpu_indices: vec![0, 1],
    })));
    events.extend(events_until(&link, |events| {
        events.iter().any(|event| {
            matches!(event, LinkEvent::BoxRun(news)
                if matches!(news.as_ref(), BoxRunNews::BoxCheck(view) if !view.running))
        })
    }));

    let mut window = common_ui::empty_state(common_ui::TEST_HISTORY_SAMPLES);
    for event in events {
        window.take_event(event, common_ui::START_MS);
    }
    window.tab = Tab::Box;
    let report = window
        .model
        .box_runs
        .rank
        .as_ref()
        .and_then(|view| view.report.clone())
        .unwrap_or_else(|| panic!("the window keeps the report"));
    assert_eq!(report.cards.len(), 1);
    let links = window
        .model
        .box_runs
        .links
        .as_ref()
        .and_then(|view| view.report.clone())
        .unwrap_or_else(|| panic!("the window keeps the link test's report"));
    assert_eq!((links.gpus.len(), links.pairs.len()), (2, 2));
    let box_check = window
        .model
        .box_runs
        .box_check
        .as_ref()
        .and_then(|view| view.report.clone())
        .unwrap_or_else(|| panic!("the window keeps the box check's report"));
    assert_eq!(box_check.cards.len(), 2, "{box_check:?}");
    let mut harness = window_harness(window, [1280.0, 900.0]);
    harness.run();
    harness.get_by_label("Rank");
    harness.get_by_label_contains("Ranking at");
    for card in &report.cards {
        let place = gputune::ui::box_view::rank_rows::place(card, report.best_gpu_index);
        assert!(
            harness.query_all_by_label(&place.text).next().is_some(),
            "{} is shown",
            place.text
        );
    }
    // The x8 card's link as the copies found it, every copy right.
    harness.get_by_label("Gen 4 x8 of 4 x16");
    harness.get_by_label_contains("Link test: every copy right");
    assert_eq!(
        harness.query_all_by_label_contains(" / ").count(),
        2,
        "host copies"
    );
    assert_eq!(
        harness.query_all_by_label_contains(" ≥ ").count(),
        2,
        "card to card"
    );
    // The box check's verdict on each card it checked, and its sentence.
    assert_eq!(
        harness.query_all_by_label("stable").count(),
        2,
        "{box_check:?}"
    );
    harness.get_by_label_contains("Box check (");
    // Cards a run left out say so; the buttons are back.
    assert_eq!(
        harness.query_all_by_label("—").count(),
        2 * 7 + 4 * 6 + 2 * 6
    );
    harness.get_by_label("Check the whole box");
    harness.get_by_label("Rank the cards");
    harness.get_by_label("Test the links");
    drop(link);
}

/// A running ranking shows its phase and Stop, and nothing else starts; the buttons start the
/// ranking over every card.
#[test]
fn a_running_ranking_shows_its_phase_and_can_be_stopped() {
    let mut harness = harness(SimScenario::EightRtx4090, [1280.0, 720.0]);
    harness.get_by_label("Rank the cards").click();
    harness.run();
    let launches: Vec<BoxAction> = harness
        .state()
        .commands
        .iter()
        .filter_map(|command| match command {
            AppCommand::Box(action) => Some(action.clone()),
            _ => None,
        })
        .collect();
    let [BoxAction::StartRun(launch)] = launches.as_slice() else {
        panic!("{launches:?}");
    };
    assert_eq!(launch.gpu_indices, (0..8).collect::<Vec<u32>>());
    assert_eq!(
        launch.kind,
        BoxRunKind::Rank {
            together_s: gputune_core::rank::options::DEFAULT_TOGETHER_S
        }
    );
    harness.state_mut().state.take_event(
        LinkEvent::BoxRun(Box::new(BoxRunNews::Rank(BoxRunView {
            running: true,
            stopping: false,
            progress: Some(BoxProgress {
                phase: "GPU 3 alone (4 of 8)".to_string(),
                done: 32.0,
                of: 60.0,
                unit: ProgressUnit::Seconds,
                left_s: Some(410.0),
                cards: vec!["GPU 3: GEMM, 2745 MHz".to_string()],
            }),
            report: None,
            refused: None,
        }))),
        0,
    );
    harness.run();
    harness.get_by_label_contains("Ranking the cards: GPU 3 alone (4 of 8), about 6 min 50 s left");
    harness.get_by_label("GPU 3: GEMM, 2745 MHz");
    assert!(harness.query_by_label("Rank the cards").is_none());
    harness.get_by_label("Stop").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Box(BoxAction::StopRun))
    );
}

fn copy(path: CopyPath, gb_per_s: f64, wrong_words: u64) -> CopyResult {
    CopyResult {
        path,
        bytes: 256 << 20,
        copies: 3,
        gb_per_s,
        expected_gb_per_s: Some(25.2),
        wrong_words,
        first_wrong_offset_bytes: (wrong_words > 0).then_some(4096),
    }
}

/// A copy that came back wrong is said loudly, in the card's column and above the sentences.
#[test]
fn a_link_test_that_caught_wrong_data_says_it_loudly() {
    let mut harness = harness(SimScenario::EightRtx4090, [1280.0, 900.0]);
    let link = PcieLink {
        generation: 4,
        width: 16,
    };
    let card = |gpu_index: u32| CardLinks {
        gpu_index,
        gpu_uuid: format!("GPU-{gpu_index}"),
        gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
        link_idle: Some(PcieLink {
            generation: 1,
            width: 16,
        }),
        link_loaded: Some(link),
        link_max: Some(link),
        host_to_device: Some(copy(CopyPath::Direct, 24.6, 0)),
        device_to_host: Some(copy(CopyPath::Direct, 25.1, 0)),
        verdict: LinkVerdict::Good,
        note: "at Gen 4 x16".to_string(),
    };
    let pair = |from_gpu: u32, to_gpu: u32, wrong_words: u64| PairLinks {
        from_gpu,
        to_gpu,
        topology: Some(Topology::HostBridge),
        p2p: Some(P2pAccess {
            read: P2pStatus::Ok,
            write: P2pStatus::Ok,
        }),
        copy: Some(copy(CopyPath::PeerToPeer, 21.0, wrong_words)),
        verdict: if wrong_words > 0 {
            LinkVerdict::WrongData
        } else {
            LinkVerdict::Good
        },
        note: String::new(),
    };
    let report = LinksReport {
        format_version: 1,
        outcome: LinksOutcome::WrongData,
        runtime: "simulated".to_string(),
        size_bytes: 256 << 20,
        passes: 3,
        gpus: vec![card(2), card(4)],
        pairs: vec![pair(2, 4, 17), pair(4, 2, 0)],
        sentences: vec![
            "GPU 2 → GPU 4 returned wrong data peer to peer: do not train across them with P2P on."
                .to_string(),
        ],
        ran_s: 2.0,
        stopped: None,
    };
    harness.state_mut().state.take_event(
        LinkEvent::BoxRun(Box::new(BoxRunNews::Links(BoxRunView {
            running: false,
            stopping: false,
            progress: None,
            report: Some(report),
            refused: None,
        }))),
        0,
    );
    harness.run();
    harness.get_by_label("WRONG DATA to GPU 4");
    harness.get_by_label("P2P ≥ 21.0 GB/s");
    harness
        .get_by_label_contains("Link test: a copy came back WRONG (simulated, 256 MiB × 3, 2.0 s)");
    harness.get_by_label_contains("GPU 2 to GPU 4 returned wrong data");
    assert_eq!(harness.query_all_by_label("24.6 / 25.1 GB/s").count(), 2);
}

/// A box check that failed says which card failed first and where, and offers to prove the
/// clock cap it recommends.
#[test]
fn a_failed_box_check_names_the_first_failure_and_offers_its_clock_cap() {
    let mut harness = harness(SimScenario::EightRtx4090, [1280.0, 900.0]);
    let report = BoxCheckReport {
        format_version: 1,
        verdict: Verdict::Unstable,
        sentence: "The box is unstable: GPU 3 failed in phase at 3,610 W.".to_string(),
        clock_cap_mhz: None,
        steps: vec![StepReport {
            step: BoxStep::Pulsed {
                period_ms: 20,
                duty_pct: 50,
            },
            started_s: 0.0,
            seconds: 150.0,
            box_power_mean_w: Some(2_410.0),
            box_power_peak_w: Some(3_610.0),
            cards: Vec::new(),
            edges: 7_500,
            edge_spread_max_ms: Some(0.4),
        }],
        cards: Vec::new(),
        first_failure: Some(BoxFailure {
            gpu_index: 3,
            gpu_uuid: "GPU-3".to_string(),
            step: Some(BoxStep::Pulsed {
                period_ms: 20,
                duty_pct: 50,
            }),
            at_s: 41.0,
            finding: "14 wrong GEMM results at 2745 MHz".to_string(),
            all_cards_lost: false,
        }),
        recommendation: Some(BoxRecommendation {
            clock_cap_mhz: 2520,
            confirmed: true,
            how: "The failing step passed at 2520 MHz.".to_string(),
        }),
        put_back: Vec::new(),
        put_back_complete: true,
        journaled: false,
        ended_at_ms: 0,
        gputune_version: "0.1.0".to_string(),
    };
    harness.state_mut().state.take_event(
        LinkEvent::BoxRun(Box::new(BoxRunNews::BoxCheck(BoxRunView {
            running: false,
            stopping: false,
            progress: None,
            report: Some(report),
            refused: None,
        }))),
        0,
    );
    harness.run();
    harness.get_by_label_contains("The box is unstable: GPU 3 failed in phase");
    harness.get_by_label_contains(
        "10 ms pulses every 20 ms (50 % duty): the box 2410 W average, 3610 W peak; 7500 edges, every card within 0.4 ms of it",
    );
    harness.get_by_label_contains("GPU 3 failed first, 41 s in");
    harness.get_by_label_contains("Recommended: a clock cap of 2520 MHz on every card");
    harness.get_by_label("Check again at 2520 MHz").click();
    harness.run();
    let launches: Vec<&AppCommand> = harness
        .state()
        .commands
        .iter()
        .filter(|command| matches!(command, AppCommand::Box(_)))
        .collect();
    let [AppCommand::Box(BoxAction::StartRun(launch))] = launches.as_slice() else {
        panic!("{launches:?}");
    };
    assert_eq!(
        launch.kind,
        BoxRunKind::BoxCheck {
            duration_s: gputune::ui::box_view::BOX_CHECK_DEFAULT_S,
            clock_cap_mhz: Some(2520)
        }
    );
}

/// A ranking under way when the daemon goes away ends with it: the window says so and offers
/// the buttons again.
#[test]
fn a_run_under_way_ends_with_a_daemon_that_goes_away() {
    let mut harness = harness(SimScenario::EightRtx4090, [1280.0, 720.0]);
    let state = &mut harness.state_mut().state;
    state.take_event(
        LinkEvent::BoxRun(Box::new(BoxRunNews::Rank(BoxRunView {
            running: true,
            stopping: false,
            progress: None,
            report: None,
            refused: None,
        }))),
        0,
    );
    state.take_event(
        LinkEvent::Lost {
            why: "the daemon closed the connection".to_string(),
        },
        common_ui::START_MS,
    );
    assert_eq!(state.model.box_runs.running(), None);
    let said: Vec<String> = state
        .model
        .notices
        .iter()
        .map(|notice| notice.text().to_string())
        .collect();
    assert!(
        said.iter()
            .any(|text| text.contains("and with it the ranking:")),
        "{said:?}"
    );
}
