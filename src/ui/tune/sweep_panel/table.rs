//! The table of measured settings: throughput, power, energy per unit, speed and energy
//! against the first setting, clocks, temperature and throttling. Over several cards swept
//! together: the box's power, the slowest and the hottest card named, each card's watts.

use eframe::egui::{self, RichText};

use super::RECOMMENDED;
use crate::ui::style::ERROR_TEXT;
use gputune_core::sweep::cards::{hottest, slowest};
use gputune_core::sweep::report::{comparisons_of, signed_pct, significant, throttle_summary};
use gputune_core::sweep::runner::SweepView;

/// One row per measured setting, the recommended one highlighted.
pub(super) fn results_grid(
    ui: &mut egui::Ui,
    view: &SweepView,
    recommended: Option<usize>,
    unit: &str,
    gpu_index: u32,
) {
    let comparisons = comparisons_of(&view.results);
    let several = view.gpu_indices.len() > 1;
    egui::ScrollArea::vertical()
        .id_salt(("sweep-results", gpu_index))
        .max_height(170.0)
        .show(ui, |ui| {
            egui::Grid::new(("sweep-grid", gpu_index))
                .striped(true)
                .spacing([12.0, 2.0])
                .show(ui, |ui| {
                    let (power, clock, temperature) = if several {
                        ("Box power", "Slowest", "Hottest")
                    } else {
                        ("Power", "SM clock", "Temp")
                    };
                    let unit_per_s = format!("{unit}/s");
                    let joules = format!("J/{unit}");
                    let mut heads = vec![
                        "Setting",
                        &unit_per_s,
                        power,
                        &joules,
                        "Speed",
                        "Energy",
                        clock,
                        temperature,
                    ];
                    if several {
                        heads.push("W by card");
                    }
                    heads.push("Throttled");
                    for head in heads {
                        ui.label(RichText::new(head).strong());
                    }
                    ui.end_row();
                    let dash = || "—".to_string();
                    for (index, result) in view.results.iter().enumerate() {
                        let comparison = comparisons.get(index).copied().flatten();
                        let mut label = RichText::new(&result.step.label);
                        if Some(index) == recommended {
                            label = label.strong().color(RECOMMENDED);
                        } else if result.unstable.is_some() {
                            label = label.color(ERROR_TEXT);
                        }
                        let row = ui.label(label);
                        if let Some(why) = result.unstable.as_ref().or(result.noisy.as_ref()) {
                            row.on_hover_text(why);
                        }
                        ui.label(result.throughput.map_or_else(dash, |throughput| {
                            format!(
                                "{:.3}{}",
                                throughput.units_per_s,
                                throughput
                                    .spread_pct
                                    .map_or_else(String::new, |spread| format!(" ±{spread:.1} %"))
                            )
                        }));
                        ui.label(
                            result
                                .average_power_w
                                .map_or_else(dash, |watts| format!("{watts:.0} W")),
                        );
                        ui.label(result.energy_per_unit_j.map_or_else(dash, significant));
                        ui.label(
                            comparison.map_or_else(dash, |comparison| {
                                signed_pct(-comparison.slowdown_pct)
                            }),
                        );
                        ui.label(comparison.map_or_else(dash, |comparison| {
                            signed_pct(-comparison.energy_saved_pct)
                        }));
                        let named = |text: String, card: Option<u32>| match card {
                            Some(gpu) if several => format!("{text} GPU {gpu}"),
                            _ => text,
                        };
                        ui.label(named(
                            result
                                .stats
                                .average_sm_clock_mhz
                                .map_or_else(dash, |mhz| format!("{mhz:.0} MHz")),
                            slowest(&result.cards).map(|card| card.gpu_index),
                        ));
                        ui.label(named(
                            result
                                .stats
                                .average_temperature_c
                                .map_or_else(dash, |celsius| format!("{celsius:.0} °C")),
                            hottest(&result.cards).map(|card| card.gpu_index),
                        ));
                        if several {
                            watts_by_card(ui, result, &view.gpu_indices);
                        }
                        ui.label(if result.measured_s > 0.0 {
                            throttle_summary(result)
                        } else {
                            dash()
                        });
                        ui.end_row();
                    }
                });
        });
}

/// Each card's average power over a step, in the sweep's order of cards.
fn watts_by_card(
    ui: &mut egui::Ui,
    result: &gputune_formats::reports::sweep_step::StepResult,
    gpu_indices: &[u32],
) {
    let watts: Vec<String> = result
        .cards
        .iter()
        .map(|card| {
            card.stats
                .average_power_w
                .map_or_else(|| "—".to_string(), |watts| format!("{watts:.0}"))
        })
        .collect();
    let order: Vec<String> = gpu_indices.iter().map(u32::to_string).collect();
    ui.label(watts.join(" ")).on_hover_text(format!(
        "Each card's average power: GPU {}, in that order.",
        order.join(", ")
    ));
}
