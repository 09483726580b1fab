//! The Box tab as a user sees it: on the simulated 8-GPU box, eight columns with their slots,
//! temperatures and headroom; a click on a card's title opens its graphs; a one-GPU machine
//! gets a sentence instead.

use common_ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::common_ui;
use gputune_core::device::sim::{LoadPattern, SimScenario};
use gputune_formats::window::Tab;

fn harness(scenario: SimScenario, size: [f32; 2]) -> Harness<'static, Window> {
    let mut state = app_state(scenario, LoadPattern::Training, None, 20, 500);
    state.tab = Tab::Box;
    window_harness(state, size)
}

#[test]
fn the_eight_gpu_box_shows_a_column_per_card_with_its_slot_and_headroom() {
    let mut harness = harness(SimScenario::EightRtx4090, [1280.0, 720.0]);
    harness.run();
    let slots = [
        "01:00.0", "21:00.0", "41:00.0", "61:00.0", "81:00.0", "A1:00.0", "C1:00.0", "E1:00.0",
    ];
    for (index, slot) in slots.iter().enumerate() {
        harness.get_by_label(&format!("GPU {index}"));
        harness.get_by_label(slot);
    }
    // Every card's headroom to its slowdown temperature, from its own reading.
    let headrooms: Vec<String> = {
        let model = &harness.state().state.model;
        model
            .gpus
            .iter()
            .map(|gpu| {
                let reading = match &gpu.latest {
                    Some(Ok(reading)) => reading.clone(),
                    other => panic!("GPU {} has no reading: {other:?}", gpu.info.identity.index),
                };
                gputune::ui::box_view::cells::headroom(
                    &reading,
                    gpu.info.constraints.slowdown_temperature_c,
                )
                .text
            })
            .collect()
    };
    for headroom in &headrooms {
        assert!(headroom.ends_with(" °C"), "{headrooms:?}");
        assert!(
            harness.query_all_by_label(headroom).next().is_some(),
            "{headroom} is shown"
        );
    }
    assert_eq!(harness.query_all_by_label("Headroom").count(), 1);
    // Every card trains: its link is said as reached under load.
    assert_eq!(harness.query_all_by_label_contains("under load").count(), 8);
    harness.get_by_label("GPU 3").click();
    harness.run();
    let state = &harness.state().state;
    assert_eq!((state.tab, state.selected_gpu), (Tab::Monitor, Some(3)));
}

#[test]
fn a_one_gpu_machine_gets_a_sentence_not_a_table() {
    let mut harness = harness(SimScenario::Rtx4090, [1280.0, 720.0]);
    harness.run();
    harness.get_by_label(gputune::ui::box_view::ONE_GPU);
    assert!(harness.query_by_label("Headroom").is_none());
}
