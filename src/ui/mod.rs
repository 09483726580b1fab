//! The egui application: `app` owns the window and the link to the tuning service
//! (`gputune_core::link`); each tab is a folder (`monitor/`, `box_view/`, `tune/`, `profiles/`,
//! `plan/`) whose panels are files with their state and a `*_ui` method, and never touch
//! hardware or files.
//! Colours two panels share are in `style`; small pieces every tab uses are in `widgets/`.

pub mod app;
mod app_glue;
pub mod box_view;
pub mod model;
pub mod monitor;
pub mod plan;
pub mod profiles;
mod reconnect;
pub mod repaint;
pub mod style;
pub mod tune;
pub mod widgets;

use gputune_core::service::client::TuningOptions;

/// Opens the main window and runs until it closes. `interval_ms` overrides the remembered
/// sampling interval.
pub fn run_window(options: TuningOptions, interval_ms: Option<u64>) -> anyhow::Result<()> {
    let (min_ms, max_ms) = gputune_core::service::INTERVAL_RANGE_MS;
    if let Some(interval_ms) = interval_ms
        && !(min_ms..=max_ms).contains(&interval_ms)
    {
        anyhow::bail!(
            "The sampling interval must be between {min_ms} and {max_ms} ms, not {interval_ms} ms."
        );
    }
    let mut viewport = eframe::egui::ViewportBuilder::default()
        .with_title("gputune")
        .with_app_id("gputune")
        .with_inner_size([1120.0, 720.0])
        .with_min_inner_size([480.0, 320.0]);
    // The icon is compiled in; a broken one only costs the icon, never the window.
    match eframe::icon_data::from_png_bytes(include_bytes!("../../assets/gputune.png")) {
        Ok(icon) => viewport = viewport.with_icon(icon),
        Err(error) => tracing::warn!("the window icon could not be decoded: {error}"),
    }
    let native_options = eframe::NativeOptions {
        viewport,
        ..Default::default()
    };
    eframe::run_native(
        "gputune",
        native_options,
        Box::new(move |creation| {
            // SIGINT / SIGTERM close the window the normal way, so its sessions end: a running
            // trial is reverted and the fans go back to what they were.
            let context = creation.egui_ctx.clone();
            if let Err(error) = ctrlc::set_handler(move || {
                context.send_viewport_cmd(eframe::egui::ViewportCommand::Close);
                context.request_repaint();
            }) {
                tracing::warn!("Ctrl-C and SIGTERM will not revert a running trial: {error}");
            }
            let app = app::GpuTuneApp::start(
                options,
                interval_ms,
                creation.egui_ctx.clone(),
                creation.storage,
            )?;
            Ok(Box::new(app))
        }),
    )
    .map_err(|error| anyhow::anyhow!("The window could not be opened: {error}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_window_icon_decodes() {
        let icon = eframe::icon_data::from_png_bytes(include_bytes!("../../assets/gputune.png"));
        assert_eq!(
            icon.map(|icon| (icon.width, icon.height)).ok(),
            Some((256, 256))
        );
    }
}
