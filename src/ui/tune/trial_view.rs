//! A trial in the Tune tab: what is being tried, the countdown with Keep and Revert, and the
//! before / during numbers — the same rows `gputune apply --try` prints.

use eframe::egui::{self, Color32, RichText};

use crate::ui::style::ERROR_TEXT;
use gputune_core::link::TuneCommand;
use gputune_core::tuning::engine::{TrialPhase, TrialStatus};
use gputune_core::tuning::stats::{comparison_rows, settling_note};

const COUNTDOWN_TEXT: Color32 = Color32::from_rgb(0xff, 0xc1, 0x4d);

/// The running (or last) trial: what is tried, the countdown, Keep / Revert, before and during.
/// Returns true when the user closes an ended trial's numbers.
pub fn trial_box(ui: &mut egui::Ui, trial: &TrialStatus, commands: &mut Vec<TuneCommand>) -> bool {
    let gpu_index = trial.gpu_index;
    let mut closed = false;
    egui::Frame::group(ui.style())
        .inner_margin(8.0)
        .show(ui, |ui| {
            ui.set_width(ui.available_width());
            // Wrapped: a refusal is a long sentence, and must stay inside a 1280 px window.
            ui.horizontal_wrapped(|ui| {
                match trial.phase {
                    TrialPhase::Measuring { left_s } => {
                        ui.label(
                            RichText::new(format!(
                                "Measuring the baseline before trying {}: {left_s} s",
                                trial.what
                            ))
                            .strong()
                            .color(COUNTDOWN_TEXT),
                        );
                    }
                    TrialPhase::Running { left_s } => {
                        ui.label(
                            RichText::new(format!("Trying {}: reverts in {left_s} s", trial.what))
                                .strong()
                                .color(COUNTDOWN_TEXT),
                        );
                    }
                    TrialPhase::Ended => {
                        let text =
                            RichText::new(trial.message.clone().unwrap_or_default()).strong();
                        ui.label(if trial.failed {
                            text.color(ERROR_TEXT)
                        } else {
                            text
                        });
                    }
                }
                match trial.phase {
                    TrialPhase::Running { .. } => {
                        if ui.button("Keep").clicked() {
                            commands.push(TuneCommand::KeepTrial { gpu_index });
                        }
                        if ui.button("Revert").clicked() {
                            commands.push(TuneCommand::RevertTrial { gpu_index });
                        }
                    }
                    TrialPhase::Measuring { .. } => {
                        if ui.button("Cancel").clicked() {
                            commands.push(TuneCommand::RevertTrial { gpu_index });
                        }
                    }
                    TrialPhase::Ended => {
                        closed = ui.button("Close").clicked();
                    }
                }
            });
            if let Some(warning) = &trial.baseline_warning {
                ui.label(RichText::new(warning).color(COUNTDOWN_TEXT));
            }
            trial_table(ui, trial);
            if trial.phase == TrialPhase::Ended
                && trial.during.samples > 0
                && let Some(note) = settling_note(&trial.during)
            {
                ui.label(RichText::new(note).weak());
            }
        });
    ui.add_space(6.0);
    closed
}

fn trial_table(ui: &mut egui::Ui, trial: &TrialStatus) {
    // A trial that could not start has nothing to compare: its message says it all.
    let never_ran = trial.failed && trial.during.samples == 0;
    if never_ran || (trial.baseline.samples == 0 && trial.during.samples == 0) {
        return;
    }
    egui::Grid::new(("trial", trial.gpu_index))
        .striped(true)
        .num_columns(4)
        .show(ui, |ui| {
            ui.label("");
            ui.label(RichText::new("Before").weak());
            ui.label(RichText::new("During").weak());
            ui.label(RichText::new("Change").weak());
            ui.end_row();
            for row in comparison_rows(&trial.baseline, &trial.during) {
                ui.label(row.label);
                ui.label(row.before);
                ui.label(row.during);
                ui.label(row.change);
                ui.end_row();
            }
        });
}
