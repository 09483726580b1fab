//! The strips above every panel: "Simulated GPU", the backend failing to open, and the
//! daemon going away and coming back.

use eframe::egui::{self, Color32, RichText};

use crate::ui::model::{Connection, Reconnected, WindowModel};
use crate::ui::style::ERROR_TEXT;
use gputune_core::device::BackendKind;

const WARNING_FILL: Color32 = Color32::from_rgb(0x5a, 0x45, 0x10);

/// Shows what the user must know about the connection before any reading. Returns `false` when
/// there is nothing else to show (still connecting, or failed).
pub fn connection_banner(ui: &mut egui::Ui, model: &WindowModel) -> bool {
    match &model.connection {
        Connection::Connecting => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Looking for GPUs…");
            });
            false
        }
        Connection::Failed(message) => {
            ui.heading("No GPU could be reached");
            ui.label(RichText::new(message).color(ERROR_TEXT));
            // Only without a daemon: with one, the link waits for it instead of failing.
            ui.label("Start gputune with --backend sim to explore it on a simulated RTX 4090.");
            false
        }
        Connection::Reconnecting(reconnecting) => {
            let first = model.gpus.is_empty();
            let headline = if first {
                "The gputune daemon does not answer yet".to_string()
            } else {
                format!(
                    "The gputune daemon went away at {}",
                    gputune_core::units::local_time(reconnecting.lost_at_ms, "%H:%M:%S")
                )
            };
            let attempt = match reconnecting.attempt {
                0 => "Reconnecting…".to_string(),
                tries => format!(
                    "Reconnecting… (try {}, the next in {:.1} s)",
                    tries + 1,
                    reconnecting.retry_in_ms as f64 / 1000.0
                ),
            };
            warning_strip(ui, &headline, &format!("{attempt} {}", reconnecting.why));
            // The graphs keep what they have; a window that never connected has none.
            !first
        }
        Connection::Connected {
            backend: BackendKind::Sim,
            simulated_because,
            ..
        } => {
            simulated_banner(ui, simulated_because.as_deref());
            true
        }
        Connection::Connected { .. } => {
            if let Some(reconnected) = model.reconnected {
                reconnected_line(ui, reconnected, model.heard_at_ms);
            }
            true
        }
    }
}

/// How long "reconnected" stays above the panels.
const RECONNECTED_SHOWN_MS: u64 = 60_000;

/// "The gputune daemon restarted …; reconnected at …", for a minute after the reconnect.
fn reconnected_line(ui: &mut egui::Ui, reconnected: Reconnected, now_ms: u64) {
    if now_ms.saturating_sub(reconnected.at_ms) > RECONNECTED_SHOWN_MS {
        return;
    }
    ui.label(format!(
        "The gputune daemon restarted (it went away at {}); reconnected at {}, and the graphs were filled in from its history.",
        gputune_core::units::local_time(reconnected.lost_at_ms, "%H:%M:%S"),
        gputune_core::units::local_time(reconnected.at_ms, "%H:%M:%S"),
    ));
}

fn warning_strip(ui: &mut egui::Ui, headline: &str, detail: &str) {
    egui::Frame::new()
        .fill(WARNING_FILL)
        .inner_margin(8.0)
        .corner_radius(4.0)
        .show(ui, |ui| {
            ui.set_width(ui.available_width());
            // No spinner: it would redraw the window without end while a daemon stays away;
            // each try's news redraws it.
            ui.label(RichText::new(headline).strong().color(Color32::WHITE));
            ui.label(RichText::new(detail).color(Color32::from_gray(230)));
        });
    ui.add_space(6.0);
}

fn simulated_banner(ui: &mut egui::Ui, reason: Option<&str>) {
    egui::Frame::new()
        .fill(WARNING_FILL)
        .inner_margin(8.0)
        .corner_radius(4.0)
        .show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.label(
                RichText::new("Simulated GPU")
                    .strong()
                    .color(Color32::WHITE),
            );
            let detail = match reason {
                Some(reason) => format!(
                    "No NVIDIA GPU could be used, so gputune shows a simulated card. {reason}"
                ),
                None => "Started with --backend sim: these readings come from a simulated card."
                    .to_string(),
            };
            ui.label(RichText::new(detail).color(Color32::from_gray(230)));
        });
    ui.add_space(6.0);
}
