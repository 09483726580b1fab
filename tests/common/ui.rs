//! Building the window's state from a simulated machine, the way the device-owner thread
//! feeds it, for UI tests and screenshots. Included as `common_ui` (beside `common`) by the tests
//! that open the window only.

#![allow(dead_code)]

use egui_kittest::Harness;
use gputune::ui::app::{AppCommand, AppState};
use gputune::ui::model::WindowModel;
use gputune_core::clock::{Clock, ManualClock};
use gputune_core::device::Backend;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_core::link::LinkEvent;
use gputune_core::tuning::in_force::ControlsInForce;
use gputune_formats::card::{BackendKind, DeviceError};
use gputune_formats::tuning::SettingsInForce;
use gputune_formats::tuning::TrialStats;
use gputune_formats::tuning::{GpuInfo, GpuTuning, TrialPhase, TrialStatus};
use gputune_formats::window::RememberedWindow;

/// The `Connected` event the link sends for a simulated machine: its GPUs' identities and limits.
pub fn connected_event(
    backend: &mut SimBackend,
    simulated_because: Option<String>,
) -> Result<LinkEvent, DeviceError> {
    let gpus = (0..backend.gpu_count()?)
        .map(|index| {
            Ok(GpuInfo {
                identity: backend.identity(index)?,
                constraints: backend.constraints(index)?,
            })
        })
        .collect::<Result<Vec<_>, DeviceError>>()?;
    Ok(LinkEvent::Connected {
        backend: BackendKind::Sim,
        simulated_because,
        gpus,
        daemon: false,
        notices: Vec::new(),
    })
}

/// One `Samples` event: a reading (or its error) from each of the first `gpu_count` GPUs,
/// with its processes, as the sampler sends it.
pub fn samples_event(backend: &mut SimBackend, gpu_count: usize) -> LinkEvent {
    LinkEvent::Samples(
        (0..gpu_count as u32)
            .map(|index| {
                let mut reading = backend.telemetry(index)?;
                reading.processes = backend.processes(index)?;
                Ok(reading)
            })
            .collect(),
    )
}

/// The `Tuning` event for GPU `index` of a simulated machine: what it runs as the engine reads it.
pub fn tuning_event(backend: &mut SimBackend, index: u32) -> LinkEvent {
    let current = backend
        .current_settings(index)
        .unwrap_or_else(|error| panic!("{error}"));
    let uuid = backend
        .identity(index)
        .map(|identity| identity.uuid)
        .unwrap_or_default();
    LinkEvent::Tuning(Box::new(GpuTuning {
        gpu_index: index,
        gpu_uuid: uuid,
        in_force: SettingsInForce::from_card(&current, Default::default()),
        fan_curve: None,
        fan_safety_engaged: false,
        holders: Vec::new(),
        last_change: None,
        last_critical: None,
        temperature_hold: None,
    }))
}

pub const START_MS: u64 = 1_700_000_000_000;
/// History kept per GPU in tests: an hour at 10 Hz is plenty and allocates little.
pub const TEST_HISTORY_SAMPLES: usize = 36_000;

/// An app state that has received `samples` samples, `interval_ms` apart, from a simulated
/// machine running `load`.
pub fn app_state(
    scenario: SimScenario,
    load: LoadPattern,
    simulated_because: Option<&str>,
    samples: usize,
    interval_ms: u64,
) -> AppState {
    app_state_with_history(
        scenario,
        load,
        simulated_because,
        samples,
        interval_ms,
        TEST_HISTORY_SAMPLES,
    )
}

/// [`app_state`] keeping up to `history_samples` samples per GPU.
pub fn app_state_with_history(
    scenario: SimScenario,
    load: LoadPattern,
    simulated_because: Option<&str>,
    samples: usize,
    interval_ms: u64,
    history_samples: usize,
) -> AppState {
    let clock = ManualClock::starting_at(START_MS);
    let mut backend =
        SimBackend::with_clock(&SimOptions { scenario, load }, Box::new(clock.clone()));
    let connected = connected_event(&mut backend, simulated_because.map(str::to_string))
        .unwrap_or_else(|error| panic!("{error}"));
    let gpu_count = backend.gpu_count().unwrap_or(0) as usize;
    let mut state = AppState::new(
        WindowModel::with_history_capacity(history_samples),
        RememberedWindow {
            interval_ms,
            ..RememberedWindow::default()
        },
    );
    state.take_event(connected, clock.now_ms());
    for index in 0..gpu_count as u32 {
        state.take_event(tuning_event(&mut backend, index), clock.now_ms());
    }
    for _ in 0..samples {
        clock.advance_ms(interval_ms);
        state.take_event(samples_event(&mut backend, gpu_count), clock.now_ms());
    }
    state
}

/// The app state under test and every command its frames returned.
pub struct Window {
    pub state: AppState,
    pub commands: Vec<AppCommand>,
}

/// A kittest harness that draws the whole window content, as the app does, and collects the
/// commands it returns.
pub fn window_harness(state: AppState, size: [f32; 2]) -> Harness<'static, Window> {
    Harness::builder().with_size(size).build_ui_state(
        |ui, window: &mut Window| {
            let commands = window.state.ui(ui);
            window.commands.extend(commands);
        },
        Window {
            state,
            commands: Vec::new(),
        },
    )
}

/// A trial of a 70 % power limit on a simulated RTX 4090, `seconds_in` seconds into its
/// `duration_s`, with 30 s of baseline: real numbers for UI tests and screenshots.
pub fn running_trial(seconds_in: u64, duration_s: u64) -> TrialStatus {
    use gputune_core::device::gate::validate;
    use gputune_formats::card::Setting;
    let clock = ManualClock::starting_at(START_MS);
    let mut backend = SimBackend::with_clock(
        &SimOptions {
            scenario: SimScenario::Rtx4090,
            load: LoadPattern::Training,
        },
        Box::new(clock.clone()),
    );
    let read = |backend: &mut SimBackend, seconds: u64| {
        (0..seconds)
            .map(|_| {
                clock.advance_ms(1_000);
                backend
                    .telemetry(0)
                    .unwrap_or_else(|error| panic!("{error}"))
            })
            .collect::<Vec<_>>()
    };
    let baseline = read(&mut backend, 30);
    let trial = Setting::PowerLimit {
        power_limit_mw: 315_000,
    };
    let constraints = backend.constraints(0).unwrap_or_default();
    let validated = validate(&constraints, trial).unwrap_or_else(|error| panic!("{error}"));
    backend
        .apply(0, &validated)
        .unwrap_or_else(|error| panic!("{error}"));
    let during = read(&mut backend, seconds_in);
    TrialStatus {
        gpu_index: 0,
        session: 1,
        what: trial.describe(),
        phase: TrialPhase::Running {
            left_s: duration_s.saturating_sub(seconds_in),
        },
        baseline: TrialStats::from_samples(&baseline),
        during: TrialStats::from_samples(&during),
        baseline_warning: None,
        message: None,
        failed: false,
    }
}

/// An empty window state keeping `history_samples` per GPU, for tests that open the window on
/// a daemon (its link: `Daemon::open_link`).
pub fn empty_state(history_samples: usize) -> AppState {
    AppState::new(
        WindowModel::with_history_capacity(history_samples),
        RememberedWindow::default(),
    )
}
