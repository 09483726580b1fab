//! The strips above every panel: "Simulated GPU", and the backend failing to open.

use eframe::egui::{self, Color32, RichText};

use crate::device::BackendKind;
use crate::ui::model::Connection;
use crate::ui::style::ERROR_TEXT;

const WARNING_FILL: Color32 = Color32::from_rgb(0x5a, 0x45, 0x10);

/// Shows what the user must know about the connection before any reading. Returns `false` when
/// there is nothing else to show (still connecting, or failed).
pub fn connection_banner(ui: &mut egui::Ui, connection: &Connection) -> bool {
    match connection {
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
            ui.label("Start gputune with --backend sim to explore it on a simulated RTX 4090.");
            false
        }
        Connection::Connected {
            backend: BackendKind::Sim,
            simulated_because,
            ..
        } => {
            simulated_banner(ui, simulated_because.as_deref());
            true
        }
        Connection::Connected { .. } => true,
    }
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
