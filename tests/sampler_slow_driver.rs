//! A slow driver never blocks the window: the link (and the engine behind it) waits on NVML,
//! the UI side does not. Its own test binary, because the thread it leaves behind keeps calling
//! the fake library for a while after the test ends.

mod common;
#[path = "common/ui.rs"]
mod common_ui;

use common::FakeMachine;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gputune::ui::app::AppState;
use gputune::ui::model::WindowModel;
use gputune_core::link::Link;
use gputune_core::service::client::SocketChoice;
use gputune_formats::window::RememberedWindow;

#[test]
fn a_slow_driver_never_blocks_the_window() {
    // Every NVML call takes a second: opening 8 GPUs takes minutes on the device-owner thread.
    let machine = FakeMachine::new("8x-rtx4090", "slow_ms=1000");
    let options = common::daemon::window_options(&machine, SocketChoice::None);
    let link = Link::spawn(options, 100, || {}).unwrap_or_else(|error| panic!("{error}"));
    let mut harness = Harness::builder().build_ui_state(
        |ui, state: &mut AppState| {
            let _ = state.ui(ui);
        },
        AppState::new(
            WindowModel::with_history_capacity(100),
            RememberedWindow::default(),
        ),
    );
    // Frames keep coming while the thread sits in NVML; the window says what it is doing.
    for _ in 0..10 {
        for event in link.drain_events() {
            harness.state_mut().take_event(event, 0);
        }
        // `step`, not `run`: the "looking for GPUs" spinner keeps asking for frames.
        harness.step();
    }
    harness.get_by_label("Looking for GPUs…");
    // Closing the window must not wait minutes for the stuck thread either.
    let closing = std::time::Instant::now();
    drop(link);
    assert!(
        closing.elapsed() < std::time::Duration::from_secs(10),
        "closing waited on the driver"
    );
}
