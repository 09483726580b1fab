//! "All GPUs" in the Tune tab: the same settings on every card of the box, applied as one
//! all-or-nothing request or tried as one session (kept or put back together). The inputs
//! follow the first card; a power limit is the same percentage of each card's own default.

use eframe::egui::{self, RichText};

use crate::device::{Constraints, Setting};
use crate::notice::Notice;
use crate::tuning::engine::TrialPhase;
use crate::ui::link::TuneCommand;
use crate::ui::model::GpuModel;
use crate::ui::tune::{TunePanel, in_force_text, notice_label, power_limit_mw};
use crate::ui::widgets::banner::ERROR_TEXT;

impl TunePanel {
    /// Draws the panel for every GPU at once; returns the commands for the engine.
    pub fn tune_all_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpus: &[GpuModel],
        daemon: bool,
    ) -> Vec<TuneCommand> {
        let Some(template) = gpus.first() else {
            return Vec::new();
        };
        self.follow_card(template);
        let mut commands = Vec::new();
        cards_box(ui, gpus, daemon, &mut commands);
        self.trial_duration_row(ui);
        let constraints = template.info.constraints.clone();
        let template_index = template.info.identity.index;
        let mut panel_commands = Vec::new();
        egui::ScrollArea::vertical().show(ui, |ui| {
            ui.columns(2, |columns| {
                self.power_section(
                    &mut columns[0],
                    &constraints,
                    template_index,
                    &mut panel_commands,
                );
                columns[0].label(
                    RichText::new(format!(
                        "On all {} GPUs: each card gets the same percentage of its own default.",
                        gpus.len()
                    ))
                    .weak(),
                );
                self.clock_section(
                    &mut columns[1],
                    &constraints,
                    template_index,
                    &mut panel_commands,
                );
            });
            ui.label(RichText::new("Fan curves are set card by card: pick one GPU above.").weak());
        });
        commands.extend(
            panel_commands
                .into_iter()
                .filter_map(|command| on_every_gpu(command, &constraints, gpus)),
        );
        commands
    }
}

/// The panel's command for the first card, made one for every card.
fn on_every_gpu(
    command: TuneCommand,
    template: &Constraints,
    gpus: &[GpuModel],
) -> Option<TuneCommand> {
    match command {
        TuneCommand::Apply { settings, .. } => Some(TuneCommand::ApplyAll {
            changes: for_every_gpu(&settings, template, gpus),
        }),
        TuneCommand::StartTrial {
            settings,
            duration_s,
            ..
        } => Some(TuneCommand::StartTrialAll {
            changes: for_every_gpu(&settings, template, gpus),
            duration_s,
        }),
        // A keep or revert on one card of the trial ends every card.
        keep_or_revert @ (TuneCommand::KeepTrial { .. } | TuneCommand::RevertTrial { .. }) => {
            Some(keep_or_revert)
        }
        _ => None,
    }
}

/// `settings` (chosen on a card with `template`'s limits) for each of `gpus`: a power limit
/// becomes the same percentage of each card's default; clocks and offsets stay as they are
/// (the engine checks each card's range and refuses the whole request, naming the card).
pub fn for_every_gpu(
    settings: &[Setting],
    template: &Constraints,
    gpus: &[GpuModel],
) -> Vec<(u32, Vec<Setting>)> {
    gpus.iter()
        .map(|gpu| {
            let settings = settings
                .iter()
                .map(|setting| match *setting {
                    Setting::PowerLimit {
                        power_limit_mw: chosen_mw,
                    } => {
                        let percent = template
                            .power_limit_default_mw
                            .filter(|default| *default > 0)
                            .map(|default| f64::from(chosen_mw) / f64::from(default) * 100.0);
                        let own_mw = percent
                            .and_then(|percent| power_limit_mw(&gpu.info.constraints, percent));
                        Setting::PowerLimit {
                            power_limit_mw: own_mw.unwrap_or(chosen_mw),
                        }
                    }
                    other => other,
                })
                .collect();
            (gpu.info.identity.index, settings)
        })
        .collect()
}

/// What each card runs and its trial, one line each; Keep / Revert for a trial that runs.
fn cards_box(ui: &mut egui::Ui, gpus: &[GpuModel], daemon: bool, commands: &mut Vec<TuneCommand>) {
    egui::Frame::group(ui.style()).inner_margin(8.0).show(ui, |ui| {
        ui.set_width(ui.available_width());
        egui::Grid::new("all-gpus-in-force")
            .num_columns(2)
            .spacing([12.0, 4.0])
            .show(ui, |ui| {
                for gpu in gpus {
                    ui.label(RichText::new(format!("GPU {}", gpu.info.identity.index)).strong());
                    let text = gpu.tuning.as_ref().map_or_else(
                        || "reading what the card runs…".to_string(),
                        |tuning| in_force_text(tuning, &gpu.info.constraints),
                    );
                    let held = gpu
                        .tuning
                        .as_ref()
                        .and_then(|tuning| tuning.holder.as_ref())
                        .map(|holder| format!(" · held by {} of {}", holder.purpose.describe(), holder.by))
                        .unwrap_or_default();
                    ui.label(format!("{text}{held}"));
                    ui.end_row();
                }
            });
        let running: Vec<u32> = gpus
            .iter()
            .filter_map(|gpu| gpu.trial.as_ref())
            .filter(|trial| !matches!(trial.phase, TrialPhase::Ended))
            .map(|trial| trial.gpu_index)
            .collect();
        for gpu in gpus {
            if let Some(trial) = &gpu.trial {
                let line = match trial.phase {
                    TrialPhase::Measuring { left_s } => {
                        format!("measuring the baseline, {left_s} s")
                    }
                    TrialPhase::Running { left_s } => {
                        format!("trying {}: reverts in {left_s} s", trial.what)
                    }
                    TrialPhase::Ended => trial.message.clone().unwrap_or_default(),
                };
                let text = RichText::new(format!("GPU {}: {line}", trial.gpu_index));
                ui.label(if trial.failed { text.color(ERROR_TEXT) } else { text });
            } else if let Some(notice) = &gpu.tune_message {
                let labelled = match notice {
                    Notice::Info(text) => Notice::Info(format!("GPU {}: {text}", gpu.info.identity.index)),
                    Notice::Warning(text) => {
                        Notice::Warning(format!("GPU {}: {text}", gpu.info.identity.index))
                    }
                    Notice::Error(text) => Notice::Error(format!("GPU {}: {text}", gpu.info.identity.index)),
                };
                notice_label(ui, &labelled);
            }
        }
        if let Some(&gpu_index) = running.first() {
            ui.horizontal(|ui| {
                if ui.button("Keep on every GPU").clicked() {
                    commands.push(TuneCommand::KeepTrial { gpu_index });
                }
                if ui.button("Revert every GPU").clicked() {
                    commands.push(TuneCommand::RevertTrial { gpu_index });
                }
            });
        }
        ui.label(
            RichText::new(if daemon {
                "One apply changes every card or none; one try holds every card in one session, kept or put back together."
            } else {
                "One apply changes every card or none; one try holds every card in one session, kept or put back together. No gputune daemon runs: this window makes the changes itself."
            })
            .weak(),
        );
    });
    ui.add_space(4.0);
}
