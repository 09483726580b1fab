//! The window's link to the tuning service opens the engine itself (here, in this process),
//! sends events, and wakes the UI for each; it survives a lost GPU, and reports a backend that
//! cannot open.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::FakeMachine;

use crate::common;
use gputune_core::cli::connect::TuningOptions;
use gputune_core::device::sim::{LoadPattern, SimOptions, SimScenario};
use gputune_core::device::{BackendChoice, BackendOptions};
use gputune_core::folders::Folders;
use gputune_core::link::{Link, LinkEvent};
use gputune_core::service::client::SocketChoice;
use gputune_formats::card::{BackendKind, DeviceError};

/// Collects events until `done` says so; gives up (and fails) after a generous deadline, which
/// only matters if the thread is broken.
fn wait_for(link: &Link, done: impl Fn(&[LinkEvent]) -> bool) -> Vec<LinkEvent> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut events = Vec::new();
    while !done(&events) {
        assert!(
            Instant::now() < deadline,
            "no such events arrived: {events:?}"
        );
        events.extend(link.drain_events());
        std::thread::sleep(Duration::from_millis(10));
    }
    events
}

/// The engine in this process, its state in `state`.
fn in_process(backend: BackendOptions, state: &tempfile::TempDir) -> TuningOptions {
    TuningOptions {
        backend,
        socket: SocketChoice::None,
        folders: Folders::inside(state.path()),
    }
}

fn samples(
    events: &[LinkEvent],
) -> Vec<&Vec<Result<gputune_formats::card::Telemetry, DeviceError>>> {
    events
        .iter()
        .filter_map(|event| match event {
            LinkEvent::Samples(samples) => Some(samples),
            _ => None,
        })
        .collect()
}

#[test]
fn the_link_connects_then_samples_every_gpu_and_wakes_the_ui() {
    let state = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let wakeups = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&wakeups);
    let options = in_process(
        BackendOptions {
            choice: BackendChoice::Sim,
            sim: SimOptions {
                scenario: SimScenario::EightRtx4090,
                load: LoadPattern::Training,
            },
            ..BackendOptions::default()
        },
        &state,
    );
    let link = Link::spawn(options, 100, move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap_or_else(|error| panic!("{error}"));
    let events = wait_for(&link, |events| samples(events).len() >= 2);
    match &events[0] {
        LinkEvent::Connected {
            backend,
            gpus,
            simulated_because,
            daemon,
            ..
        } => {
            assert_eq!(*backend, BackendKind::Sim);
            assert_eq!(gpus.len(), 8);
            assert_eq!(simulated_because, &None);
            assert!(!daemon, "no daemon: the engine runs in this process");
        }
        other => panic!("the first event is Connected, not {other:?}"),
    }
    let tunings = events
        .iter()
        .filter(|event| matches!(event, LinkEvent::Tuning(_)))
        .count();
    assert_eq!(
        tunings, 8,
        "what each card runs arrives before the readings"
    );
    for readings in samples(&events) {
        assert_eq!(readings.len(), 8);
        assert!(readings.iter().all(Result::is_ok));
    }
    assert!(
        wakeups.load(Ordering::SeqCst) >= events.len(),
        "one repaint request per event"
    );
    drop(link); // the thread must notice the closed channel and stop
}

#[test]
fn the_link_reports_a_backend_that_cannot_open() {
    let state = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let options = in_process(
        BackendOptions {
            choice: BackendChoice::Nvml,
            nvml_library_path: Some("/nonexistent/libnvidia-ml.so.1".into()),
            ..BackendOptions::default()
        },
        &state,
    );
    let link = Link::spawn(options, 100, || {}).unwrap_or_else(|error| panic!("{error}"));
    let events = wait_for(&link, |events| !events.is_empty());
    match &events[0] {
        LinkEvent::Failed(message) => {
            assert!(message.contains("could not be loaded"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_link_survives_a_lost_gpu_and_keeps_reporting() {
    let machine = FakeMachine::new("8x-rtx4090", "gpu_lost_after=700");
    let options = common::daemon::window_options(&machine, SocketChoice::None);
    let link = Link::spawn(options, 100, || {}).unwrap_or_else(|error| panic!("{error}"));
    // Keep collecting until the loss has been reported a few times: the service goes on.
    let events = wait_for(&link, |events| {
        samples(events)
            .iter()
            .filter(|readings| {
                readings
                    .iter()
                    .any(|reading| matches!(reading, Err(DeviceError::GpuLost { .. })))
            })
            .count()
            >= 3
    });
    assert!(
        matches!(events[0], LinkEvent::Connected { .. }),
        "{:?}",
        events[0]
    );
    let healthy = samples(&events)
        .iter()
        .filter(|readings| readings.iter().all(Result::is_ok))
        .count();
    assert!(healthy >= 1, "it sampled normally before the loss");
}
