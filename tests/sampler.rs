//! The device-owner thread opens the backend itself, sends events, and wakes the UI for each;
//! it survives a lost GPU and a slow driver, and the UI never waits for it.

mod common;

use common::FakeMachine;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gputune::device::sim::{LoadPattern, SimOptions, SimScenario};
use gputune::device::{BackendChoice, BackendKind, BackendOptions, DeviceError};
use gputune::telemetry::sampler::{Event, Sampler};

/// Collects events until `done` says so; gives up (and fails) after a generous deadline, which
/// only matters if the thread is broken.
fn wait_for(sampler: &Sampler, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut events = Vec::new();
    while !done(&events) {
        assert!(
            Instant::now() < deadline,
            "no such events arrived: {events:?}"
        );
        events.extend(sampler.drain_events());
        std::thread::sleep(Duration::from_millis(10));
    }
    events
}

#[test]
fn sampler_connects_then_samples_every_gpu_and_wakes_the_ui() {
    let wakeups = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&wakeups);
    let options = BackendOptions {
        choice: BackendChoice::Sim,
        sim: SimOptions {
            scenario: SimScenario::EightRtx4090,
            load: LoadPattern::Training,
        },
        ..BackendOptions::default()
    };
    let sampler = Sampler::spawn(options, 100, move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap_or_else(|error| panic!("{error}"));
    let events = wait_for(&sampler, |events| {
        events
            .iter()
            .filter(|event| matches!(event, Event::Samples(_)))
            .count()
            >= 2
    });
    match &events[0] {
        Event::Connected {
            backend,
            gpus,
            simulated_because,
        } => {
            assert_eq!(*backend, BackendKind::Sim);
            assert_eq!(gpus.len(), 8);
            assert_eq!(simulated_because, &None);
        }
        other => panic!("the first event is Connected, not {other:?}"),
    }
    for event in &events[1..] {
        let Event::Samples(samples) = event else {
            panic!("{event:?}")
        };
        assert_eq!(samples.len(), 8);
        assert!(samples.iter().all(Result::is_ok));
    }
    assert!(
        wakeups.load(Ordering::SeqCst) >= events.len(),
        "one repaint request per event"
    );
    drop(sampler); // joins the thread: it must notice the closed channel and stop
}

#[test]
fn sampler_reports_a_backend_that_cannot_open() {
    let options = BackendOptions {
        choice: BackendChoice::Nvml,
        nvml_library_path: Some("/nonexistent/libnvidia-ml.so.1".into()),
        ..BackendOptions::default()
    };
    let sampler = Sampler::spawn(options, 100, || {}).unwrap_or_else(|error| panic!("{error}"));
    let events = wait_for(&sampler, |events| !events.is_empty());
    assert!(
        matches!(
            events[0],
            Event::Failed(DeviceError::LibraryNotLoaded { .. })
        ),
        "{events:?}"
    );
}

fn nvml_options(machine: &FakeMachine) -> BackendOptions {
    BackendOptions {
        choice: BackendChoice::Nvml,
        nvml_library_path: Some(machine.library.clone()),
        ..BackendOptions::default()
    }
}

#[test]
fn sampler_survives_a_lost_gpu_and_keeps_reporting() {
    let machine = FakeMachine::new("8x-rtx4090", "gpu_lost_after=400");
    let sampler = Sampler::spawn(nvml_options(&machine), 100, || {})
        .unwrap_or_else(|error| panic!("{error}"));
    // Keep collecting until the loss has been reported a few times: the thread goes on sampling.
    let events = wait_for(&sampler, |events| {
        events
            .iter()
            .filter(|event| match event {
                Event::Samples(samples) => samples
                    .iter()
                    .any(|sample| matches!(sample, Err(DeviceError::GpuLost { .. }))),
                _ => false,
            })
            .count()
            >= 3
    });
    assert!(matches!(events[0], Event::Connected { .. }));
    let healthy = events
        .iter()
        .filter(
            |event| matches!(event, Event::Samples(samples) if samples.iter().all(Result::is_ok)),
        )
        .count();
    assert!(healthy >= 1, "it sampled normally before the loss");
}
