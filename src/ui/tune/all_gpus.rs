//! "All GPUs" in the Tune tab: the same settings on every card of the box, applied as one
//! all-or-nothing request or tried as one session (kept or put back together). The inputs
//! follow the first card; a power limit is the same percentage of each card's own default.

use eframe::egui::{self, RichText};

use crate::ui::model::GpuModel;
use crate::ui::style::ERROR_TEXT;
use crate::ui::tune::group_trial_table;
use crate::ui::tune::in_force::{holder_who, in_force_text, notice_label};
use crate::ui::tune::{TunePanel, power_limit_mw};
use gputune_core::device::{Constraints, Setting};
use gputune_core::link::TuneCommand;
use gputune_core::notice::Notice;
use gputune_core::tuning::engine::{TrialPhase, TrialStatus};

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
        cards_box(ui, gpus, daemon, &mut self.dismissed_group, &mut commands);
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

/// What each card runs and its trial, one line each; Keep / Revert for a trial that runs,
/// Cancel while it measures its baseline, Close for the endings (kept in `dismissed`).
fn cards_box(
    ui: &mut egui::Ui,
    gpus: &[GpuModel],
    daemon: bool,
    dismissed: &mut Vec<(u32, u64)>,
    commands: &mut Vec<TuneCommand>,
) {
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
                    let held: String = gpu
                        .tuning
                        .iter()
                        .flat_map(|tuning| &tuning.holders)
                        .map(|holder| {
                            if holder.controls.is_empty() {
                                // A check at the card's own settings holds nothing.
                                return format!(
                                    " · {} of {}",
                                    holder.purpose.describe(),
                                    holder_who(holder)
                                );
                            }
                            format!(
                                " · {} held by {} of {}",
                                holder.controls_text(),
                                holder.purpose.describe(),
                                holder_who(holder)
                            )
                        })
                        .collect();
                    ui.label(format!("{text}{held}"));
                    ui.end_row();
                }
            });
        let trials: Vec<&TrialStatus> = gpus
            .iter()
            .filter_map(|gpu| gpu.shown_trial())
            .filter(|trial| !dismissed.contains(&(trial.gpu_index, trial.session)))
            .collect();
        // One line for the whole trial while every card is at the same point (the usual case),
        // else one line per card.
        let every_card_alike = trials.len() == gpus.len()
            && trials.windows(2).all(|pair| same_point(pair[0], pair[1]));
        if let (true, Some(first)) = (every_card_alike, trials.first()) {
            let soonest = trials
                .iter()
                .min_by_key(|trial| seconds_left(trial))
                .copied()
                .unwrap_or(first);
            trial_line(ui, &format!("Every GPU: {}", trial_text(soonest)), soonest.failed);
        }
        for gpu in gpus {
            let shown = trials
                .iter()
                .find(|trial| trial.gpu_index == gpu.info.identity.index);
            if let Some(trial) = shown {
                if !every_card_alike {
                    let text = format!("GPU {}: {}", trial.gpu_index, trial_text(trial));
                    trial_line(ui, &text, trial.failed);
                }
            } else if let Some(notice) = &gpu.tune_message {
                let index = gpu.info.identity.index;
                let labelled = match notice {
                    Notice::Info(text) => Notice::Info(format!("GPU {index}: {text}")),
                    Notice::Warning(text) => Notice::Warning(format!("GPU {index}: {text}")),
                    Notice::Error(text) => Notice::Error(format!("GPU {index}: {text}")),
                };
                notice_label(ui, &labelled);
            }
        }
        // Once the trial has ended on every card: its numbers, card by card and for the box.
        if !trials.is_empty()
            && trials.iter().all(|trial| trial.phase == TrialPhase::Ended)
            && group_trial_table::has_numbers(&trials)
        {
            ui.add_space(4.0);
            group_trial_table::group_trial_table(ui, &trials);
        }
        let running = trials
            .iter()
            .find(|trial| matches!(trial.phase, TrialPhase::Running { .. }));
        let measuring = trials
            .iter()
            .find(|trial| matches!(trial.phase, TrialPhase::Measuring { .. }));
        ui.horizontal(|ui| {
            if let Some(trial) = running {
                if ui.button("Keep on every GPU").clicked() {
                    commands.push(TuneCommand::KeepTrial {
                        gpu_index: trial.gpu_index,
                    });
                }
                if ui.button("Revert every GPU").clicked() {
                    commands.push(TuneCommand::RevertTrial {
                        gpu_index: trial.gpu_index,
                    });
                }
            } else if let Some(trial) = measuring {
                if ui.button("Cancel").clicked() {
                    commands.push(TuneCommand::RevertTrial {
                        gpu_index: trial.gpu_index,
                    });
                }
            } else if !trials.is_empty() && ui.button("Close").clicked() {
                dismissed.extend(trials.iter().map(|trial| (trial.gpu_index, trial.session)));
                let excess = dismissed.len().saturating_sub(64);
                dismissed.drain(..excess);
            }
        });
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

/// Where a card's trial stands, in words.
fn trial_text(trial: &TrialStatus) -> String {
    match trial.phase {
        TrialPhase::Measuring { left_s } => {
            format!(
                "measuring the baseline before trying {}: {left_s} s",
                trial.what
            )
        }
        TrialPhase::Running { left_s } => format!("trying {}: reverts in {left_s} s", trial.what),
        TrialPhase::Ended => trial.message.clone().unwrap_or_default(),
    }
}

fn trial_line(ui: &mut egui::Ui, text: &str, failed: bool) {
    let text = RichText::new(text);
    ui.label(if failed { text.color(ERROR_TEXT) } else { text });
}

fn seconds_left(trial: &TrialStatus) -> u64 {
    match trial.phase {
        TrialPhase::Measuring { left_s } | TrialPhase::Running { left_s } => left_s,
        TrialPhase::Ended => 0,
    }
}

/// Two cards' trials at the same point: the same phase, setting and ending (countdowns a
/// second apart count as the same).
fn same_point(a: &TrialStatus, b: &TrialStatus) -> bool {
    let phase = |trial: &TrialStatus| std::mem::discriminant(&trial.phase);
    phase(a) == phase(b)
        && a.what == b.what
        && a.message == b.message
        && a.failed == b.failed
        && seconds_left(a).abs_diff(seconds_left(b)) <= 1
}
