//! The tuning panel: power limit as a percentage of the default (with watts), clock locks and
//! offsets with an undervolt-style preset, and a fan curve. It only builds `TuneCommand`s; the
//! device-owner thread validates (through `device::gate`) and writes.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{HLine, Legend, Line, Plot, Points};

use crate::device::{Constraints, Setting};
use crate::tuning::control::TuneCommand;
use crate::tuning::fan_curve::{CurvePoint, FanCurve};
use crate::tuning::request::{PowerLimitRequest, TuneRequest};
use crate::ui::model::GpuModel;
use crate::ui::trial_view::trial_box;
use crate::ui::widgets::banner::ERROR_TEXT;
use crate::units::watts_exact;

/// The GPU clock cap of the undervolt-style preset, MHz, and its offset.
const UNDERVOLT_CAP_MHZ: u32 = 2_520;
const UNDERVOLT_OFFSET_MHZ: i32 = 150;

/// What the user is editing; sent to the device thread only on Apply.
#[derive(Debug, Clone, PartialEq)]
pub struct TunePanel {
    pub power_limit_pct: f64,
    pub gpu_clock_lock_mhz: (u32, u32),
    pub memory_clock_lock_mhz: (u32, u32),
    pub gpu_clock_offset_mhz: i32,
    pub memory_clock_offset_mhz: i32,
    pub fan_curve_points: Vec<CurvePoint>,
    /// How long a "Try" runs before it reverts, seconds.
    pub trial_duration_s: u64,
    /// What this window has applied (or is trying) on the card, for "save as profile": NVML
    /// cannot read clock locks back, so they are remembered here.
    pub applied: AppliedSettings,
    /// The GPU the inputs were last set up for, so switching GPUs starts from its defaults.
    initialized_for: Option<String>,
}

impl Default for TunePanel {
    fn default() -> TunePanel {
        TunePanel {
            power_limit_pct: 100.0,
            gpu_clock_lock_mhz: (210, UNDERVOLT_CAP_MHZ),
            memory_clock_lock_mhz: (405, 10_501),
            gpu_clock_offset_mhz: 0,
            memory_clock_offset_mhz: 0,
            fan_curve_points: FanCurve::default().points().to_vec(),
            trial_duration_s: 60,
            applied: AppliedSettings::default(),
            initialized_for: None,
        }
    }
}

/// Settings the window has sent to the card, as a profile would record them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AppliedSettings {
    pub gpu_clock_lock_mhz: Option<(u32, u32)>,
    pub memory_clock_lock_mhz: Option<(u32, u32)>,
    pub gpu_clock_offset_mhz: Option<i32>,
    pub memory_clock_offset_mhz: Option<i32>,
    pub fan_curve: Option<FanCurve>,
}

impl AppliedSettings {
    /// Notes what a command sent to the device thread will set.
    pub fn record(&mut self, command: &TuneCommand) {
        let settings = match command {
            TuneCommand::Apply { settings, .. } | TuneCommand::StartTrial { settings, .. } => {
                settings
            }
            TuneCommand::SetFanCurve { curve, .. } => {
                self.fan_curve = curve.clone();
                return;
            }
            TuneCommand::KeepTrial | TuneCommand::RevertTrial => return,
        };
        for setting in settings {
            match *setting {
                Setting::LockGpuClocks { min_mhz, max_mhz } => {
                    self.gpu_clock_lock_mhz = Some((min_mhz, max_mhz))
                }
                Setting::ResetGpuClocks => self.gpu_clock_lock_mhz = None,
                Setting::LockMemoryClocks { min_mhz, max_mhz } => {
                    self.memory_clock_lock_mhz = Some((min_mhz, max_mhz))
                }
                Setting::ResetMemoryClocks => self.memory_clock_lock_mhz = None,
                Setting::GpuClockOffset { offset_mhz } => {
                    self.gpu_clock_offset_mhz = Some(offset_mhz)
                }
                Setting::MemoryClockOffset { offset_mhz } => {
                    self.memory_clock_offset_mhz = Some(offset_mhz)
                }
                Setting::PowerLimit { .. }
                | Setting::FanSpeed { .. }
                | Setting::FanAutomatic { .. } => {}
            }
        }
    }
}

/// Watts for a percentage of the default limit, rounded to whole watts as drivers expect (the
/// same conversion `gputune apply --power-limit P%` uses).
pub fn power_limit_mw(constraints: &Constraints, percent: f64) -> Option<u32> {
    TuneRequest::power_limit_mw(PowerLimitRequest::Percent(percent), constraints).ok()
}

impl TunePanel {
    fn initialize_for(&mut self, gpu: &GpuModel) {
        let uuid = &gpu.info.identity.uuid;
        if self.initialized_for.as_ref() == Some(uuid) {
            return;
        }
        let constraints = &gpu.info.constraints;
        *self = TunePanel {
            initialized_for: Some(uuid.clone()),
            ..TunePanel::default()
        };
        if let (Some(limit), Some(default)) = (
            gpu.latest
                .as_ref()
                .and_then(|latest| latest.as_ref().ok())
                .and_then(|reading| reading.power_limit_mw),
            constraints.power_limit_default_mw,
        ) && default > 0
        {
            self.power_limit_pct = (f64::from(limit) / f64::from(default) * 100.0).round();
        }
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

    /// Draws the panel for one GPU; returns the commands to send to the device thread, and
    /// settings to retry as administrator when the user asks.
    pub fn tune_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
    ) -> (Vec<TuneCommand>, Option<Vec<Setting>>) {
        self.initialize_for(gpu);
        let mut commands = Vec::new();
        let gpu_index = gpu.info.identity.index;
        let constraints = gpu.info.constraints.clone();
        if let Some((message, is_error)) = &gpu.tune_message {
            let text = RichText::new(message.as_str());
            ui.label(if *is_error {
                text.color(ERROR_TEXT)
            } else {
                text.color(Color32::from_rgb(0x5c, 0xd6, 0x7a))
            });
        }
        let mut elevate = None;
        if let Some(settings) = &gpu.needs_administrator {
            ui.horizontal(|ui| {
                ui.label("Changing GPU settings needs administrator rights.");
                if ui
                    .button("Apply as administrator")
                    .on_hover_text("Runs only `gputune apply ...` for these settings through pkexec; the window stays unprivileged")
                    .clicked()
                {
                    elevate = Some(settings.clone());
                }
            });
        }
        if let Some(trial) = &gpu.trial {
            trial_box(ui, trial, &mut commands);
        }
        ui.horizontal(|ui| {
            let label = ui.label("Try settings for");
            ui.add(
                egui::DragValue::new(&mut self.trial_duration_s)
                    .range(5..=3_600)
                    .suffix(" s"),
            )
            .labelled_by(label.id);
            ui.label(RichText::new("then revert unless you keep them.").weak());
        });
        egui::ScrollArea::vertical().show(ui, |ui| {
            ui.columns(2, |columns| {
                self.power_section(&mut columns[0], &constraints, gpu_index, &mut commands);
                self.clock_section(&mut columns[0], &constraints, gpu_index, &mut commands);
                self.fan_section(&mut columns[1], &constraints, gpu_index, &mut commands);
            });
        });
        (commands, elevate)
    }

    fn power_section(
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
        let watts = power_limit_mw(constraints, self.power_limit_pct)
            .map_or("n/a".to_string(), watts_exact);
        ui.label(RichText::new(format!("= {watts}")).strong().size(16.0))
            .labelled_by(slider.id);
        ui.label(
            RichText::new(format!(
                "Default {}, allowed {} to {}. Training loses little speed down to about 70 %.",
                watts_exact(default_mw),
                watts_exact(min_mw),
                watts_exact(max_mw)
            ))
            .weak(),
        );
        ui.horizontal(|ui| {
            if ui.button("Apply power limit").clicked()
                && let Some(power_limit_mw) = power_limit_mw(constraints, self.power_limit_pct)
            {
                commands.push(TuneCommand::Apply {
                    gpu_index,
                    settings: vec![Setting::PowerLimit { power_limit_mw }],
                });
            }
            if ui.button("Try power limit").clicked()
                && let Some(power_limit_mw) = power_limit_mw(constraints, self.power_limit_pct)
            {
                commands.push(TuneCommand::StartTrial {
                    gpu_index,
                    settings: vec![Setting::PowerLimit { power_limit_mw }],
                    duration_s: self.trial_duration_s,
                });
            }
            if ui.button("Back to default").clicked() {
                self.power_limit_pct = 100.0;
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

    fn clock_section(
        &mut self,
        ui: &mut egui::Ui,
        constraints: &Constraints,
        gpu_index: u32,
        commands: &mut Vec<TuneCommand>,
    ) {
        ui.heading("Clocks");
        if let Some(range) = constraints.gpu_clock_range {
            ui.horizontal(|ui| {
                let label = ui.label("GPU clock lock");
                ui.add(
                    egui::DragValue::new(&mut self.gpu_clock_lock_mhz.0)
                        .range(range.min_mhz..=range.max_mhz)
                        .suffix(" MHz"),
                )
                .labelled_by(label.id);
                ui.label("to");
                ui.add(
                    egui::DragValue::new(&mut self.gpu_clock_lock_mhz.1)
                        .range(range.min_mhz..=range.max_mhz)
                        .suffix(" MHz"),
                )
                .labelled_by(label.id);
            });
            ui.horizontal(|ui| {
                let lock = vec![Setting::LockGpuClocks {
                    min_mhz: self.gpu_clock_lock_mhz.0,
                    max_mhz: self.gpu_clock_lock_mhz.1,
                }];
                apply_or_try(
                    ui,
                    "Lock GPU clocks",
                    lock,
                    gpu_index,
                    self.trial_duration_s,
                    commands,
                );
                if ui.button("Reset GPU clocks").clicked() {
                    commands.push(TuneCommand::Apply {
                        gpu_index,
                        settings: vec![Setting::ResetGpuClocks],
                    });
                }
            });
        }
        if let Some(range) = constraints.memory_clock_range {
            ui.horizontal(|ui| {
                let label = ui.label("Memory clock lock");
                ui.add(
                    egui::DragValue::new(&mut self.memory_clock_lock_mhz.0)
                        .range(range.min_mhz..=range.max_mhz)
                        .suffix(" MHz"),
                )
                .labelled_by(label.id);
                ui.label("to");
                ui.add(
                    egui::DragValue::new(&mut self.memory_clock_lock_mhz.1)
                        .range(range.min_mhz..=range.max_mhz)
                        .suffix(" MHz"),
                )
                .labelled_by(label.id);
            });
            ui.horizontal(|ui| {
                let lock = vec![Setting::LockMemoryClocks {
                    min_mhz: self.memory_clock_lock_mhz.0,
                    max_mhz: self.memory_clock_lock_mhz.1,
                }];
                apply_or_try(
                    ui,
                    "Lock memory clocks",
                    lock,
                    gpu_index,
                    self.trial_duration_s,
                    commands,
                );
                if ui.button("Reset memory clocks").clicked() {
                    commands.push(TuneCommand::Apply {
                        gpu_index,
                        settings: vec![Setting::ResetMemoryClocks],
                    });
                }
            });
        }
        ui.add_space(8.0);
        ui.label(RichText::new("Clock offsets").strong());
        match (
            constraints.gpu_clock_offset_range,
            constraints.memory_clock_offset_range,
        ) {
            (Some(gpu_range), memory_range) => {
                ui.add(
                    egui::Slider::new(
                        &mut self.gpu_clock_offset_mhz,
                        gpu_range.min_mhz..=gpu_range.max_mhz,
                    )
                    .suffix(" MHz")
                    .text("GPU offset"),
                );
                if let Some(memory_range) = memory_range {
                    ui.add(
                        egui::Slider::new(
                            &mut self.memory_clock_offset_mhz,
                            memory_range.min_mhz..=memory_range.max_mhz,
                        )
                        .suffix(" MHz")
                        .text("memory offset"),
                    );
                }
                ui.label(
                    RichText::new(
                        "Offsets move the voltage/frequency curve and snap to the driver's 15 MHz steps. On an RTX 4090 \
                         the memory offset counts double data rate: +1000 raises the memory clock NVML reports by 500 MHz.",
                    )
                    .weak(),
                );
                ui.horizontal(|ui| {
                    let mut offsets = vec![Setting::GpuClockOffset { offset_mhz: self.gpu_clock_offset_mhz }];
                    if memory_range.is_some() {
                        offsets.push(Setting::MemoryClockOffset { offset_mhz: self.memory_clock_offset_mhz });
                    }
                    apply_or_try(ui, "Apply offsets", offsets, gpu_index, self.trial_duration_s, commands);
                    if let Some(range) = constraints.gpu_clock_range {
                        let cap = UNDERVOLT_CAP_MHZ.clamp(range.min_mhz, range.max_mhz);
                        let preset = ui
                            .button(format!("Undervolt-style: cap {cap} MHz, +{UNDERVOLT_OFFSET_MHZ} MHz"))
                            .on_hover_text(
                                "Capping the clock and adding an offset makes the card run that clock at the lower voltage \
                                 the curve gives a slower clock, so it draws less power for the same speed.",
                            );
                        let offset_mhz = UNDERVOLT_OFFSET_MHZ.clamp(gpu_range.min_mhz, gpu_range.max_mhz);
                        let undervolt = vec![
                            Setting::LockGpuClocks { min_mhz: range.min_mhz, max_mhz: cap },
                            Setting::GpuClockOffset { offset_mhz },
                        ];
                        let try_preset = ui.button("Try it");
                        if preset.clicked() || try_preset.clicked() {
                            self.gpu_clock_lock_mhz = (range.min_mhz, cap);
                            self.gpu_clock_offset_mhz = offset_mhz;
                        }
                        if preset.clicked() {
                            commands.push(TuneCommand::Apply { gpu_index, settings: undervolt.clone() });
                        }
                        if try_preset.clicked() {
                            commands.push(TuneCommand::StartTrial {
                                gpu_index,
                                settings: undervolt,
                                duration_s: self.trial_duration_s,
                            });
                        }
                    }
                });
                ui.label(
                    RichText::new(
                        "Undervolt-style: a locked maximum clock plus a positive offset runs the capped clock at a lower \
                         voltage, which saves power and heat for the same speed.",
                    )
                    .weak(),
                );
            }
            (None, _) => {
                ui.label("Not supported on this GPU or driver (they need a consumer card and driver 555 or newer).");
            }
        }
    }

    fn fan_section(
        &mut self,
        ui: &mut egui::Ui,
        constraints: &Constraints,
        gpu_index: u32,
        commands: &mut Vec<TuneCommand>,
    ) {
        ui.heading("Fan curve");
        let Some(range) = constraints
            .fan_speed_range
            .filter(|_| constraints.fan_count > 0)
        else {
            ui.label(
                "This GPU has no fans to control (datacenter cards are cooled by the chassis).",
            );
            return;
        };
        ui.label(
            RichText::new(format!(
                "Temperature to fan speed. This card accepts {}-{} %: lower points run at {} %. The curve is followed by \
                 gputune while it runs; when it exits, the fans go back to the driver.",
                range.min_pct, range.max_pct, range.min_pct
            ))
            .weak(),
        );
        egui::Grid::new(("fan-curve", gpu_index))
            .num_columns(3)
            .show(ui, |ui| {
                ui.label(RichText::new("°C").weak());
                ui.label(RichText::new("%").weak());
                ui.end_row();
                for (index, point) in self.fan_curve_points.iter_mut().enumerate() {
                    let label = ui.label(format!("Point {}", index + 1));
                    ui.add(
                        egui::DragValue::new(&mut point.temperature_c)
                            .range(0.0..=110.0)
                            .suffix(" °C"),
                    )
                    .labelled_by(label.id);
                    ui.add(
                        egui::DragValue::new(&mut point.speed_pct)
                            .range(0.0..=100.0)
                            .suffix(" %"),
                    )
                    .labelled_by(label.id);
                    ui.end_row();
                }
            });
        let curve = FanCurve::new(self.fan_curve_points.clone(), 3.0);
        let plotted: Vec<[f64; 2]> = match &curve {
            Ok(curve) => (0..=100)
                .map(|temperature| {
                    let temperature = f64::from(temperature);
                    [
                        temperature,
                        f64::from(curve.target_pct(temperature, None, range)),
                    ]
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        let points: Vec<[f64; 2]> = self
            .fan_curve_points
            .iter()
            .map(|point| [point.temperature_c, point.speed_pct])
            .collect();
        Plot::new(("fan-curve-plot", gpu_index))
            .height(200.0)
            .include_x(0.0)
            .include_x(100.0)
            .include_y(0.0)
            .include_y(100.0)
            .x_axis_label("°C")
            .y_axis_label("fan %")
            .legend(Legend::default().position(egui_plot::Corner::RightBottom))
            .allow_drag(false)
            .allow_zoom(false)
            .allow_scroll(false)
            .show(ui, |plot_ui| {
                plot_ui.line(
                    Line::new("Speed set (clamped to the card)", plotted)
                        .color(Color32::from_rgb(0x4d, 0xd0, 0xe1))
                        .width(2.0),
                );
                plot_ui.points(
                    Points::new("Your points", points)
                        .radius(4.0)
                        .color(Color32::WHITE),
                );
                plot_ui.hline(
                    HLine::new("Card minimum", f64::from(range.min_pct)).color(Color32::GRAY),
                );
            });
        match curve {
            Ok(curve) => {
                ui.horizontal(|ui| {
                    if ui.button("Follow this curve").clicked() {
                        commands.push(TuneCommand::SetFanCurve {
                            gpu_index,
                            curve: Some(curve),
                        });
                    }
                    if ui
                        .button("Automatic")
                        .on_hover_text("Hand the fans back to the driver")
                        .clicked()
                    {
                        commands.push(TuneCommand::SetFanCurve {
                            gpu_index,
                            curve: None,
                        });
                    }
                });
            }
            Err(error) => {
                ui.label(RichText::new(error.to_string()).color(ERROR_TEXT));
            }
        }
    }
}

/// An apply button and its "Try" twin for the same settings.
fn apply_or_try(
    ui: &mut egui::Ui,
    label: &str,
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
        .button("Try")
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
    use crate::device::sim::{CardSpec, sim_constraints};

    #[test]
    fn percent_of_default_becomes_whole_watts() {
        let constraints = sim_constraints(&CardSpec::rtx4090());
        assert_eq!(power_limit_mw(&constraints, 70.0), Some(315_000));
        assert_eq!(power_limit_mw(&constraints, 66.6), Some(300_000));
        assert_eq!(power_limit_mw(&Constraints::default(), 70.0), None);
    }
}
