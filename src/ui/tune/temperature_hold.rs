//! The Tune tab's temperature hold, beside the fan curve: the daemon keeps the card at or
//! below a temperature by moving its power limit within bounds (a share of its default);
//! where the hold is now (holding at N W, at its floor and still hot, paused while a session
//! holds the power limit); set it and clear it. The engine checks and writes; each of its moves
//! is a change note, so the graphs' change marks show it.

use eframe::egui::{self, RichText};

use crate::ui::model::GpuModel;
use crate::ui::style::{ERROR_TEXT, GOOD_TEXT, WARNING_TEXT};
use crate::ui::tune::{TunePanel, power_limit_mw};
use crate::ui::widgets::labelled::labelled;
use gputune_core::link::TuneCommand;
use gputune_formats::card::Constraints;
use gputune_formats::temperature_hold::{
    HIGHEST_HOLD_C, LOWEST_HOLD_C, TemperatureHold, TemperatureHoldState, TemperatureHoldStatus,
};
use gputune_formats::units::watts_exact;

impl TunePanel {
    /// The inputs take the card's hold (set elsewhere: a terminal, another window), its bounds
    /// as shares of the default.
    pub(super) fn follow_hold(&mut self, hold: &TemperatureHold, constraints: &Constraints) {
        self.hold_max_c = hold.max_temperature_c;
        if let Some(default_mw) = constraints
            .power_limit_default_mw
            .filter(|default_mw| *default_mw > 0)
        {
            let share = |mw: u32| (f64::from(mw) * 100.0 / f64::from(default_mw)).round();
            self.hold_power_pct = (
                share(hold.min_power_limit_mw),
                share(hold.max_power_limit_mw),
            );
        }
    }

    /// The card's hold: where it is, the target and the bounds, Hold and Clear.
    pub(super) fn hold_section(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        daemon: bool,
        commands: &mut Vec<TuneCommand>,
    ) {
        let constraints = &gpu.info.constraints;
        let gpu_index = gpu.info.identity.index;
        ui.add_space(8.0);
        ui.heading("Temperature hold");
        let status = gpu
            .tuning
            .as_ref()
            .and_then(|tuning| tuning.temperature_hold.as_ref());
        hold_status(ui, status);
        if !daemon {
            ui.label(
                RichText::new(
                    "Holding a temperature needs the gputune daemon (it moves the power limit with no window open): install it with `sudo gputune daemon install`.",
                )
                .weak(),
            );
            return;
        }
        ui.label(
            RichText::new(
                "The daemon lowers the power limit while the card is over the temperature and gives it back as it cools, within the bounds; it pauses while a trial, a sweep, a check or a run holds the power limit.",
            )
            .weak(),
        );
        let highest_c = constraints
            .slowdown_temperature_c
            .map_or(HIGHEST_HOLD_C, |slowdown_c| slowdown_c.saturating_sub(1));
        let (low_pct, high_pct) = &mut self.hold_power_pct;
        labelled(
            ui,
            "Stay at or below",
            egui::DragValue::new(&mut self.hold_max_c)
                .range(LOWEST_HOLD_C..=highest_c)
                .suffix(" °C"),
        );
        ui.horizontal(|ui| {
            labelled(
                ui,
                "Power limit from",
                egui::DragValue::new(low_pct)
                    .range(1.0..=200.0)
                    .suffix(" %"),
            );
            labelled(
                ui,
                "to",
                egui::DragValue::new(high_pct)
                    .range(1.0..=200.0)
                    .suffix(" %"),
            );
        });
        let hold = match (
            power_limit_mw(constraints, *low_pct),
            power_limit_mw(constraints, *high_pct),
        ) {
            (Some(min_power_limit_mw), Some(max_power_limit_mw)) => {
                let hold = TemperatureHold {
                    max_temperature_c: self.hold_max_c,
                    min_power_limit_mw,
                    max_power_limit_mw,
                };
                hold.check(constraints).map(|()| hold)
            }
            _ => Err("This card does not say its default power limit.".to_string()),
        };
        ui.horizontal(|ui| match &hold {
            Ok(hold) => {
                ui.label(
                    RichText::new(format!(
                        "{} to {}",
                        watts_exact(hold.min_power_limit_mw),
                        watts_exact(hold.max_power_limit_mw)
                    ))
                    .weak(),
                );
                if ui.button("Hold this temperature").clicked() {
                    commands.push(TuneCommand::SetTemperatureHold {
                        gpu_index,
                        hold: Some(*hold),
                    });
                }
            }
            Err(why) => {
                ui.label(RichText::new(why).color(ERROR_TEXT));
            }
        });
        if status.is_some()
            && ui
                .button("Clear the hold")
                .on_hover_text("The power limit goes back to what it was before the hold")
                .clicked()
        {
            commands.push(TuneCommand::SetTemperatureHold {
                gpu_index,
                hold: None,
            });
        }
    }
}

/// Where the card's hold is, or that it has none.
fn hold_status(ui: &mut egui::Ui, status: Option<&TemperatureHoldStatus>) {
    match status {
        Some(status) => {
            let colour = match status.state {
                TemperatureHoldState::AtFloor { .. } => WARNING_TEXT,
                TemperatureHoldState::Refused { .. } => ERROR_TEXT,
                _ => GOOD_TEXT,
            };
            ui.label(
                RichText::new(format!(
                    "Held {} (set by {}): {}.",
                    status.hold.describe(),
                    status.set_by,
                    status.state.describe()
                ))
                .color(colour),
            );
        }
        None => {
            ui.label(RichText::new("No temperature hold on this card.").weak());
        }
    }
}
