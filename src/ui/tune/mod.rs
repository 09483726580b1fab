//! The Tune tab. This file is its Settings view: what the card runs now (in_force.rs), and the
//! controls to change it — power limit as a percentage of the default (with watts), clock
//! locks and offsets with an undervolt-style preset (clocks.rs), a fan curve (fans.rs) and a
//! temperature hold the daemon keeps (temperature_hold.rs); "All GPUs" is
//! all_gpus.rs (an ended group trial's table: group_trial_table.rs), a running trial's box is
//! trial_view.rs. The tab's other views: sweep_panel/ ("Find the efficient setting") and
//! stability_panel.rs (the stability check and undervolt scan). It only builds `TuneCommand`s;
//! the engine validates and writes.
//!
//! The inputs follow the card: when a setting changes on the card (here, from the CLI, from
//! another program), its input shows the new value; what the user is editing elsewhere stays.

pub mod all_gpus;
mod clocks;
mod fans;
pub mod group_trial_table;
mod in_force;
pub mod stability_panel;
pub mod sweep_panel;
mod temperature_hold;
pub mod trial_view;

use eframe::egui::{self, RichText};

use crate::ui::model::GpuModel;
use crate::ui::tune::in_force::{in_force_box, notice_label};
use crate::ui::tune::trial_view::trial_box;
use crate::ui::widgets::labelled::labelled;
use gputune_core::link::TuneCommand;
use gputune_core::tuning::request::{PowerLimitRequest, TuneRequest};
use gputune_formats::card::{Constraints, Setting};
use gputune_formats::fan_curve::{CurvePoint, FanCurve};
use gputune_formats::temperature_hold::TemperatureHold;
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};
use gputune_formats::units::watts_exact;

/// The GPU clock cap of the undervolt-style preset, MHz, and its offset.
const UNDERVOLT_CAP_MHZ: u32 = 2_520;
const UNDERVOLT_OFFSET_MHZ: i32 = 150;

/// What the card ran when the inputs last followed it.
#[derive(Debug, Clone, PartialEq)]
struct Synced {
    uuid: String,
    in_force: SettingsInForce,
    fan_curve: Option<FanCurve>,
    temperature_hold: Option<TemperatureHold>,
}

/// What the user is editing; sent to the engine only on Apply or Try.
#[derive(Debug, Clone, PartialEq)]
pub struct TunePanel {
    pub power_limit_pct: f64,
    /// The card's own limit while the slider shows it (the slider moves in whole percent, the
    /// card's watts need not be a whole percent): what Apply sends until the slider moves.
    card_power_limit_mw: Option<u32>,
    pub gpu_clock_lock_mhz: (u32, u32),
    pub memory_clock_lock_mhz: (u32, u32),
    pub gpu_clock_offset_mhz: i32,
    pub memory_clock_offset_mhz: i32,
    pub fan_curve_points: Vec<CurvePoint>,
    /// The temperature hold being edited: at or below this many °C, the power limit within
    /// this share of the default (temperature_hold.rs).
    pub hold_max_c: u32,
    pub hold_power_pct: (f64, f64),
    /// How long a "Try" runs before it reverts, seconds.
    pub trial_duration_s: u64,
    synced: Option<Synced>,
    /// The ended trial whose numbers the user closed.
    dismissed_trial: Option<(u32, u64)>,
    /// The ended trials (GPU, session) of the "All GPUs" view the user closed.
    pub(super) dismissed_group: Vec<(u32, u64)>,
}

impl Default for TunePanel {
    fn default() -> TunePanel {
        TunePanel {
            power_limit_pct: 100.0,
            card_power_limit_mw: None,
            gpu_clock_lock_mhz: (210, UNDERVOLT_CAP_MHZ),
            memory_clock_lock_mhz: (405, 10_501),
            gpu_clock_offset_mhz: 0,
            memory_clock_offset_mhz: 0,
            fan_curve_points: FanCurve::default().points().to_vec(),
            hold_max_c: 80,
            hold_power_pct: (60.0, 100.0),
            trial_duration_s: 60,
            synced: None,
            dismissed_trial: None,
            dismissed_group: Vec::new(),
        }
    }
}

/// Watts for a percentage of the default limit, rounded to whole watts as drivers expect (the
/// same conversion `gputune apply --power-limit P%` uses).
pub fn power_limit_mw(constraints: &Constraints, percent: f64) -> Option<u32> {
    TuneRequest::power_limit_mw(PowerLimitRequest::Percent(percent), constraints).ok()
}

impl TunePanel {
    /// Follows the card: a new GPU starts from its own values; on the same GPU, each input
    /// whose setting changed on the card since the last look takes the new value.
    pub(super) fn follow_card(&mut self, gpu: &GpuModel) {
        let uuid = &gpu.info.identity.uuid;
        let constraints = &gpu.info.constraints;
        let same_gpu = self
            .synced
            .as_ref()
            .is_some_and(|synced| &synced.uuid == uuid);
        if !same_gpu {
            *self = TunePanel {
                trial_duration_s: self.trial_duration_s,
                ..TunePanel::default()
            };
            if let Some(range) = constraints.gpu_clock_range {
                self.gpu_clock_lock_mhz = (
                    range.min_mhz,
                    UNDERVOLT_CAP_MHZ.clamp(range.min_mhz, range.max_mhz),
                );
            }
            if let Some(range) = constraints.memory_clock_range {
                self.memory_clock_lock_mhz = (range.min_mhz, range.max_mhz);
            }
        }
        let Some(tuning) = &gpu.tuning else {
            return;
        };
        let before = self.synced.as_ref().filter(|_| same_gpu).cloned();
        let now = &tuning.in_force;
        // A setting changed when it differs from the card as last synced (or nothing was).
        let changed = |differs: fn(&SettingsInForce, &SettingsInForce) -> bool| {
            before
                .as_ref()
                .is_none_or(|before| differs(&before.in_force, now))
        };
        if changed(|before, now| before.power_limit_mw != now.power_limit_mw)
            && let (Some(limit), Some(default)) =
                (now.power_limit_mw, constraints.power_limit_default_mw)
            && default > 0
        {
            self.power_limit_pct = (f64::from(limit) / f64::from(default) * 100.0).round();
            self.card_power_limit_mw = Some(limit);
        }
        if changed(|before, now| before.gpu_clock_lock != now.gpu_clock_lock)
            && let ClockLockInForce::Locked { min_mhz, max_mhz } = now.gpu_clock_lock
        {
            self.gpu_clock_lock_mhz = (min_mhz, max_mhz);
        }
        if changed(|before, now| before.memory_clock_lock != now.memory_clock_lock)
            && let ClockLockInForce::Locked { min_mhz, max_mhz } = now.memory_clock_lock
        {
            self.memory_clock_lock_mhz = (min_mhz, max_mhz);
        }
        if changed(|before, now| before.gpu_clock_offset_mhz != now.gpu_clock_offset_mhz)
            && let Some(offset) = now.gpu_clock_offset_mhz
        {
            self.gpu_clock_offset_mhz = offset;
        }
        if changed(|before, now| before.memory_clock_offset_mhz != now.memory_clock_offset_mhz)
            && let Some(offset) = now.memory_clock_offset_mhz
        {
            self.memory_clock_offset_mhz = offset;
        }
        let curve_changed = before
            .as_ref()
            .is_none_or(|before| before.fan_curve != tuning.fan_curve);
        if curve_changed && let Some(curve) = &tuning.fan_curve {
            self.fan_curve_points = curve.points().to_vec();
        }
        let hold = tuning.temperature_hold.as_ref().map(|status| status.hold);
        let hold_changed = before
            .as_ref()
            .is_none_or(|before| before.temperature_hold != hold);
        if hold_changed && let Some(hold) = hold {
            self.follow_hold(&hold, constraints);
        }
        self.synced = Some(Synced {
            uuid: uuid.clone(),
            in_force: now.clone(),
            fan_curve: tuning.fan_curve.clone(),
            temperature_hold: hold,
        });
    }

    /// Draws the panel for one GPU; returns the commands for the engine. `daemon` says who
    /// makes the changes.
    pub fn tune_ui(&mut self, ui: &mut egui::Ui, gpu: &GpuModel, daemon: bool) -> Vec<TuneCommand> {
        self.follow_card(gpu);
        let mut commands = Vec::new();
        let gpu_index = gpu.info.identity.index;
        let constraints = gpu.info.constraints.clone();
        in_force_box(ui, gpu, daemon);
        if let Some(notice) = &gpu.tune_message {
            notice_label(ui, notice);
        }
        if let Some(trial) = gpu.shown_trial() {
            let key = (trial.gpu_index, trial.session);
            if self.dismissed_trial != Some(key) && trial_box(ui, trial, &mut commands) {
                self.dismissed_trial = Some(key);
            }
        }
        self.trial_duration_row(ui);
        egui::ScrollArea::vertical().show(ui, |ui| {
            ui.columns(2, |columns| {
                self.power_section(&mut columns[0], &constraints, gpu_index, &mut commands);
                self.clock_section(&mut columns[0], &constraints, gpu_index, &mut commands);
                self.fan_section(&mut columns[1], gpu, daemon, &mut commands);
                self.hold_section(&mut columns[1], gpu, daemon, &mut commands);
            });
        });
        commands
    }

    /// How long a "Try" lasts.
    pub(super) fn trial_duration_row(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            labelled(
                ui,
                "Try settings for",
                egui::DragValue::new(&mut self.trial_duration_s)
                    .range(5..=3_600)
                    .suffix(" s"),
            );
            ui.label(RichText::new("then revert unless you keep them.").weak());
        });
    }

    pub(super) fn power_section(
        &mut self,
        ui: &mut egui::Ui,
        constraints: &Constraints,
        gpu_index: u32,
        commands: &mut Vec<TuneCommand>,
    ) {
        ui.heading("Power limit");
        let (Some(min_mw), Some(max_mw), Some(default_mw)) = (
            constraints.power_limit_min_mw,
            constraints.power_limit_max_mw,
            constraints.power_limit_default_mw,
        ) else {
            ui.label("This GPU does not let its power limit be changed.");
            return;
        };
        let percent = |mw: u32| f64::from(mw) / f64::from(default_mw.max(1)) * 100.0;
        let range = percent(min_mw).ceil()..=percent(max_mw).floor();
        ui.spacing_mut().slider_width = 280.0;
        let slider = ui.add(
            egui::Slider::new(&mut self.power_limit_pct, range)
                .fixed_decimals(0)
                .suffix(" %")
                .step_by(1.0)
                .text("of default"),
        );
        if slider.changed() {
            self.card_power_limit_mw = None;
        }
        // The card's own watts until the slider moves; then the percentage's.
        let chosen_mw = self
            .card_power_limit_mw
            .filter(|card_mw| {
                power_limit_mw(constraints, self.power_limit_pct).is_some_and(|shown_mw| {
                    (f64::from(shown_mw) - f64::from(*card_mw)).abs()
                        <= f64::from(default_mw) / 200.0
                })
            })
            .or_else(|| power_limit_mw(constraints, self.power_limit_pct));
        let watts = chosen_mw.map_or("n/a".to_string(), watts_exact);
        ui.label(RichText::new(format!("= {watts}")).strong().size(16.0))
            .labelled_by(slider.id);
        ui.label(
            RichText::new(format!(
                "Default {}, allowed {} to {}. Training runs at the limit, so a lower one trades some speed for power: \"Find the efficient setting\" measures how much on your own job.",
                watts_exact(default_mw),
                watts_exact(min_mw),
                watts_exact(max_mw)
            ))
            .weak(),
        );
        ui.horizontal(|ui| {
            if let Some(power_limit_mw) = chosen_mw {
                apply_or_try(
                    ui,
                    ("Apply power limit", "Try power limit"),
                    vec![Setting::PowerLimit { power_limit_mw }],
                    gpu_index,
                    self.trial_duration_s,
                    commands,
                );
            }
            if ui.button("Back to default").clicked() {
                self.power_limit_pct = 100.0;
                self.card_power_limit_mw = None;
                commands.push(TuneCommand::Apply {
                    gpu_index,
                    settings: vec![Setting::PowerLimit {
                        power_limit_mw: default_mw,
                    }],
                });
            }
        });
        ui.add_space(12.0);
    }
}

/// An apply button and its "Try" twin for the same settings.
fn apply_or_try(
    ui: &mut egui::Ui,
    (label, try_label): (&str, &str),
    settings: Vec<Setting>,
    gpu_index: u32,
    duration_s: u64,
    commands: &mut Vec<TuneCommand>,
) {
    if ui.button(label).clicked() {
        commands.push(TuneCommand::Apply {
            gpu_index,
            settings: settings.clone(),
        });
    }
    if ui
        .button(try_label)
        .on_hover_text(format!(
            "{label} for {duration_s} s, then revert unless kept"
        ))
        .clicked()
    {
        commands.push(TuneCommand::StartTrial {
            gpu_index,
            settings,
            duration_s,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_core::device::sim::{CardSpec, sim_constraints};

    #[test]
    fn percent_of_default_becomes_whole_watts() {
        let constraints = sim_constraints(&CardSpec::rtx4090());
        assert_eq!(power_limit_mw(&constraints, 70.0), Some(315_000));
        assert_eq!(power_limit_mw(&constraints, 66.6), Some(300_000));
        assert_eq!(power_limit_mw(&Constraints::default(), 70.0), None);
    }
}
