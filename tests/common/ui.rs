//! Building the window's state from a simulated machine, the way the device-owner thread
//! feeds it, for UI tests and screenshots.

use egui_kittest::Harness;
use gputune::device::Backend;
use gputune::device::sim::{
    LoadPattern, ManualClock, SimBackend, SimClock, SimOptions, SimScenario,
};
use gputune::telemetry::sampler::{connected_event, samples_event};
use gputune::ui::app::{AppCommand, AppState, RememberedState};
use gputune::ui::model::Model;

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
    let clock = ManualClock::starting_at(START_MS);
    let mut backend =
        SimBackend::with_clock(&SimOptions { scenario, load }, Box::new(clock.clone()));
    let connected = connected_event(&mut backend, simulated_because.map(str::to_string))
        .unwrap_or_else(|error| panic!("{error}"));
    let gpu_count = backend.gpu_count().unwrap_or(0) as usize;
    let mut state = AppState::new(
        Model::with_history_capacity(TEST_HISTORY_SAMPLES),
        RememberedState {
            interval_ms,
            ..RememberedState::default()
        },
    );
    state.apply(connected, clock.now_ms());
    for _ in 0..samples {
        clock.advance_ms(interval_ms);
        state.apply(samples_event(&mut backend, gpu_count), clock.now_ms());
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
/// `duration_s`, with a minute of baseline: real numbers for UI tests and screenshots.
pub fn running_trial(seconds_in: u64, duration_s: u64) -> gputune::tuning::gui_trial::TrialStatus {
    use gputune::device::Setting;
    use gputune::tuning::control::Controller;
    let state = tempfile::tempdir().expect("a temporary state folder");
    // SAFETY: tests that call this do not read GPUTUNE_STATE_DIR concurrently.
    unsafe { std::env::set_var("GPUTUNE_STATE_DIR", state.path()) };
    let clock = ManualClock::starting_at(START_MS);
    let mut backend = SimBackend::with_clock(
        &SimOptions {
            scenario: SimScenario::Rtx4090,
            load: LoadPattern::Training,
        },
        Box::new(clock.clone()),
    );
    let mut controller = Controller::new(vec![backend.constraints(0).unwrap_or_default()]);
    let tick = |backend: &mut SimBackend, controller: &mut Controller| {
        clock.advance_ms(1_000);
        let samples = vec![backend.telemetry(0)];
        controller.observe_trial(backend, &samples)
    };
    for _ in 0..60 {
        tick(&mut backend, &mut controller);
    }
    let mut status = controller.start_trial(
        &mut backend,
        0,
        &[Setting::PowerLimit {
            power_limit_mw: 315_000,
        }],
        duration_s,
    );
    for _ in 0..seconds_in {
        if let Some(next) = tick(&mut backend, &mut controller) {
            status = next;
        }
    }
    controller.release(&mut backend);
    status
}
