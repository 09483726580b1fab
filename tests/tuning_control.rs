//! The device thread's tuning: settings pass the gate all-or-nothing, fan curves drive the
//! fans, and the fans go back to the driver when gputune stops. On the simulator, and on the
//! fake libnvidia-ml where the write log shows every write.

mod common;

use common::FakeMachine;
use gputune::device::nvml::NvmlBackend;
use gputune::device::sim::{LoadPattern, ManualClock, SimBackend, SimOptions, SimScenario};
use gputune::device::{Backend, Setting};
use gputune::tuning::control::Controller;
use gputune::tuning::fan_curve::{CurvePoint, FanCurve};

fn sim(scenario: SimScenario) -> (SimBackend, ManualClock, Controller) {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let mut backend = SimBackend::with_clock(
        &SimOptions {
            scenario,
            load: LoadPattern::Training,
        },
        Box::new(clock.clone()),
    );
    let constraints = (0..backend.gpu_count().unwrap_or(0))
        .filter_map(|index| backend.constraints(index).ok())
        .collect();
    (backend, clock, Controller::new(constraints))
}

#[test]
fn a_refused_value_writes_nothing_and_says_why() {
    let (mut backend, _clock, mut controller) = sim(SimScenario::Rtx4090);
    let outcome = controller.apply(
        &mut backend,
        0,
        &[
            Setting::PowerLimit {
                power_limit_mw: 300_000,
            },
            Setting::PowerLimit {
                power_limit_mw: 900_000,
            },
        ],
    );
    assert!(outcome.applied.is_empty());
    assert_eq!(
        backend
            .current_settings(0)
            .ok()
            .and_then(|settings| settings.power_limit_mw),
        Some(450_000)
    );
    assert!(
        outcome
            .summary()
            .starts_with("Nothing was changed. A power limit of 900 W is outside"),
        "{}",
        outcome.summary()
    );
}

#[test]
fn a_70_percent_limit_lowers_power_and_temperature_for_a_small_clock_loss() {
    let (mut backend, clock, mut controller) = sim(SimScenario::Rtx4090);
    clock.advance_ms(30 * 60 * 1000);
    let before = backend.telemetry(0).unwrap_or_default();
    let outcome = controller.apply(
        &mut backend,
        0,
        &[Setting::PowerLimit {
            power_limit_mw: 315_000,
        }],
    );
    assert_eq!(
        outcome.enforced_power_limit_mw,
        Some(315_000),
        "{}",
        outcome.summary()
    );
    clock.advance_ms(30 * 60 * 1000);
    let after = backend.telemetry(0).unwrap_or_default();
    assert!(after.power_draw_mw < before.power_draw_mw);
    assert!(after.temperature_c < before.temperature_c);
    let (clock_before, clock_after) = (
        before.sm_clock_mhz.unwrap_or(0),
        after.sm_clock_mhz.unwrap_or(0),
    );
    assert!(
        clock_after < clock_before && clock_after * 100 > clock_before * 80,
        "{clock_before} → {clock_after} MHz"
    );
}

#[test]
fn a_fan_curve_drives_the_fans_and_hands_them_back() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let constraints = backend.constraints(0).unwrap_or_default();
    let mut controller = Controller::new(vec![constraints]);
    let curve = FanCurve::new(
        vec![
            CurvePoint {
                temperature_c: 20.0,
                speed_pct: 10.0,
            },
            CurvePoint {
                temperature_c: 100.0,
                speed_pct: 90.0,
            },
        ],
        2.0,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        controller.set_fan_curve(&mut backend, 0, Some(curve)),
        Ok(())
    );
    let sample = backend.telemetry(0);
    let temperature = sample
        .as_ref()
        .ok()
        .and_then(|reading| reading.temperature_c)
        .unwrap_or(0);
    assert!(controller.drive_fans(&mut backend, &[sample]).is_empty());
    let expected = (f64::from(temperature) - 10.0).round() as u32;
    let manual = machine.state().machine.gpus[0]
        .settings
        .fan_manual_pct
        .clone();
    assert_eq!(
        manual,
        vec![Some(expected.max(30)), Some(expected.max(30))],
        "at {temperature} °C"
    );

    controller.release(&mut backend);
    let state = machine.state();
    assert_eq!(
        state.machine.gpus[0].settings.fan_manual_pct,
        vec![None, None],
        "back to automatic on exit"
    );
    // Every fan write stayed inside the card's 30-100 %.
    for record in &state.write_log {
        if let Setting::FanSpeed { speed_pct, .. } = record.setting {
            assert!((30..=100).contains(&speed_pct), "{record:?}");
        }
    }
}

#[test]
fn a_fanless_card_refuses_a_fan_curve() {
    let (mut backend, _clock, mut controller) = sim(SimScenario::DatacenterFanless);
    let result = controller.set_fan_curve(&mut backend, 0, Some(FanCurve::default()));
    assert_eq!(result, Err("This GPU has no fans to control.".to_string()));
}

/// What "Apply as administrator" runs (after pkexec) is accepted by `gputune apply` and writes
/// exactly the refused settings.
#[test]
fn the_administrator_command_line_applies_the_same_settings() {
    let machine = FakeMachine::new("rtx4090", "");
    // The fake card comes to life with the first NVML call.
    assert!(machine.gputune(&["status"]).status.success());
    let uuid = machine.state().machine.gpus[0].uuid.clone();
    let settings = [
        Setting::PowerLimit {
            power_limit_mw: 315_000,
        },
        Setting::LockGpuClocks {
            min_mhz: 210,
            max_mhz: 2_520,
        },
        Setting::GpuClockOffset { offset_mhz: 150 },
    ];
    let arguments = gputune::tuning::elevate::apply_arguments(&uuid, &settings);
    let state_dir = tempfile::tempdir().expect("a state folder");
    let state_dir_text = state_dir.path().display().to_string();
    let mut with_state: Vec<&str> = arguments.iter().map(String::as_str).collect();
    with_state.extend(["--backend", "nvml"]);
    let output = machine
        .command(&with_state)
        .env("GPUTUNE_STATE_DIR", &state_dir_text)
        .output()
        .expect("gputune runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let logged: Vec<Setting> = machine
        .state()
        .write_log
        .iter()
        .map(|record| record.setting)
        .collect();
    assert_eq!(logged, settings);
}
