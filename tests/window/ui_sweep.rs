//! The Tune tab's "Find the efficient setting" panel as a user drives it: the inputs become
//! the sweep the link runs, bad input says what is wrong and starts nothing, a card held by
//! someone else cannot be swept, a running sweep shows where it stands and can be stopped, a
//! finished one shows its answer and saves it as a profile.

use common::sweep_view::simulated_sweep;
use common_ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::common;
use crate::common_ui;
use gputune::ui::app::{AppCommand, TuneView};
use gputune::ui::tune::sweep_panel::SweepAction;
use gputune_core::device::sim::{LoadPattern, SimScenario};
use gputune_core::link::LinkEvent;
use gputune_core::sweep::steps::SweepSpec;
use gputune_formats::reports::sweep::Objective;
use gputune_formats::tuning::{Holder, SessionPurpose};
use gputune_formats::window::Tab;

fn harness() -> Harness<'static, Window> {
    let mut state = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
    state.tab = Tab::Tune;
    window_harness(state, [1280.0, 900.0])
}

fn sweep_actions(harness: &Harness<'static, Window>) -> Vec<SweepAction> {
    harness
        .state()
        .commands
        .iter()
        .filter_map(|command| match command {
            AppCommand::Sweep(action) => Some(action.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_inputs_become_the_sweep_the_link_runs() {
    let mut harness = harness();
    harness.get_by_label("Find the efficient setting").click();
    harness.run();
    assert_eq!(harness.state().state.tune_view, TuneView::Sweep);
    harness.get_by_label_contains("No sweep yet");
    harness.get_by_label_contains("6 settings × 90 s, about 9 min");
    {
        let panel = &mut harness.state_mut().state.sweep;
        panel.power_limits = "100, 80, 60".to_string();
        panel.clock_caps = "2400".to_string();
        panel.undervolt = true;
        panel.progress_file = "/tmp/train.log".to_string();
    }
    harness.run();
    // Per limit: uncapped, capped, capped with the offset; then the first again.
    harness.get_by_label_contains("10 settings × 90 s, about 15 min");
    harness.get_by_label("Start the sweep").click();
    harness.run();
    let actions = sweep_actions(&harness);
    let [SweepAction::Start(launch)] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(
        launch.spec,
        SweepSpec {
            power_limits_pct: vec![100.0, 80.0, 60.0],
            clock_caps_mhz: vec![2400],
            undervolt_offset_mhz: Some(150),
        }
    );
    assert_eq!(launch.objective, Objective::default());
    assert_eq!(launch.timing.step_s, 90.0);
    assert_eq!(launch.timing.warmup_s, 20.0);
    assert_eq!(
        launch.progress_file.as_deref(),
        Some(std::path::Path::new("/tmp/train.log"))
    );
}

#[test]
fn all_the_boxs_gpus_are_swept_together_as_one_launch() {
    let mut state = app_state(
        SimScenario::EightRtx4090,
        LoadPattern::Training,
        None,
        5,
        500,
    );
    state.tab = Tab::Tune;
    let mut harness = window_harness(state, [1280.0, 900.0]);
    harness.state_mut().state.tune_view = TuneView::Sweep;
    harness.run();
    harness
        .get_by_label("All 8 GPUs together (one job across them)")
        .click();
    harness.run();
    harness.get_by_label("Start the sweep").click();
    harness.run();
    let actions = sweep_actions(&harness);
    let [SweepAction::Start(launch)] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(launch.gpu_index, 0);
    let others: Vec<u32> = launch.also.iter().map(|(index, _)| *index).collect();
    assert_eq!(others, vec![1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn bad_input_says_what_is_wrong_and_a_held_card_cannot_be_swept() {
    let mut harness = harness();
    harness.state_mut().state.tune_view = TuneView::Sweep;
    harness.state_mut().state.sweep.power_limits = "100,fast".to_string();
    harness.run();
    harness.get_by_label_contains("\"fast\" is not a number");
    harness.get_by_label("Start the sweep").click();
    harness.run();
    assert!(sweep_actions(&harness).is_empty());

    harness.state_mut().state.sweep.power_limits = "100,70".to_string();
    let mut tuning = harness.state().state.model.gpus[0]
        .tuning
        .clone()
        .unwrap_or_else(|| panic!("the engine said what the card runs"));
    tuning.holders = vec![Holder {
        session: 4,
        controls: vec![gputune_formats::tuning::Hold::PowerLimit],
        purpose: SessionPurpose::Run,
        by: "gputune run --profile Quiet (pid 77, user bob)".to_string(),
        client: 9,
        since_ms: 0,
        trial_ends_at_ms: None,
        job_pid: None,
        energy_at_start_mj: None,
        job: None,
    }];
    harness
        .state_mut()
        .state
        .take_event(LinkEvent::Tuning(Box::new(tuning)), 0);
    harness.run();
    harness.get_by_label_contains("held by gputune run --profile Quiet (pid 77, user bob) (a run)");
    harness.get_by_label("Start the sweep").click();
    harness.run();
    assert!(sweep_actions(&harness).is_empty());
}

#[test]
fn a_running_sweep_shows_its_step_and_can_be_stopped() {
    let mut harness = harness();
    harness.state_mut().state.tune_view = TuneView::Sweep;
    let view = simulated_sweep(&[100.0, 90.0, 80.0, 70.0, 60.0], 2, 50);
    harness.state_mut().state.take_event(
        LinkEvent::Sweep {
            view: Box::new(view),
            notes: vec!["Following /home/ana/runs/llama-lora/train.log.".to_string()],
        },
        0,
    );
    harness.run();
    harness.get_by_label_contains("Setting 3 of 6: 80 % (360 W), measuring, 30 of 70 s");
    harness.get_by_label_contains("Measured by the job's own progress (tqdm, per step)");
    harness.get_by_label("Following /home/ana/runs/llama-lora/train.log.");
    harness.get_by_label("90 % (405 W)");
    assert!(harness.query_by_label("Start the sweep").is_none());
    harness.get_by_label("Stop and put the card back").click();
    harness.run();
    assert_eq!(
        sweep_actions(&harness),
        vec![SweepAction::Stop { gpu_index: 0 }]
    );
}

#[test]
fn a_finished_sweep_shows_its_answer_and_saves_it_as_a_profile() {
    let mut harness = harness();
    harness.state_mut().state.tune_view = TuneView::Sweep;
    let view = simulated_sweep(&[100.0, 90.0, 80.0, 70.0, 60.0], 6, 0);
    let recommendation = view
        .outcome
        .as_ref()
        .and_then(|outcome| outcome.recommendation.clone().ok())
        .unwrap_or_else(|| panic!("the simulated sweep has an answer"));
    harness.state_mut().state.take_event(
        LinkEvent::Sweep {
            view: Box::new(view),
            notes: Vec::new(),
        },
        0,
    );
    harness.run();
    harness.get_by_label_contains("Done. Put back GPU 0 (power limit 450 W).");
    harness.get_by_label(&recommendation.sentence);
    harness.get_by_label("Start the sweep");
    harness.state_mut().state.sweep.profile_name = "Night runs".to_string();
    harness.run();
    harness.get_by_label("Save as profile").click();
    harness.run();
    assert_eq!(
        sweep_actions(&harness),
        vec![SweepAction::SaveProfile {
            gpu_index: 0,
            name: "Night runs".to_string()
        }]
    );
}
