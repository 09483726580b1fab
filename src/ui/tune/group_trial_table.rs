//! The numbers of a trial over every card ("All N GPUs" in the Tune tab) once it has ended: one
//! row per card with before -> during for the readings the single-card table leads with, and a
//! row for the whole box (sums of power and energy, means of clocks and fans, the hottest peak).

use eframe::egui::{self, RichText};

use gputune_core::tuning::engine::TrialStatus;
use gputune_core::tuning::stats::TrialStats;

/// How a column adds up over the box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Total {
    Sum,
    /// The mean of the cards' values (each card counts once).
    Mean,
    Max,
}

/// One column of the table: a reading of `TrialStats`, its unit and how it adds up.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub label: &'static str,
    pub unit: &'static str,
    pub decimals: usize,
    pub total: Total,
    /// The change as a difference in the unit (temperatures, fan speeds), else in %.
    pub as_difference: bool,
    pub value: fn(&TrialStats) -> Option<f64>,
}

/// The columns, in the single-card table's order: power, SM clock, peak temperature, fan speed
/// (only when a card reports one) and energy per minute.
pub fn columns(trials: &[&TrialStatus]) -> Vec<Column> {
    let mut columns = vec![
        Column {
            label: "Power, average",
            unit: "W",
            decimals: 0,
            total: Total::Sum,
            as_difference: false,
            value: |stats| stats.average_power_w,
        },
        Column {
            label: "SM clock, average",
            unit: "MHz",
            decimals: 0,
            total: Total::Mean,
            as_difference: false,
            value: |stats| stats.average_sm_clock_mhz,
        },
        Column {
            label: "Temperature, peak",
            unit: "°C",
            decimals: 0,
            total: Total::Max,
            as_difference: true,
            value: |stats| stats.peak_temperature_c.map(f64::from),
        },
    ];
    let fans = trials.iter().any(|trial| {
        trial.baseline.average_fan_speed_pct.is_some()
            || trial.during.average_fan_speed_pct.is_some()
    });
    if fans {
        columns.push(Column {
            label: "Fan speed, average",
            unit: "%",
            decimals: 0,
            total: Total::Mean,
            as_difference: true,
            value: |stats| stats.average_fan_speed_pct,
        });
    }
    columns.push(Column {
        label: "Energy per minute",
        unit: "Wh",
        decimals: 2,
        total: Total::Sum,
        as_difference: false,
        value: |stats| stats.energy_wh_per_min,
    });
    columns
}

/// "431 -> 315 W (-26.9 %)", or "n/a" when either side is missing.
pub fn cell(column: &Column, before: Option<f64>, during: Option<f64>) -> String {
    let (Some(before), Some(during)) = (before, during) else {
        return "n/a".to_string();
    };
    let decimals = column.decimals;
    let unit = column.unit;
    let change = if column.as_difference {
        // A difference of percentages is in points, not in percent.
        let unit = if unit == "%" { "points" } else { unit };
        format!("{:+.decimals$} {unit}", during - before)
    } else if before != 0.0 {
        format!("{:+.1} %", (during - before) / before * 100.0)
    } else {
        String::new()
    };
    let values = format!("{before:.decimals$} -> {during:.decimals$} {unit}");
    if change.is_empty() {
        values
    } else {
        format!("{values} ({change})")
    }
}

/// The box's before and during for `column`, over the cards that have both (so the two sides
/// add up the same cards), with how many those are.
pub fn box_total(column: &Column, trials: &[&TrialStatus]) -> (Option<(f64, f64)>, usize) {
    let pairs: Vec<(f64, f64)> = trials
        .iter()
        .filter_map(|trial| (column.value)(&trial.baseline).zip((column.value)(&trial.during)))
        .collect();
    if pairs.is_empty() {
        return (None, 0);
    }
    let count = pairs.len();
    let fold = |side: fn(&(f64, f64)) -> f64| {
        let values = pairs.iter().map(side);
        match column.total {
            Total::Sum => values.sum::<f64>(),
            Total::Mean => values.sum::<f64>() / count as f64,
            Total::Max => values.fold(f64::MIN, f64::max),
        }
    };
    (Some((fold(|pair| pair.0), fold(|pair| pair.1))), count)
}

/// Whether the ended group trial has numbers to show: a trial that could not start on any card
/// has only its message.
pub fn has_numbers(trials: &[&TrialStatus]) -> bool {
    trials
        .iter()
        .any(|trial| trial.baseline.samples > 0 || trial.during.samples > 0)
        && !trials
            .iter()
            .all(|trial| trial.failed && trial.during.samples == 0)
}

/// The table: a row per card of `trials` (in the order given), then the box's row, and a line
/// that says what each of the box's numbers is.
pub fn group_trial_table(ui: &mut egui::Ui, trials: &[&TrialStatus]) {
    let columns = columns(trials);
    egui::Grid::new("all-gpus-trial-numbers")
        .striped(true)
        .num_columns(columns.len() + 1)
        .spacing([16.0, 2.0])
        .show(ui, |ui| {
            ui.label("");
            for column in &columns {
                ui.label(RichText::new(column.label).weak());
            }
            ui.end_row();
            for trial in trials {
                ui.label(format!("GPU {}", trial.gpu_index));
                for column in &columns {
                    ui.label(cell(
                        column,
                        (column.value)(&trial.baseline),
                        (column.value)(&trial.during),
                    ));
                }
                ui.end_row();
            }
            ui.label(RichText::new("Box").strong());
            for column in &columns {
                let (total, count) = box_total(column, trials);
                let mut text = match total {
                    Some((before, during)) => cell(column, Some(before), Some(during)),
                    None => "n/a".to_string(),
                };
                if count > 0 && count < trials.len() {
                    text.push_str(&format!(", {count} cards"));
                }
                ui.label(RichText::new(text).strong());
            }
            ui.end_row();
        });
    ui.label(
        RichText::new(
            "Box: power and energy per minute are the sums over the cards, the SM clock and fan speed the means of the cards, the temperature the hottest card's peak.",
        )
        .weak(),
    );
}
