//! The Tune tab's fan curve: the points, the curve drawn with the card's temperature and fan
//! speed on it, and following it: through the daemon a curve the daemon keeps (it outlives the
//! window, until cleared); without one, a session of the window's that ends when it closes.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{HLine, Legend, Line, Plot, Points, VLine};

use crate::ui::model::GpuModel;
use crate::ui::style::{ERROR_TEXT, GOOD_TEXT, WARNING_TEXT};
use crate::ui::tune::TunePanel;
use gputune_core::link::TuneCommand;
use gputune_core::tuning::engine::SessionPurpose;
use gputune_core::tuning::fan_curve::FanCurve;
use gputune_core::tuning::in_force::Hold;

impl TunePanel {
    pub(super) fn fan_section(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        daemon: bool,
        commands: &mut Vec<TuneCommand>,
    ) {
        let constraints = &gpu.info.constraints;
        let gpu_index = gpu.info.identity.index;
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
        let following = gpu
            .tuning
            .as_ref()
            .and_then(|tuning| tuning.fan_curve.as_ref());
        let safety = gpu
            .tuning
            .as_ref()
            .is_some_and(|tuning| tuning.fan_safety_engaged);
        if safety {
            ui.label(
                RichText::new(
                    "The card neared its slowdown temperature: its fans are with the driver until it cools.",
                )
                .color(WARNING_TEXT),
            );
        } else if following.is_some() {
            let holder = gpu.tuning.as_ref().and_then(|tuning| {
                tuning
                    .holders
                    .iter()
                    .find(|holder| holder.controls.contains(&Hold::Fans))
            });
            let text = match holder {
                Some(holder) if holder.purpose == SessionPurpose::KeptFanCurve => format!(
                    "The fan curve is kept by the daemon (set by {}); clear it to hand the fans back.",
                    holder.by
                ),
                Some(_) if !daemon => {
                    "The fan curve is followed while this window is open: no gputune daemon keeps it."
                        .to_string()
                }
                Some(holder) => format!("{} follows a fan curve on this card.", holder.by),
                None => "gputune follows a fan curve on this card.".to_string(),
            };
            ui.label(RichText::new(text).color(GOOD_TEXT));
        }
        let lasts = if daemon {
            "The gputune daemon keeps the curve you follow, also after this window closes, until you clear it."
        } else {
            "Followed while this window is open (no gputune daemon keeps it): when the window closes, the fans go back to what they were."
        };
        ui.label(
            RichText::new(format!(
                "Temperature to fan speed; the curve must rise. This card accepts {}-{} %: lower points run at {} %. {lasts}",
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
        let latest = gpu.latest.as_ref().and_then(|latest| latest.as_ref().ok());
        let now = latest.and_then(|reading| {
            let temperature = f64::from(reading.temperature_c?);
            let fans: Vec<u32> = reading
                .fans
                .iter()
                .flatten()
                .filter_map(|fan| fan.speed_pct)
                .collect();
            let speed =
                (!fans.is_empty()).then(|| f64::from(fans.iter().sum::<u32>()) / fans.len() as f64);
            Some((temperature, speed))
        });
        Plot::new(("fan-curve-plot", gpu_index))
            .height(200.0)
            .include_x(0.0)
            .include_x(100.0)
            .include_y(0.0)
            .include_y(100.0)
            .x_axis_label("°C")
            .y_axis_label("fan %")
            // Top left: the curve is low there, and the card's own point stays in view.
            .legend(Legend::default().position(egui_plot::Corner::LeftTop))
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
                if let Some((temperature, speed)) = now {
                    plot_ui.vline(
                        VLine::new(format!("Now {temperature:.0} °C"), temperature)
                            .color(WARNING_TEXT),
                    );
                    if let Some(speed) = speed {
                        plot_ui.points(
                            Points::new(
                                format!("Fans now {speed:.0} %"),
                                vec![[temperature, speed]],
                            )
                            .radius(5.0)
                            .color(WARNING_TEXT),
                        );
                    }
                }
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
                    let stop = if daemon { "Clear the kept curve" } else { "Stop following" };
                    if following.is_some()
                        && ui
                            .button(stop)
                            .on_hover_text("The fans go back to what they were before the curve (usually the driver's own)")
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
