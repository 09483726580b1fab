//! The Tune tab as a user drives it: it shows what the card runs (and follows a change made by
//! another process), the power slider shows watts, Apply sends a validated-size request, the
//! undervolt preset sends a clock cap and an offset, fanless cards hide the curve.

use common_ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};

use crate::common_ui;
use gputune::ui::app::AppCommand;
use gputune_core::device::sim::{LoadPattern, SimScenario};
use gputune_core::link::{LinkEvent, TuneCommand};
use gputune_formats::card::{PstateOffset, Setting};
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::tuning::ClockLockInForce;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{GpuTuning, Holder, SessionPurpose, TrialPhase, TrialStatus};
use gputune_formats::window::Tab;

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

/// What the card runs, as the engine would report it after `change`.
fn tuning_after(
    harness: &Harness<'static, Window>,
    change: impl FnOnce(&mut GpuTuning),
) -> LinkEvent {
    let mut tuning = harness.state().state.model.gpus[0]
        .tuning
        .clone()
        .unwrap_or_else(|| panic!("the engine said what the card runs"));
    change(&mut tuning);
    LinkEvent::Tuning(Box::new(tuning))
}

#[test]
fn following_a_fan_curve_and_stopping() {
    let mut harness = harness(SimScenario::Rtx4090);
    assert!(harness.query_by_label("Stop following").is_none());
    harness.get_by_label("Follow this curve").click();
    harness.run();
    assert!(harness.state().commands.iter().any(|command| matches!(
        command,
        AppCommand::Tune(TuneCommand::SetFanCurve { curve: Some(_), .. })
    )));
    // No daemon: the window's own engine follows the curve, and says for how long.
    harness
        .get_by_label_contains("Followed while this window is open (no gputune daemon keeps it)");
    let following = tuning_after(&harness, |tuning| {
        tuning.fan_curve = Some(FanCurve::default());
        tuning.holders = vec![fans_holder(SessionPurpose::FanCurve, "the gputune window")];
    });
    harness.state_mut().state.take_event(following, 0);
    harness.run();
    harness.get_by_label(
        "The fan curve is followed while this window is open: no gputune daemon keeps it.",
    );
    harness.get_by_label("Stop following").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Tune(TuneCommand::SetFanCurve {
                gpu_index: 0,
                curve: None
            }))
    );
}

#[test]
fn the_tab_shows_what_the_card_runs_and_follows_a_change_made_elsewhere() {
    let mut harness = harness(SimScenario::Rtx4090);
    harness.get_by_label_contains("power limit 450 W (100 % of default)");
    // `gputune apply` in another terminal: 315 W, a GPU lock and +150 MHz.
    let tuned = tuning_after(&harness, |tuning| {
        tuning.in_force.power_limit_mw = Some(315_000);
        tuning.in_force.gpu_clock_lock = ClockLockInForce::Locked {
            min_mhz: 210,
            max_mhz: 2520,
        };
        tuning.in_force.gpu_clock_offset_mhz = Some(150);
        tuning.in_force.gpu_clock_offsets = [(0, 150), (2, 150), (8, 0)]
            .into_iter()
            .map(|(pstate, offset_mhz)| PstateOffset { pstate, offset_mhz })
            .collect();
    });
    harness.state_mut().state.take_event(tuned, 0);
    harness.run();
    harness.get_by_label_contains("power limit 315 W (70 % of default)");
    harness.get_by_label_contains("GPU clocks 210-2520 MHz");
    // The P-states the offset covers: P2 is where training runs.
    harness.get_by_label_contains("GPU offset +150 MHz (P0, P2)");
    harness.get_by_label("= 315 W");
    assert_eq!(harness.state().state.tune.gpu_clock_offset_mhz, 150);
    assert_eq!(harness.state().state.tune.gpu_clock_lock_mhz, (210, 2520));

    // The user edits the memory offset; meanwhile someone else lowers the power limit. The
    // power input follows the card, the edit in progress stays.
    harness.state_mut().state.tune.memory_clock_offset_mhz = 500;
    let lowered = tuning_after(&harness, |tuning| {
        tuning.in_force.power_limit_mw = Some(300_000);
    });
    harness.state_mut().state.take_event(lowered, 0);
    harness.run();
    harness.get_by_label("= 300 W");
    assert_eq!(harness.state().state.tune.memory_clock_offset_mhz, 500);
    // Apply sends what is shown: the card's own power limit, not a stale 100 %.
    harness.get_by_label("Apply power limit").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Tune(TuneCommand::Apply {
                gpu_index: 0,
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 300_000
                }],
            }))
    );
}

#[test]
fn a_card_held_by_another_client_says_by_whom_and_until_when() {
    let mut harness = harness(SimScenario::Rtx4090);
    let held = tuning_after(&harness, |tuning| {
        tuning.holders = vec![Holder {
            session: 7,
            controls: vec![gputune_formats::tuning::Hold::PowerLimit],
            purpose: SessionPurpose::Trial,
            by: "gputune apply --try 60 (pid 4242, user alice)".to_string(),
            client: 3,
            since_ms: 0,
            trial_ends_at_ms: Some(1_700_000_060_000),
            job_pid: None,
            energy_at_start_mj: None,
            job: None,
        }];
    });
    harness.state_mut().state.take_event(held, 0);
    harness.run();
    harness.get_by_label_contains(
        "The power limit is held by a trial of gputune apply --try 60 (pid 4242, user alice) until",
    );
}

#[test]
fn a_fanless_card_has_no_fan_curve_and_no_offsets() {
    let harness = harness(SimScenario::DatacenterFanless);
    harness.get_by_label_contains("This GPU has no fans to control");
    harness.get_by_label_contains("Not supported on this GPU or driver");
    assert!(harness.query_by_label("Follow this curve").is_none());
}

/// An H200 with driver 580 says it supports offsets, with a range of 0 to 0 MHz: that is not
/// adjustable, so no slider with an empty range is shown.
#[test]
fn an_offset_range_of_zero_to_zero_reads_as_not_supported() {
    let mut harness = harness(SimScenario::Rtx4090);
    let shown = |harness: &Harness<'static, Window>, label: &str| {
        harness.query_all_by_label(label).next().is_some()
    };
    assert!(shown(&harness, "GPU offset"), "the RTX 4090 has the slider");
    let empty = Some(gputune_formats::card::OffsetRangeMhz {
        min_mhz: 0,
        max_mhz: 0,
    });
    let constraints = &mut harness.state_mut().state.model.gpus[0].info.constraints;
    constraints.gpu_clock_offset_range = empty;
    constraints.memory_clock_offset_range = empty;
    harness.run();
    harness.get_by_label_contains("Not supported on this GPU or driver");
    for label in ["GPU offset", "memory offset", "Apply offsets"] {
        assert!(!shown(&harness, label), "{label}");
    }
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

    // The engine reports the trial running: countdown, before/during numbers, Revert.
    harness.state_mut().state.model.gpus[0].trial = Some(common_ui::running_trial(18, 60));
    harness.run();
    harness.get_by_label("Trying power limit 315 W: reverts in 42 s");
    // The same rows as `gputune apply --try`, with the change in %.
    harness.get_by_label("Power, average");
    harness.get_by_label("Fan speed, average");
    harness.get_by_label("Temperature, peak");
    harness.get_by_label("Revert").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Tune(TuneCommand::RevertTrial { gpu_index: 0 }))
    );
}

#[test]
fn a_permission_refusal_says_how_to_get_the_daemon() {
    let mut harness = harness(SimScenario::Rtx4090);
    let refusal = gputune_formats::card::DeviceError::NoPermission {
        action: "power limit 315 W".to_string(),
    };
    harness.state_mut().state.model.gpus[0].tune_message = Some(Notice::Error(refusal.to_string()));
    harness.run();
    harness.get_by_label(&refusal.to_string());
    assert!(refusal.to_string().contains("sudo gputune daemon install"));
    assert!(
        refusal
            .to_string()
            .contains("sudo apt install ./gputune_*.deb")
    );
    harness.get_by_label_contains("No gputune daemon runs");
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
    // The power limit, clock locks and offsets have their own Try buttons too.
    for label in [
        "Try power limit",
        "Try GPU clock lock",
        "Try memory clock lock",
        "Try offsets",
    ] {
        harness.get_by_label(label);
    }
}

#[test]
fn all_gpus_applies_and_tries_the_same_share_of_each_cards_default_as_one_request() {
    let mut harness = harness(SimScenario::EightRtx4090);
    // The picker offers "All 8 GPUs".
    let pickers: Vec<_> = harness.query_all_by_label("GPU").collect();
    let Some(picker) = pickers.last() else {
        panic!("an eight-GPU box has a GPU picker in the Tune tab")
    };
    picker.click();
    harness.run();
    harness.get_by_label("All 8 GPUs").click();
    harness.run();
    assert!(harness.state().state.tune_all);
    harness.get_by_label_contains("each card gets the same percentage of its own default");
    harness.get_by_label_contains("Fan curves are set card by card");
    harness.state_mut().state.tune.power_limit_pct = 70.0;
    harness.run();
    let every_gpu = |watts: u32| -> Vec<(u32, Vec<Setting>)> {
        (0..8)
            .map(|gpu| {
                (
                    gpu,
                    vec![Setting::PowerLimit {
                        power_limit_mw: watts * 1000,
                    }],
                )
            })
            .collect()
    };
    harness.get_by_label("Apply power limit").click();
    harness.run();
    harness.get_by_label("Try power limit").click();
    harness.run();
    let commands = &harness.state().commands;
    assert!(
        commands.contains(&AppCommand::Tune(TuneCommand::ApplyAll {
            changes: every_gpu(315)
        })),
        "{commands:?}"
    );
    assert!(
        commands.contains(&AppCommand::Tune(TuneCommand::StartTrialAll {
            changes: every_gpu(315),
            duration_s: 60,
        })),
        "{commands:?}"
    );
    // The engine reports the trial on every card: one line each, one Revert for all.
    for gpu in 0..8 {
        let mut trial = common_ui::running_trial(18, 60);
        trial.gpu_index = gpu;
        harness.state_mut().state.model.gpus[gpu as usize].trial = Some(trial);
    }
    harness.run();
    harness.get_by_label("Every GPU: trying power limit 315 W: reverts in 42 s");
    // A card at another point gets its own line.
    if let Some(trial) = &mut harness.state_mut().state.model.gpus[7].trial {
        trial.phase = gputune_formats::tuning::TrialPhase::Running { left_s: 30 };
    }
    harness.run();
    harness.get_by_label("GPU 7: trying power limit 315 W: reverts in 30 s");
    harness.get_by_label("GPU 0: trying power limit 315 W: reverts in 42 s");
    harness.get_by_label("Revert every GPU").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Tune(TuneCommand::RevertTrial { gpu_index: 0 }))
    );
    // Ended: one line each, closed together.
    for gpu in 0..8usize {
        if let Some(trial) = &mut harness.state_mut().state.model.gpus[gpu].trial {
            trial.phase = gputune_formats::tuning::TrialPhase::Ended;
            trial.message = Some("Reverted: put back power limit 450 W.".to_string());
        }
    }
    harness.run();
    harness.get_by_label("Every GPU: Reverted: put back power limit 450 W.");
    harness.get_by_label("Close").click();
    harness.run();
    assert!(
        harness
            .query_by_label_contains("Reverted: put back")
            .is_none()
    );
    // The sweep is per card: its view offers no "All GPUs".
    harness.state_mut().state.tune_view = gputune::ui::app::TuneView::Sweep;
    harness.run();
    assert!(harness.query_by_label("All 8 GPUs").is_none());
}

#[test]
fn the_last_message_gives_way_once_the_card_changes_again() {
    use gputune_formats::tuning::ChangeNote;
    let mut harness = harness(SimScenario::Rtx4090);
    let at_ms = 1_700_000_100_000;
    // This window's apply: the engine notes the change, then the answer comes.
    let ours = tuning_after(&harness, |tuning| {
        tuning.in_force.power_limit_mw = Some(315_000);
        tuning.last_change = Some(ChangeNote {
            at_ms: at_ms - 50,
            by: "this window".to_string(),
            what: "power limit 315 W".to_string(),
        });
    });
    harness.state_mut().state.take_event(ours, at_ms - 40);
    harness.state_mut().state.take_event(
        LinkEvent::Notice {
            gpu_index: Some(0),
            notice: Notice::Info("Applied power limit 315 W.".to_string()),
        },
        at_ms,
    );
    // The engine's next report of the same change keeps it.
    let again = tuning_after(&harness, |_| {});
    harness.state_mut().state.take_event(again, at_ms + 1_000);
    harness.run();
    harness.get_by_label("Applied power limit 315 W.");
    // Another program sets 400 W a minute later: the message gives way to what the card runs.
    let theirs = tuning_after(&harness, |tuning| {
        tuning.in_force.power_limit_mw = Some(400_000);
        tuning.last_change = Some(ChangeNote {
            at_ms: at_ms + 60_000,
            by: "another program".to_string(),
            what: "power limit changed".to_string(),
        });
    });
    harness.state_mut().state.take_event(theirs, at_ms + 60_500);
    harness.run();
    assert!(
        harness
            .query_by_label("Applied power limit 315 W.")
            .is_none()
    );
    harness.get_by_label_contains("power limit 400 W");
}

#[test]
fn a_kept_trials_message_goes_once_the_card_runs_something_else() {
    use gputune_formats::tuning::ChangeNote;
    let mut harness = harness(SimScenario::Rtx4090);
    let at_ms = 1_700_000_100_000;
    // This window kept a trial of 360 W: the engine noted the change, then the trial ended.
    let kept = tuning_after(&harness, |tuning| {
        tuning.in_force.power_limit_mw = Some(360_000);
        tuning.last_change = Some(ChangeNote {
            at_ms: at_ms - 50,
            by: "this window".to_string(),
            what: "trying power limit 360 W".to_string(),
        });
    });
    harness
        .state_mut()
        .state
        .take_event(kept.clone(), at_ms - 40);
    let mut trial = common_ui::running_trial(40, 60);
    trial.what = "power limit 360 W".to_string();
    trial.phase = TrialPhase::Ended;
    trial.message = Some("Kept power limit 360 W.".to_string());
    harness
        .state_mut()
        .state
        .take_event(LinkEvent::Trial(Box::new(trial.clone())), at_ms);
    // The engine's next report of the same change, and the same status again, keep it.
    harness.state_mut().state.take_event(kept, at_ms + 1_000);
    harness
        .state_mut()
        .state
        .take_event(LinkEvent::Trial(Box::new(trial)), at_ms + 1_100);
    harness.run();
    harness.get_by_label("Kept power limit 360 W.");
    // Another program sets 338 W a minute later: the message and its numbers give way to
    // what the card runs.
    let theirs = tuning_after(&harness, |tuning| {
        tuning.in_force.power_limit_mw = Some(338_000);
        tuning.last_change = Some(ChangeNote {
            at_ms: at_ms + 60_000,
            by: "another program".to_string(),
            what: "power limit changed".to_string(),
        });
    });
    harness.state_mut().state.take_event(theirs, at_ms + 60_500);
    harness.run();
    assert!(
        harness
            .query_by_label_contains("Kept power limit 360 W")
            .is_none()
    );
    assert!(
        harness.query_by_label("Before").is_none(),
        "no stale numbers"
    );
    harness.get_by_label_contains("power limit 338 W");
    // The next trial shows again.
    harness.state_mut().state.take_event(
        LinkEvent::Trial(Box::new(common_ui::running_trial(5, 60))),
        at_ms + 70_000,
    );
    harness.run();
    harness.get_by_label_contains("Trying power limit 315 W");
}

#[test]
fn a_put_back_lock_gputune_never_recorded_says_it_was_reset_and_claims_nothing_more() {
    use gputune_core::tuning::engine::report_lines;
    use gputune_formats::tuning::{GpuRestored, SessionReport};
    let mut harness = harness(SimScenario::Rtx4090);
    let report = SessionReport {
        session: 3,
        purpose: SessionPurpose::Trial,
        kept: false,
        restored: vec![GpuRestored {
            gpu_index: 0,
            gpu_uuid: "GPU-1".to_string(),
            restored: vec![Setting::ResetGpuClocks],
            left: Vec::new(),
            exact: false,
        }],
        stats: Vec::new(),
        message: "Ended the clock lock: put back".to_string(),
        critical_event: None,
        job_record: None,
    };
    harness.state_mut().state.take_event(
        LinkEvent::Notice {
            gpu_index: Some(0),
            notice: Notice::Info(report_lines(&report).join(" ")),
        },
        1_700_000_100_000,
    );
    harness.run();
    let said = harness.get_by_label_contains(
        "GPU 0: its clocks were reset to the driver's default range (unlocked).",
    );
    let node = said.accesskit_node();
    let text = node.label().or_else(|| node.value()).unwrap_or_default();
    assert!(
        text.contains("no earlier lock on record to put back"),
        "{text}"
    );
    // It does not claim to know what the card ran before, nor that it "restored" anything.
    for claim in [
        "was not known",
        "rather than restored",
        "was unlocked before",
    ] {
        assert!(!text.contains(claim), "{claim} in {text}");
    }
}

#[test]
fn a_trial_that_could_not_start_wraps_inside_1280_px_and_shows_no_empty_table() {
    let mut state = common_ui::app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
    state.tab = Tab::Tune;
    let refusal = gputune_formats::card::DeviceError::NoPermission {
        action: "power limit 315 W".to_string(),
    };
    let message = format!("The trial could not start: GPU 0: {refusal} Nothing was changed.");
    let mut trial = common_ui::running_trial(0, 60);
    trial.phase = gputune_formats::tuning::TrialPhase::Ended;
    trial.message = Some(message.clone());
    trial.failed = true;
    state.model.gpus[0].trial = Some(trial);
    let harness = window_harness(state, [1280.0, 720.0]);
    let shown = harness.get_by_label(&message);
    assert!(
        shown.rect().right() <= 1280.0,
        "wrapped inside the window: {:?}",
        shown.rect()
    );
    assert!(
        harness.query_by_label("Before").is_none(),
        "no table of n/a"
    );
}

/// Eight cards that ended one trial, each a little different (so each row is its own).
fn ended_group_trial(harness: &mut Harness<'static, Window>) -> Vec<TrialStatus> {
    let mut statuses = Vec::new();
    for gpu in 0..8u32 {
        let mut trial = common_ui::running_trial(20 + u64::from(gpu), 60);
        trial.gpu_index = gpu;
        trial.phase = TrialPhase::Ended;
        trial.message = Some("Reverted: put back power limit 450 W.".to_string());
        // Cards of one box never draw exactly alike.
        let step = f64::from(gpu);
        trial.during.average_power_w = trial.during.average_power_w.map(|w| w + 3.0 * step);
        trial.during.average_sm_clock_mhz = trial
            .during
            .average_sm_clock_mhz
            .map(|mhz| mhz - 7.0 * step);
        trial.during.peak_temperature_c = trial.during.peak_temperature_c.map(|c| c + gpu);
        harness.state_mut().state.model.gpus[gpu as usize].trial = Some(trial.clone());
        statuses.push(trial);
    }
    statuses
}

#[test]
fn an_ended_all_gpus_trial_shows_each_cards_numbers_and_the_boxs_totals() {
    let mut state = common_ui::app_state(
        SimScenario::EightRtx4090,
        LoadPattern::Training,
        None,
        5,
        500,
    );
    state.tab = Tab::Tune;
    state.tune_all = true;
    let mut harness = window_harness(state, [1280.0, 720.0]);
    let statuses = ended_group_trial(&mut harness);
    harness.run();
    // The cards agree on how it ended: one line for all of them.
    harness.get_by_label("Every GPU: Reverted: put back power limit 450 W.");
    for label in [
        "Power, average",
        "SM clock, average",
        "Temperature, peak",
        "Energy per minute",
    ] {
        harness.get_by_label(label);
    }
    // One row per card: its own power, clock and peak temperature, before -> during.
    let watts = |stats: &gputune_formats::tuning::TrialStats| {
        stats
            .average_power_w
            .unwrap_or_else(|| panic!("the simulated card reports its power"))
    };
    let mhz = |stats: &gputune_formats::tuning::TrialStats| {
        stats
            .average_sm_clock_mhz
            .unwrap_or_else(|| panic!("the simulated card reports its clock"))
    };
    let peak = |stats: &gputune_formats::tuning::TrialStats| {
        f64::from(
            stats
                .peak_temperature_c
                .unwrap_or_else(|| panic!("the simulated card reports its temperature")),
        )
    };
    for status in &statuses {
        let (before, during) = (watts(&status.baseline), watts(&status.during));
        harness.get_by_label(&format!(
            "{before:.0} -> {during:.0} W ({:+.1} %)",
            (during - before) / before * 100.0
        ));
        let (before, during) = (peak(&status.baseline), peak(&status.during));
        // The hottest card's cell reads the same as the box's.
        let temperature = format!("{before:.0} -> {during:.0} °C (");
        assert!(
            harness
                .query_all_by_label_contains(&temperature)
                .next()
                .is_some(),
            "GPU {}: {temperature}",
            status.gpu_index
        );
    }
    let card_rows = harness
        .query_all_by_label_contains(" W (")
        .filter(|node| {
            let node = node.accesskit_node();
            node.label()
                .or_else(|| node.value())
                .is_some_and(|label| label.contains(" -> "))
        })
        .count();
    assert_eq!(card_rows, 8 + 1, "eight cards and the box");
    // The box: the sum of the cards' power and energy per minute, the mean of their clocks,
    // the hottest peak.
    let sum = |value: &dyn Fn(&gputune_formats::tuning::TrialStats) -> f64| {
        (
            statuses
                .iter()
                .map(|status| value(&status.baseline))
                .sum::<f64>(),
            statuses
                .iter()
                .map(|status| value(&status.during))
                .sum::<f64>(),
        )
    };
    let (before_w, during_w) = sum(&watts);
    let box_row = harness.get_by_label("Box").rect();
    // A cell of the box's row: on the line of "Box", on screen (1280 × 720).
    let in_box_row = |text: &str| {
        let cell = harness
            .query_all_by_label_contains(text)
            .find(|node| (node.rect().center().y - box_row.center().y).abs() < 2.0)
            .unwrap_or_else(|| panic!("the box's row shows {text}"));
        assert!(
            cell.rect().right() <= 1280.0 && cell.rect().bottom() <= 720.0,
            "{text} on screen: {:?}",
            cell.rect()
        );
    };
    in_box_row(&format!(
        "{before_w:.0} -> {during_w:.0} W ({:+.1} %)",
        (during_w - before_w) / before_w * 100.0
    ));
    let (before_mhz, during_mhz) = sum(&mhz);
    in_box_row(&format!(
        "{:.0} -> {:.0} MHz",
        before_mhz / 8.0,
        during_mhz / 8.0
    ));
    let hottest =
        |side: &dyn Fn(&TrialStatus) -> f64| statuses.iter().map(side).fold(f64::MIN, f64::max);
    let (before_c, during_c) = (
        hottest(&|status| peak(&status.baseline)),
        hottest(&|status| peak(&status.during)),
    );
    in_box_row(&format!(
        "{before_c:.0} -> {during_c:.0} °C ({:+.0} °C)",
        during_c - before_c
    ));
    let (before_wh, during_wh) = sum(&|stats| {
        stats
            .energy_wh_per_min
            .unwrap_or_else(|| panic!("the simulated card counts its energy"))
    });
    in_box_row(&format!("{before_wh:.2} -> {during_wh:.2} Wh"));
    harness.get_by_label_contains("Box: power and energy per minute are the sums over the cards");
    // Close puts it away.
    harness.get_by_label("Close").click();
    harness.run();
    assert!(harness.query_by_label("Box").is_none());
}

#[test]
fn a_running_all_gpus_trial_shows_no_table_yet() {
    let mut state = common_ui::app_state(
        SimScenario::EightRtx4090,
        LoadPattern::Training,
        None,
        5,
        500,
    );
    state.tab = Tab::Tune;
    state.tune_all = true;
    let mut harness = window_harness(state, [1280.0, 720.0]);
    let _ = ended_group_trial(&mut harness);
    // One card still running: the trial has not ended on the box.
    if let Some(trial) = &mut harness.state_mut().state.model.gpus[3].trial {
        trial.phase = TrialPhase::Running { left_s: 5 };
    }
    harness.run();
    assert!(harness.query_by_label("Box").is_none());
}

/// A session holding the card's fans.
fn fans_holder(purpose: SessionPurpose, by: &str) -> Holder {
    Holder {
        session: 9,
        controls: vec![gputune_formats::tuning::Hold::Fans],
        purpose,
        by: by.to_string(),
        client: u64::MAX,
        since_ms: 0,
        trial_ends_at_ms: None,
        job_pid: None,
        energy_at_start_mj: None,
        job: None,
    }
}

#[test]
fn through_the_daemon_a_followed_curve_is_kept_by_it_and_cleared_there() {
    let mut harness = harness(SimScenario::Rtx4090);
    if let gputune::ui::model::Connection::Connected { daemon, .. } =
        &mut harness.state_mut().state.model.connection
    {
        *daemon = true;
    }
    harness.run();
    harness.get_by_label_contains(
        "The gputune daemon keeps the curve you follow, also after this window closes",
    );
    let kept = tuning_after(&harness, |tuning| {
        tuning.fan_curve = Some(FanCurve::default());
        tuning.holders = vec![fans_holder(SessionPurpose::KeptFanCurve, "alice")];
    });
    harness.state_mut().state.take_event(kept, 0);
    harness.run();
    harness.get_by_label(
        "The fan curve is kept by the daemon (set by alice); clear it to hand the fans back.",
    );
    harness.get_by_label("Clear the kept curve").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Tune(TuneCommand::SetFanCurve {
                gpu_index: 0,
                curve: None
            }))
    );
}

#[test]
fn a_temperature_hold_needs_the_daemon_and_through_it_is_set_shown_and_cleared() {
    use gputune_formats::temperature_hold::{
        TemperatureHold, TemperatureHoldState, TemperatureHoldStatus,
    };
    let mut harness = harness(SimScenario::Rtx4090);
    harness.get_by_label_contains("Holding a temperature needs the gputune daemon");
    assert!(harness.query_by_label("Hold this temperature").is_none());
    if let gputune::ui::model::Connection::Connected { daemon, .. } =
        &mut harness.state_mut().state.model.connection
    {
        *daemon = true;
    }
    harness.run();
    harness.get_by_label("Hold this temperature").click();
    harness.run();
    let hold = TemperatureHold {
        max_temperature_c: 80,
        min_power_limit_mw: 270_000,
        max_power_limit_mw: 450_000,
    };
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Tune(TuneCommand::SetTemperatureHold {
                gpu_index: 0,
                hold: Some(hold)
            })),
        "{:?}",
        harness.state().commands
    );
    // The daemon holds it and moves the limit: the state is shown, the move is a change mark.
    let note = gputune_formats::tuning::ChangeNote {
        at_ms: gputune_core::clock::wall_clock_ms(),
        by: "temperature hold".to_string(),
        what: "temperature hold: 320 W to 300 W (83 °C over 80 °C)".to_string(),
    };
    let held = tuning_after(&harness, |tuning| {
        tuning.temperature_hold = Some(TemperatureHoldStatus {
            // Set again from a terminal meanwhile: 82 °C, 50 %..100 %.
            hold: TemperatureHold {
                max_temperature_c: 82,
                min_power_limit_mw: 225_000,
                ..hold
            },
            set_by: "alice".to_string(),
            since_ms: 0,
            state: TemperatureHoldState::Holding {
                power_limit_mw: 300_000,
                temperature_c: 79,
            },
            put_back_mw: Some(450_000),
        });
        tuning.last_change = Some(note.clone());
    });
    harness.state_mut().state.take_event(held, 0);
    harness.run();
    harness.get_by_label_contains("(set by alice): holding at 300 W (79 °C).");
    let panel = &harness.state().state.tune;
    assert_eq!(
        (panel.hold_max_c, panel.hold_power_pct),
        (82, (50.0, 100.0))
    );
    assert!(harness.state().state.model.gpus[0].changes.contains(&note));
    harness.get_by_label("Clear the hold").click();
    harness.run();
    assert!(harness.state().commands.contains(&AppCommand::Tune(
        TuneCommand::SetTemperatureHold {
            gpu_index: 0,
            hold: None
        }
    )));
}
