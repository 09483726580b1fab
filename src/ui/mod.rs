//! The egui application: `app` owns the window and the device-owner thread; each panel is a
//! file with its state and a `*_ui` method, and never touches hardware or files.

pub mod app;
pub mod model;
pub mod monitor;
pub mod overview;
pub mod widgets;

use crate::device::BackendOptions;

/// Opens the main window and runs until it closes.
pub fn run_window(options: BackendOptions) -> anyhow::Result<()> {
    let native_options = eframe::NativeOptions {
        viewport: eframe::egui::ViewportBuilder::default()
            .with_title("gputune")
            .with_app_id("gputune")
            .with_inner_size([1120.0, 720.0])
            .with_min_inner_size([480.0, 320.0]),
        ..Default::default()
    };
    eframe::run_native(
        "gputune",
        native_options,
        Box::new(move |creation| {
            let app = app::GpuTuneApp::start(options, creation.egui_ctx.clone(), creation.storage)?;
            Ok(Box::new(app))
        }),
    )
    .map_err(|error| anyhow::anyhow!("The window could not be opened: {error}"))
}
