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
use gputune_core::link::box_runs::{BoxLaunch, BoxProgress, BoxRunKind, BoxRunNews, BoxRunView};
use gputune_core::link::{Link, LinkCommand, LinkEvent};
use gputune_core::service::client::{SocketChoice, TuningOptions};
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
    // Every card trains: its link is said as reached under load.
    assert_eq!(harness.query_all_by_label_contains("under load").count(), 8);
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
        },
        _ => None,
    }
}

/// The window's "Rank the cards" on the simulated box, driven by the link thread as the window
/// drives it: a second run is refused while it runs, the finished ranking shows each card's
/// place and the box's sentences.
#[test]
fn a_ranking_the_link_runs_shows_each_cards_place_when_it_ends() {
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
    let mut harness = window_harness(window, [1280.0, 720.0]);
    harness.run();
    harness.get_by_label("Rank");
    harness.get_by_label_contains("Ranking at");
    for card in &report.cards {
        let place = gputune::ui::box_view::rank_rows::place(card);
        assert!(
            harness.query_all_by_label(&place.text).next().is_some(),
            "{} is shown",
            place.text
        );
    }
    // Cards the ranking left out say so; the buttons are back.
    assert_eq!(harness.query_all_by_label("—").count(), 2 * 7);
    harness.get_by_label("Rank the cards");
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
    assert_eq!(launch.kind, BoxRunKind::Rank { together_s: 120.0 });
    harness.state_mut().state.take_event(
        LinkEvent::BoxRun(Box::new(BoxRunNews::Rank(BoxRunView {
            running: true,
            progress: Some(BoxProgress {
                phase: "GPU 3 alone (4 of 8)".to_string(),
                phase_elapsed_s: 32.0,
                phase_s: 60.0,
                left_s: 410.0,
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
