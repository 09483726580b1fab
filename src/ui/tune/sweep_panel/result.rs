//! Where a running sweep stands and what a finished one found: its progress bar, how
//! progress is measured, the two charts and the table of settings, the recommendation and
//! the row that saves it as a profile.

use eframe::egui::{self, RichText};

use super::chart::chart;
use super::table::results_grid;
use super::{RECOMMENDED, SweepAction, SweepPanel};
use crate::ui::style::ERROR_TEXT;
use gputune_core::sweep::runner::{SweepPhase, SweepView};
use gputune_formats::reports::sweep::SweepEnd;

impl SweepPanel {
    /// The sweep on this GPU, running or ended.
    pub(super) fn result_ui(
        &mut self,
        ui: &mut egui::Ui,
        view: &SweepView,
        notes: &[String],
        gpu_index: u32,
        actions: &mut Vec<SweepAction>,
    ) {
        status_line(ui, view);
        let unit = view
            .measured_by
            .as_ref()
            .map_or_else(|| "unit".to_string(), |by| by.unit_name());
        ui.label(
            RichText::new(match &view.measured_by {
                Some(by) => format!("Measured by {}.", by.describe()),
                None => format!("Progress from {}.", view.progress_from),
            })
            .weak(),
        );
        for note in notes.iter().rev().take(3).rev() {
            ui.label(note);
        }
        if view.results.is_empty() && view.live.is_none() {
            ui.add_space(20.0);
            ui.label(
                RichText::new(if view.outcome.is_some() {
                    "No setting was measured to its end."
                } else {
                    "Nothing measured yet: each setting's point appears once its warm-up has passed."
                })
                .weak(),
            );
            return;
        }
        let recommended = view
            .outcome
            .as_ref()
            .and_then(|outcome| outcome.recommendation.as_ref().ok())
            .map(|recommendation| recommendation.step_index);
        ui.columns(2, |columns| {
            chart(
                &mut columns[0],
                view,
                recommended,
                ("throughput", gpu_index),
                &format!("{unit}/s"),
                |result| result.throughput.map(|throughput| throughput.units_per_s),
            );
            chart(
                &mut columns[1],
                view,
                recommended,
                ("energy", gpu_index),
                &format!("J/{unit}"),
                |result| result.energy_per_unit_j,
            );
        });
        results_grid(ui, view, recommended, &unit, gpu_index);
        let Some(outcome) = &view.outcome else {
            return;
        };
        match &outcome.recommendation {
            Ok(recommendation) => {
                ui.label(
                    RichText::new(&recommendation.sentence)
                        .strong()
                        .color(RECOMMENDED),
                );
                // A card of the box that needs its own setting (a hot slot).
                for advice in &outcome.card_advice {
                    ui.label(RichText::new(&advice.sentence).color(ERROR_TEXT));
                }
                ui.horizontal(|ui| {
                    let label = ui.label("Save it as the profile");
                    ui.add(egui::TextEdit::singleline(&mut self.profile_name).desired_width(160.0))
                        .labelled_by(label.id);
                    if ui
                        .add_enabled(
                            !self.profile_name.trim().is_empty(),
                            egui::Button::new("Save as profile"),
                        )
                        .clicked()
                    {
                        actions.push(SweepAction::SaveProfile {
                            gpu_index,
                            name: self.profile_name.trim().to_string(),
                        });
                    }
                });
            }
            Err(why) => {
                ui.label(RichText::new(format!("No recommendation: {why}")).color(ERROR_TEXT));
            }
        }
        match &self.message {
            Some(Ok(message)) => {
                ui.label(message);
            }
            Some(Err(message)) => {
                ui.label(RichText::new(message).color(ERROR_TEXT));
            }
            None => {}
        }
    }
}

/// The progress bar: which setting, warming up or measuring, or how the sweep ended.
fn status_line(ui: &mut egui::Ui, view: &SweepView) {
    let count = view.plan.len().max(1);
    let (text, fraction) = match view.phase {
        SweepPhase::WaitingForProgress => (
            "Waiting for the job's first progress line…".to_string(),
            0.0,
        ),
        SweepPhase::Step {
            index,
            measuring,
            elapsed_s,
        } => {
            let label = view.plan.get(index).map_or("", |step| step.label.as_str());
            let doing = if measuring {
                format!(
                    "measuring, {:.0} of {:.0} s",
                    elapsed_s - view.timing.warmup_s,
                    view.timing.step_s - view.timing.warmup_s
                )
            } else {
                format!(
                    "warming up, {:.0} of {:.0} s",
                    elapsed_s, view.timing.warmup_s
                )
            };
            (
                format!("Setting {} of {count}: {label}, {doing}", index + 1),
                (index as f64 + (elapsed_s / view.timing.step_s).min(1.0)) / count as f64,
            )
        }
        SweepPhase::Finished => {
            let ended = match view.outcome.as_ref().map(|outcome| &outcome.ended) {
                Some(SweepEnd::Completed) | None => "Done.".to_string(),
                Some(SweepEnd::Stopped { reason }) => {
                    format!("Stopped: {reason}")
                }
                Some(SweepEnd::JobFailed { message, .. }) => {
                    format!("Stopped: {message}")
                }
                Some(SweepEnd::Failed { reason }) => {
                    format!("Failed: {reason}")
                }
            };
            let restored = view
                .outcome
                .as_ref()
                .map(|outcome| outcome.restored.join(" "))
                .unwrap_or_default();
            (format!("{ended} {restored}"), 1.0)
        }
    };
    ui.add(egui::ProgressBar::new(fraction as f32).text(text));
}
