//! The window's try mode, run by the device thread's controller on the simulator: baseline,
//! journal before anything is applied, countdown, revert on timeout, Keep, Revert, and revert
//! when gputune closes. One test function: the state folder is process-wide.

use gputune::device::sim::{LoadPattern, ManualClock, SimBackend, SimOptions, SimScenario};
use gputune::device::{Backend, Setting, Telemetry};
use gputune::tuning::control::Controller;
use gputune::tuning::gui_trial::TrialStatus;

struct Rig {
    backend: SimBackend,
    clock: ManualClock,
    controller: Controller,
}

impl Rig {
    fn new() -> Rig {
        let clock = ManualClock::starting_at(1_700_000_000_000);
        let mut backend = SimBackend::with_clock(
            &SimOptions {
                scenario: SimScenario::Rtx4090,
                load: LoadPattern::Training,
            },
            Box::new(clock.clone()),
        );
        let constraints = vec![backend.constraints(0).unwrap_or_default()];
        let mut rig = Rig {
            backend,
            clock,
            controller: Controller::new(constraints),
        };
        // A minute of baseline at one sample a second.
        for _ in 0..60 {
            rig.tick();
        }
        rig
    }

    fn tick(&mut self) -> Option<TrialStatus> {
        self.clock.advance_ms(1_000);
        let samples: Vec<Result<Telemetry, _>> = vec![self.backend.telemetry(0)];
        self.controller.observe_trial(&mut self.backend, &samples)
    }

    fn power_limit_mw(&mut self) -> Option<u32> {
        self.backend
            .current_settings(0)
            .ok()
            .and_then(|settings| settings.power_limit_mw)
    }
}

#[test]
fn try_mode_reverts_on_timeout_keeps_on_keep_and_reverts_on_revert_and_exit() {
    let state = tempfile::tempdir().expect("a temporary state folder");
    // SAFETY: the only test in this binary; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("GPUTUNE_STATE_DIR", state.path()) };
    let journal = state.path().join("journal.json");
    let seventy_percent = [Setting::PowerLimit {
        power_limit_mw: 315_000,
    }];

    // Timeout: the countdown runs out and the original limit comes back.
    let mut rig = Rig::new();
    let started = rig
        .controller
        .start_trial(&mut rig.backend, 0, &seventy_percent, 20);
    assert_eq!(started.remaining_s, Some(20), "{started:?}");
    assert!(
        journal.exists(),
        "the journal is written before anything is applied"
    );
    assert_eq!(rig.power_limit_mw(), Some(315_000));
    let mut last = None;
    for _ in 0..25 {
        if let Some(status) = rig.tick() {
            last = Some(status);
        }
    }
    let ended = last.unwrap_or_else(|| panic!("the trial reported"));
    assert_eq!(ended.remaining_s, None);
    assert!(
        ended
            .message
            .as_deref()
            .is_some_and(|message| message.starts_with("Time is up: reverted")),
        "{ended:?}"
    );
    assert_eq!(rig.power_limit_mw(), Some(450_000));
    assert!(!journal.exists());
    // The numbers show the cut: less power, a little less clock.
    let (before, during) = (ended.baseline, ended.during);
    assert!(
        before.samples >= 20 && during.samples >= 15,
        "{before:?} {during:?}"
    );
    let (power_before, power_during) = (
        before.average_power_w.unwrap_or(0.0),
        during.average_power_w.unwrap_or(f64::MAX),
    );
    assert!(
        power_during < power_before - 80.0,
        "{power_before} W → {power_during} W"
    );
    let (clock_before, clock_during) = (
        before.average_sm_clock_mhz.unwrap_or(0.0),
        during.average_sm_clock_mhz.unwrap_or(0.0),
    );
    assert!(
        clock_during < clock_before && clock_during > clock_before * 0.8,
        "{clock_before} → {clock_during} MHz"
    );

    // Keep: the setting stays, the journal goes.
    let mut rig = Rig::new();
    rig.controller
        .start_trial(&mut rig.backend, 0, &seventy_percent, 60);
    rig.tick();
    let kept = rig.controller.finish_trial(&mut rig.backend, true);
    assert!(
        kept.message
            .as_deref()
            .is_some_and(|message| message.starts_with("Kept")),
        "{kept:?}"
    );
    assert_eq!(rig.power_limit_mw(), Some(315_000));
    assert!(!journal.exists());

    // Revert: back at once.
    let mut rig = Rig::new();
    rig.controller
        .start_trial(&mut rig.backend, 0, &seventy_percent, 60);
    let reverted = rig.controller.finish_trial(&mut rig.backend, false);
    assert!(
        reverted
            .message
            .as_deref()
            .is_some_and(|message| message.starts_with("Reverted")),
        "{reverted:?}"
    );
    assert_eq!(rig.power_limit_mw(), Some(450_000));

    // Closing gputune during a trial reverts it.
    let mut rig = Rig::new();
    rig.controller.start_trial(
        &mut rig.backend,
        0,
        &[Setting::GpuClockOffset { offset_mhz: 150 }],
        60,
    );
    assert_eq!(
        rig.backend
            .current_settings(0)
            .ok()
            .and_then(|settings| settings.gpu_clock_offset_mhz),
        Some(150)
    );
    rig.controller.release(&mut rig.backend);
    assert_eq!(
        rig.backend
            .current_settings(0)
            .ok()
            .and_then(|settings| settings.gpu_clock_offset_mhz),
        Some(0)
    );
    assert!(!journal.exists());

    // A refused value never reaches the journal or the card.
    let mut rig = Rig::new();
    let refused = rig.controller.start_trial(
        &mut rig.backend,
        0,
        &[Setting::PowerLimit {
            power_limit_mw: 900_000,
        }],
        60,
    );
    assert!(
        refused
            .message
            .as_deref()
            .is_some_and(|message| message.starts_with("Nothing was changed.")),
        "{refused:?}"
    );
    assert!(!journal.exists());
    assert_eq!(rig.power_limit_mw(), Some(450_000));
}
