//! The Tune tab as a user drives it: the power slider shows watts, Apply sends a validated-size
//! request, the undervolt preset sends a clock cap and an offset, fanless cards hide the curve.

mod common;

use common::ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gputune::device::Setting;
use gputune::device::sim::{LoadPattern, SimScenario};
use gputune::tuning::control::TuneCommand;
use gputune::ui::app::{AppCommand, Tab};

fn harness(scenario: SimScenario) -> Harness<'static, Window> {
    let mut state = app_state(scenario, LoadPattern::Training, None, 5, 500);
    state.tab = Tab::Tune;
    window_harness(state, [1300.0, 1000.0])
}

#[test]
fn the_power_slider_shows_watts_and_apply_sends_them() {
    let mut harness = harness(SimScenario::Rtx4090);
    harness.get_by_label("= 450 W");
    harness.state_mut().state.tune.power_limit_pct = 70.0;
    harness.run();
    harness.get_by_label("= 315 W");
    harness.get_by_label("Apply power limit").click();
    harness.run();
    let expected = AppCommand::Tune(TuneCommand::Apply {
        gpu_index: 0,
        settings: vec![Setting::PowerLimit {
            power_limit_mw: 315_000,
        }],
    });
    assert!(
        harness.state().commands.contains(&expected),
        "{:?}",
        harness.state().commands
    );
}

#[test]
fn the_undervolt_preset_caps_the_clock_and_adds_an_offset() {
    let mut harness = harness(SimScenario::Rtx4090);
    harness
        .get_by_label_contains("Undervolt-style: cap 2520 MHz")
        .click();
    harness.run();
    let expected = AppCommand::Tune(TuneCommand::Apply {
        gpu_index: 0,
        settings: vec![
            Setting::LockGpuClocks {
                min_mhz: 210,
                max_mhz: 2_520,
            },
            Setting::GpuClockOffset { offset_mhz: 150 },
        ],
    });
    assert!(
        harness.state().commands.contains(&expected),
        "{:?}",
        harness.state().commands
    );
}

#[test]
fn following_a_fan_curve_and_going_back_to_automatic() {
    let mut harness = harness(SimScenario::Rtx4090);
    harness.get_by_label("Follow this curve").click();
    harness.run();
    harness.get_by_label("Automatic").click();
    harness.run();
    let commands = &harness.state().commands;
    assert!(commands.iter().any(|command| matches!(
        command,
        AppCommand::Tune(TuneCommand::SetFanCurve { curve: Some(_), .. })
    )));
    assert!(
        commands.contains(&AppCommand::Tune(TuneCommand::SetFanCurve {
            gpu_index: 0,
            curve: None
        }))
    );
}

#[test]
fn a_fanless_card_has_no_fan_curve_and_no_offsets() {
    let harness = harness(SimScenario::DatacenterFanless);
    harness.get_by_label_contains("This GPU has no fans to control");
    harness.get_by_label_contains("Not supported on this GPU or driver");
    assert!(harness.query_by_label("Follow this curve").is_none());
}

#[test]
fn try_sends_a_trial_and_a_running_trial_shows_a_countdown_that_revert_ends() {
    let mut harness = harness(SimScenario::Rtx4090);
    harness.state_mut().state.tune.power_limit_pct = 70.0;
    harness.run();
    harness.get_by_label("Try power limit").click();
    harness.run();
    let expected = AppCommand::Tune(TuneCommand::StartTrial {
        gpu_index: 0,
        settings: vec![Setting::PowerLimit {
            power_limit_mw: 315_000,
        }],
        duration_s: 60,
    });
    assert!(
        harness.state().commands.contains(&expected),
        "{:?}",
        harness.state().commands
    );

    // The device thread reports the trial running: countdown, before/during numbers, Revert.
    harness.state_mut().state.model.gpus[0].trial = Some(common::ui::running_trial(18, 60));
    harness.run();
    harness.get_by_label("Trying power limit 315 W: reverts in 42 s");
    harness.get_by_label("Average power");
    harness.get_by_label("Revert").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Tune(TuneCommand::RevertTrial))
    );
}

#[test]
fn a_permission_refusal_offers_apply_as_administrator() {
    let mut harness = harness(SimScenario::Rtx4090);
    let refused = vec![Setting::PowerLimit {
        power_limit_mw: 315_000,
    }];
    harness.state_mut().state.model.gpus[0].needs_administrator = Some(refused.clone());
    harness.run();
    harness.get_by_label("Apply as administrator").click();
    harness.run();
    let expected = AppCommand::ApplyAsAdministrator {
        gpu_index: 0,
        settings: refused,
    };
    assert!(
        harness.state().commands.contains(&expected),
        "{:?}",
        harness.state().commands
    );
}

#[test]
fn every_change_can_be_tried() {
    let mut harness = harness(SimScenario::Rtx4090);
    harness.get_by_label("Try it").click();
    harness.run();
    let expected = AppCommand::Tune(TuneCommand::StartTrial {
        gpu_index: 0,
        settings: vec![
            Setting::LockGpuClocks {
                min_mhz: 210,
                max_mhz: 2_520,
            },
            Setting::GpuClockOffset { offset_mhz: 150 },
        ],
        duration_s: 60,
    });
    assert!(
        harness.state().commands.contains(&expected),
        "{:?}",
        harness.state().commands
    );
    // Clock locks and offsets have their own Try buttons too.
    assert_eq!(harness.query_all_by_label("Try").count(), 3);
}
