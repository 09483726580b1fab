//! The planner panel as a user drives it: the Plan tab answers at once and every change updates
//! the answer; the export buttons ask the app for a file.

mod common;

use common::ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gputune::device::sim::{LoadPattern, SimScenario};
use gputune::plan::export::ExportFormat;
use gputune::ui::app::{AppCommand, Tab};
use gputune::ui::plan::{MethodChoice, PlanAction};

fn harness() -> Harness<'static, Window> {
    let mut state = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
    state.tab = Tab::Plan;
    window_harness(state, [1400.0, 1100.0])
}

#[test]
fn the_plan_tab_answers_for_the_detected_card() {
    let harness = harness();
    // The simulator's RTX 4090 is what the device layer reports.
    assert_eq!(harness.state().state.plan.card().name, "RTX 4090");
    harness.get_by_label_contains("Fits on RTX 4090");
    harness.get_by_label("Strategies on this card, best first");
    harness.get_by_label("Where the memory goes (GiB per GPU)");
}

#[test]
fn switching_to_a_full_fine_tune_updates_the_answer() {
    let mut harness = harness();
    harness.get_by_label("Full").click();
    harness.run();
    assert_eq!(harness.state().state.plan.method, MethodChoice::Full);
    harness.get_by_label_contains("Does not fit on RTX 4090");
    harness.get_by_label("QLoRA").click();
    harness.run();
    harness.get_by_label_contains("Fits on RTX 4090");
}

#[test]
fn export_buttons_ask_the_app_for_a_file() {
    let mut harness = harness();
    harness.get_by_label("Export DeepSpeed config…").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Plan(PlanAction::Export(
                ExportFormat::Deepspeed
            )))
    );
    harness
        .get_by_label("Open config.json or .safetensors…")
        .click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Plan(PlanAction::OpenModelFile))
    );
}

#[test]
fn the_monitor_tab_is_one_click_away() {
    let mut harness = harness();
    harness.get_by_label("Monitor").click();
    harness.run();
    assert_eq!(harness.state().state.tab, Tab::Monitor);
    harness.get_by_label("GPU 0 · NVIDIA GeForce RTX 4090");
}
