//! The processes on each GPU in the window (egui_kittest): the overview card's line (how many,
//! the one with the most VRAM), the graphs view's table (pid, user, command, VRAM, type), the
//! job a run started marked in both, and a GPU that does not list them, a process that ended
//! and a long list.

use common_ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::common_ui;
use gputune::ui::app::AppState;
use gputune_core::device::sim::{LoadPattern, SIM_FIRST_PID, SimScenario};
use gputune_core::link::LinkEvent;
use gputune_formats::card::{GpuProcess, ProcessKind, Telemetry};
use gputune_formats::tuning::{Holder, SessionPurpose};

/// VRAM the simulated training worker holds: the load's use above the idle card's.
const SIM_WORKER_MIB: u64 = 21_870 - 420;

fn harness(state: AppState) -> Harness<'static, Window> {
    window_harness(state, [1280.0, 1000.0])
}

fn training(scenario: SimScenario) -> AppState {
    app_state(scenario, LoadPattern::Training, None, 30, 500)
}

/// GPU 0 held by a run whose job is `pid`.
fn run_with_job(state: &mut AppState, pid: u32) {
    let mut tuning = state.model.gpus[0]
        .tuning
        .clone()
        .unwrap_or_else(|| panic!("the card's tuning arrived"));
    tuning.holders = vec![Holder {
        session: 2,
        controls: vec![gputune_formats::tuning::Hold::PowerLimit],
        purpose: SessionPurpose::Run,
        by: "gputune run --profile Quiet (pid 900, user alice)".to_string(),
        client: 5,
        since_ms: 0,
        trial_ends_at_ms: None,
        job_pid: Some(pid),
        energy_at_start_mj: None,
        job: None,
    }];
    state.take_event(LinkEvent::Tuning(Box::new(tuning)), 0);
}

/// GPU 0's latest reading, with `processes` instead of what it listed.
fn with_processes(state: &mut AppState, processes: Option<Vec<GpuProcess>>) {
    let reading: Telemetry = match &state.model.gpus[0].latest {
        Some(Ok(reading)) => Telemetry {
            processes,
            sampled_at_ms: reading.sampled_at_ms + 500,
            ..reading.clone()
        },
        other => panic!("GPU 0 has a reading: {other:?}"),
    };
    state.take_event(LinkEvent::Samples(vec![Ok(reading)]), 0);
}

fn process(pid: u32, mib: u64, command: Option<&str>) -> GpuProcess {
    GpuProcess {
        pid,
        kind: ProcessKind::Compute,
        used_memory_bytes: Some(mib << 20),
        user: Some("bob".to_string()),
        command: command.map(str::to_string),
        exited: command.is_none(),
        ancestor_pids: Vec::new(),
    }
}

#[test]
fn each_card_names_its_process_count_and_the_top_process() {
    let harness = harness(training(SimScenario::EightRtx4090));
    assert_eq!(harness.query_all_by_label("Processes").count(), 8);
    assert_eq!(
        harness
            .query_all_by_label_contains("1 · alice · 20.9 GiB · python3 -u train.py")
            .count(),
        8,
        "one worker per GPU, on each card"
    );
}

#[test]
fn the_card_marks_the_runs_job() {
    let mut state = training(SimScenario::Rtx4090);
    run_with_job(&mut state, SIM_FIRST_PID);
    let harness = harness(state);
    harness.get_by_label_contains("1 · job · alice · 20.9 GiB · python train.py");
}

#[test]
fn the_graphs_view_lists_pid_user_command_vram_and_type() {
    let mut state = training(SimScenario::Rtx4090);
    state.selected_gpu = Some(0);
    let harness = harness(state);
    harness.get_by_label("Processes (1)");
    for column in ["PID", "User", "Command", "VRAM (MiB)", "Type"] {
        harness.get_by_label(column);
    }
    harness.get_by_label(&SIM_FIRST_PID.to_string());
    harness.get_by_label("alice");
    harness.get_by_label_contains("python train.py --config");
    harness.get_by_label(&SIM_WORKER_MIB.to_string());
    harness.get_by_label("compute");
    assert!(harness.query_by_label("job").is_none(), "no run holds it");
}

#[test]
fn the_table_marks_the_job_and_an_ended_process() {
    let mut state = training(SimScenario::Rtx4090);
    state.selected_gpu = Some(0);
    with_processes(
        &mut state,
        Some(vec![
            process(31_337, 20_000, Some("torchrun train.py")),
            process(31_400, 300, None),
        ]),
    );
    run_with_job(&mut state, 31_337);
    let harness = harness(state);
    harness.get_by_label("Processes (2)");
    harness.get_by_label("job");
    harness.get_by_label("torchrun train.py");
    harness.get_by_label("(exited)");
    harness.get_by_label("20000");
}

#[test]
fn a_gpu_that_does_not_list_processes_says_so() {
    let mut state = training(SimScenario::Rtx4090);
    with_processes(&mut state, None);
    let mut harness = harness(state);
    harness.get_by_label("Processes");
    assert_eq!(harness.query_all_by_label("n/a").count(), 1, "the card");
    harness.state_mut().state.selected_gpu = Some(0);
    harness.run();
    harness.get_by_label_contains("Processes: n/a — this GPU does not list them.");
}

#[test]
fn an_idle_gpu_has_none_and_a_long_list_scrolls() {
    let idle = app_state(SimScenario::Rtx4090, LoadPattern::Idle, None, 5, 500);
    let harness_idle = harness(idle);
    harness_idle.get_by_label("none");

    let mut state = training(SimScenario::Rtx4090);
    state.selected_gpu = Some(0);
    let many: Vec<GpuProcess> = (0..40)
        .map(|number| {
            process(
                50_000 + number,
                1_000 - u64::from(number),
                Some("worker.py"),
            )
        })
        .collect();
    with_processes(&mut state, Some(many));
    let harness = harness(state);
    harness.get_by_label("Processes (40)");
    harness.get_by_label("50000");
    assert!(
        harness.query_by_label("50039").is_none(),
        "the table shows a few rows and scrolls"
    );
}
