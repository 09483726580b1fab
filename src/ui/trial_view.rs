//! A trial in the Tune tab: what is being tried, the countdown with Keep and Revert, and the
//! before / during numbers.

use eframe::egui::{self, Color32, RichText};

use crate::tuning::control::TuneCommand;
use crate::tuning::gui_trial::TrialStatus;

/// The running (or last) trial: what is tried, the countdown, Keep / Revert, before and during.
pub fn trial_box(ui: &mut egui::Ui, trial: &TrialStatus, commands: &mut Vec<TuneCommand>) {
    egui::Frame::group(ui.style())
        .inner_margin(8.0)
        .show(ui, |ui| {
            ui.set_width(ui.available_width());
            match trial.remaining_s {
                Some(remaining_s) => {
                    ui.horizontal(|ui| {
                        ui.label(
                            RichText::new(format!(
                                "Trying {}: reverts in {remaining_s} s",
                                trial.what
                            ))
                            .strong()
                            .color(Color32::from_rgb(0xff, 0xc1, 0x4d)),
                        );
                        if ui.button("Keep").clicked() {
                            commands.push(TuneCommand::KeepTrial);
                        }
                        if ui.button("Revert").clicked() {
                            commands.push(TuneCommand::RevertTrial);
                        }
                    });
                }
                None => {
                    ui.label(RichText::new(trial.message.clone().unwrap_or_default()).strong());
                }
            }
            trial_table(ui, trial);
        });
    ui.add_space(6.0);
}

fn trial_table(ui: &mut egui::Ui, trial: &TrialStatus) {
    if trial.baseline.samples == 0 && trial.during.samples == 0 {
        return;
    }
    let number = |value: Option<f64>, unit: &str| {
        value.map_or("n/a".to_string(), |value| format!("{value:.1} {unit}"))
    };
    let whole = |value: Option<u32>, unit: &str| {
        value.map_or("n/a".to_string(), |value| format!("{value} {unit}"))
    };
    egui::Grid::new(("trial", trial.gpu_index))
        .striped(true)
        .num_columns(3)
        .show(ui, |ui| {
            ui.label("");
            ui.label(RichText::new(format!("Before ({:.0} s)", trial.baseline.duration_s)).weak());
            ui.label(RichText::new(format!("During ({:.0} s)", trial.during.duration_s)).weak());
            ui.end_row();
            let rows: [(&str, String, String); 6] = [
                (
                    "Average power",
                    number(trial.baseline.average_power_w, "W"),
                    number(trial.during.average_power_w, "W"),
                ),
                (
                    "Average SM clock",
                    number(trial.baseline.average_sm_clock_mhz, "MHz"),
                    number(trial.during.average_sm_clock_mhz, "MHz"),
                ),
                (
                    "Minimum SM clock",
                    whole(trial.baseline.min_sm_clock_mhz, "MHz"),
                    whole(trial.during.min_sm_clock_mhz, "MHz"),
                ),
                (
                    "Average temperature",
                    number(trial.baseline.average_temperature_c, "°C"),
                    number(trial.during.average_temperature_c, "°C"),
                ),
                (
                    "Energy per minute",
                    number(trial.baseline.energy_wh_per_min, "Wh"),
                    number(trial.during.energy_wh_per_min, "Wh"),
                ),
                (
                    "Throttled",
                    throttle_text(&trial.baseline),
                    throttle_text(&trial.during),
                ),
            ];
            for (label, before, during) in rows {
                ui.label(label);
                ui.label(before);
                ui.label(during);
                ui.end_row();
            }
        });
}

fn throttle_text(stats: &crate::tuning::trial::TrialStats) -> String {
    if stats.throttle_s.is_empty() {
        return "none".to_string();
    }
    stats
        .throttle_s
        .iter()
        .map(|(reason, seconds)| format!("{} {seconds:.0} s", reason.label()))
        .collect::<Vec<_>>()
        .join(", ")
}
