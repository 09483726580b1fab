//! The window as a user drives it (egui_kittest, headless), and the tests that open it beside
//! real processes: the daemon (`daemon`, `daemon_history`), `plan --measure` (`plan_measure`),
//! and the README's screenshots. The only test binary that links the GUI stack (with
//! tests/sampler_slow_driver.rs); `cargo test --test window ui_tune::` runs one module.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/ui.rs"]
mod common_ui;

mod daemon;
mod daemon_history;
mod daemon_restart;
mod plan_measure;
mod plan_measure_runner;
mod screenshots;
mod ui_box;
mod ui_monitor;
mod ui_plan;
mod ui_processes;
mod ui_profiles;
mod ui_stability;
mod ui_sweep;
mod ui_tune;
