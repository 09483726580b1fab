//! What the stability check watches besides results: the Xid 13 a simulated card raises when
//! it runs busy past its silicon's hard limit (once on entering, not a flood), and the ECC
//! counters of the datacenter card; through the simulator's backend and through the real NVML
//! backend against the fake libnvidia-ml (the same simulated machine, the same margins).

use std::time::{Duration, Instant};

use common::FakeMachine;

use crate::common;
use gputune_core::clock::ManualClock;
use gputune_core::device::Backend;
use gputune_core::device::gate::validate;
use gputune_core::device::nvml::NvmlBackend;
use gputune_core::device::sim::{LoadPattern, SiliconMargin, SimBackend, SimOptions, SimScenario};
use gputune_formats::card::{CriticalEvent, EccCounts, Setting};

const START_MS: u64 = 1_700_000_000_000;

fn sim(scenario: SimScenario, load: LoadPattern) -> (SimBackend, ManualClock) {
    let clock = ManualClock::starting_at(START_MS);
    let backend = SimBackend::with_clock(&SimOptions { scenario, load }, Box::new(clock.clone()));
    (backend, clock)
}

fn apply(backend: &mut dyn Backend, setting: Setting) {
    let constraints = backend.constraints(0).unwrap_or_default();
    let validated =
        validate(&constraints, setting).unwrap_or_else(|error| panic!("{setting:?}: {error}"));
    assert_eq!(backend.apply(0, &validated), Ok(()));
}

/// A 2520 MHz lock and `offset_mhz`: how an undervolt is set.
fn undervolt(backend: &mut dyn Backend, offset_mhz: i32) {
    apply(
        backend,
        Setting::LockGpuClocks {
            min_mhz: 210,
            max_mhz: 2520,
        },
    );
    apply(backend, Setting::GpuClockOffset { offset_mhz });
}

/// The single RTX 4090's hard limit at 2520 MHz and 60 °C, the coolest it runs there: an
/// offset a bin past it faults whatever the card's temperature.
fn past_hard_limit_mhz() -> i32 {
    let machine =
        gputune_core::device::sim::SimMachine::new(SimScenario::Rtx4090, LoadPattern::Idle, 0);
    let gpu = &machine.gpus[0];
    let margin = SiliconMargin::for_card(&gpu.spec, &gpu.uuid);
    (margin.hard_limit_mhz(2520, 60.0) as i32 / 15 + 1) * 15
}

fn xid(backend: &mut dyn Backend, wait_ms: u32) -> Option<CriticalEvent> {
    backend
        .next_critical_event(wait_ms)
        .unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn a_busy_card_past_its_hard_limit_raises_one_xid_each_time_it_goes_there() {
    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Training);
    let mut watcher = backend.share();
    assert_eq!(watcher.watch_critical_events(), Ok(()));
    // Within the hard limit: ten minutes, no Xid.
    undervolt(&mut backend, 150);
    clock.advance_ms(600_000);
    assert_eq!(xid(&mut watcher, 10), None);
    // Past it: one Xid 13, and only one while the card stays there.
    apply(
        &mut backend,
        Setting::GpuClockOffset {
            offset_mhz: past_hard_limit_mhz(),
        },
    );
    clock.advance_ms(1_000);
    assert_eq!(
        xid(&mut watcher, 10),
        Some(CriticalEvent {
            gpu_index: 0,
            xid: 13
        })
    );
    clock.advance_ms(600_000);
    assert_eq!(xid(&mut watcher, 10), None, "no flood");
    // Back at stock, then past again: a new Xid.
    apply(&mut backend, Setting::GpuClockOffset { offset_mhz: 0 });
    clock.advance_ms(1_000);
    apply(
        &mut backend,
        Setting::GpuClockOffset {
            offset_mhz: past_hard_limit_mhz(),
        },
    );
    clock.advance_ms(1_000);
    assert!(xid(&mut watcher, 10).is_some());
    // A watcher that begins now has seen none of them.
    let mut late = backend.share();
    assert_eq!(late.watch_critical_events(), Ok(()));
    assert_eq!(xid(&mut late, 10), None);
}

#[test]
fn an_idle_card_past_its_hard_limit_raises_nothing() {
    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Idle);
    let mut watcher = backend.share();
    assert_eq!(watcher.watch_critical_events(), Ok(()));
    undervolt(&mut backend, past_hard_limit_mhz());
    clock.advance_ms(600_000);
    assert_eq!(xid(&mut watcher, 10), None);
    // What a test injects is reported like the card's own.
    assert_eq!(backend.inject_xid(0), Ok(()));
    assert_eq!(xid(&mut watcher, 10).map(|event| event.xid), Some(13));
}

#[test]
fn the_datacenter_card_counts_ecc_errors_and_the_rtx_4090_has_none() {
    let (mut h100, clock) = sim(SimScenario::DatacenterFanless, LoadPattern::Training);
    let read = |backend: &mut SimBackend| {
        backend
            .telemetry(0)
            .unwrap_or_else(|error| panic!("{error}"))
            .ecc
    };
    assert_eq!(read(&mut h100), Some(EccCounts::default()));
    clock.advance_ms(3_600_000);
    assert_eq!(read(&mut h100), Some(EccCounts::default()), "none at stock");
    assert_eq!(h100.inject_ecc_errors(0, 5, 1), Ok(()));
    assert_eq!(
        read(&mut h100),
        Some(EccCounts {
            corrected_volatile: 5,
            uncorrected_volatile: 1
        })
    );
    let (mut rtx, _) = sim(SimScenario::Rtx4090, LoadPattern::Training);
    assert_eq!(read(&mut rtx), None);
}

fn open(machine: &FakeMachine) -> NvmlBackend {
    NvmlBackend::open(Some(&machine.library))
        .unwrap_or_else(|error| panic!("the fake library opens: {error}"))
}

#[test]
fn ecc_counters_are_read_through_nvml() {
    let machine = FakeMachine::new("datacenter-fanless", "");
    let mut backend = open(&machine);
    let reading = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(reading.ecc, Some(EccCounts::default()));
    // The card's memory errs (as a test says it does): a new handle reads the counts.
    let mut state = machine.state();
    state.machine.gpus[0].inject_ecc_errors(7, 2);
    nvidia_ml_fake::save_state(machine.state_path(), &state)
        .unwrap_or_else(|error| panic!("{error}"));
    let mut fresh = open(&machine);
    let reading = fresh.telemetry(0).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        reading.ecc,
        Some(EccCounts {
            corrected_volatile: 7,
            uncorrected_volatile: 2
        })
    );
    drop((backend, fresh));
    drop(machine);
    let machine = FakeMachine::new("rtx4090", "");
    let mut rtx = open(&machine);
    let reading = rtx.telemetry(0).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(reading.ecc, None, "a GeForce card's ECC is off");
}

#[test]
fn an_xid_past_the_hard_limit_arrives_through_nvml_once() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    let mut watcher = open(&machine);
    assert_eq!(watcher.watch_critical_events(), Ok(()));
    assert_eq!(xid(&mut watcher, 300), None, "none at stock");
    undervolt(&mut backend, past_hard_limit_mhz());
    let waited = Instant::now();
    let event = loop {
        if let Some(event) = xid(&mut watcher, 500) {
            break event;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "no Xid past the hard limit"
        );
    };
    assert_eq!(
        event,
        CriticalEvent {
            gpu_index: 0,
            xid: 13
        }
    );
    assert_eq!(xid(&mut watcher, 500), None, "no flood");
    assert!(machine.state().machine.gpus[0].xid_count >= 1);
}

#[test]
fn the_fake_librarys_cards_get_the_simulated_device_with_the_simulators_margin() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let mut backend = open(&machine);
    for gpu in 0..8 {
        let identity = backend
            .identity(gpu)
            .unwrap_or_else(|error| panic!("{error}"));
        let device = gputune_core::stability::simulated::SimulatedDevice::for_gpu(&identity)
            .expect("a fake library's card is a simulated one");
        let card = &machine.state().machine.gpus[gpu as usize];
        assert_eq!(
            device.margin(),
            SiliconMargin::for_card(&card.spec, &card.uuid)
        );
    }
}
