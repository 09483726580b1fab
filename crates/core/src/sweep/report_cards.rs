//! The columns a sweep over several cards adds to its table and CSV: the slowest card (the one
//! a data-parallel job waits for), the hottest, and each card's power. A sweep of one card
//! adds none, so its table and CSV are as they always were.

use crate::sweep::cards::{hottest, slowest, thermal_throttle_s};
use gputune_formats::reports::sweep::SweepOutcome;
use gputune_formats::reports::sweep_step::StepResult;

/// The table's head over several cards: the SM clock and temperature columns name the slowest
/// and the hottest card, and each card's power follows.
pub fn box_head(head: &mut Vec<String>) {
    for cell in head.iter_mut() {
        match cell.as_str() {
            "Power" => *cell = "Box power".to_string(),
            "SM clock" => *cell = "Slowest".to_string(),
            "Temp" => *cell = "Hottest".to_string(),
            _ => {}
        }
    }
    // Before "Throttled", the last column, which stays last (it is left-aligned).
    let before_last = head.len().saturating_sub(1);
    head.insert(before_last, "W by card".to_string());
}

/// A row's cells over several cards (after `sweep::report`'s own): the slowest and hottest
/// card named beside their clock and temperature, each card's watts before "Throttled".
pub fn box_cells(cells: &mut Vec<String>, result: &StepResult) {
    let columns = cells.len();
    if columns < 4 {
        return;
    }
    // SM clock, Temp and Fan are the fourth, third and second last of the row.
    if let Some(card) = slowest(&result.cards) {
        cells[columns - 4] = format!("{} GPU {}", cells[columns - 4], card.gpu_index);
    }
    if let Some(card) = hottest(&result.cards) {
        cells[columns - 3] = format!("{} GPU {}", cells[columns - 3], card.gpu_index);
    }
    let watts: Vec<String> = result
        .cards
        .iter()
        .map(|card| {
            card.stats
                .average_power_w
                .map_or_else(|| "—".to_string(), |watts| format!("{watts:.0}"))
        })
        .collect();
    let watts = if watts.is_empty() {
        "—".to_string()
    } else {
        watts.join(" ")
    };
    cells.insert(columns - 1, watts);
}

/// The line under a box's table that says what its columns are.
pub fn box_note(outcome: &SweepOutcome) -> String {
    let order: Vec<String> = outcome
        .cards
        .iter()
        .map(|card| card.gpu_index.to_string())
        .collect();
    format!(
        "{} cards held together at each setting: the job's throughput once, the box's power and energy summed; Slowest is the card with the lowest SM clock (the one a data-parallel job waits for), Hottest the warmest; W by card lists GPU {} in that order.\n",
        outcome.cards.len(),
        order.join(", ")
    )
}

/// The CSV's extra columns over several cards.
pub fn box_csv_head(outcome: &SweepOutcome) -> Vec<String> {
    if outcome.cards.is_empty() {
        return Vec::new();
    }
    let mut head: Vec<String> = [
        "slowest_gpu",
        "slowest_sm_clock_mhz",
        "hottest_gpu",
        "hottest_temperature_c",
    ]
    .iter()
    .map(|name| name.to_string())
    .collect();
    for card in &outcome.cards {
        let gpu = card.gpu_index;
        head.extend([
            format!("gpu{gpu}_power_w"),
            format!("gpu{gpu}_sm_clock_mhz"),
            format!("gpu{gpu}_temperature_c"),
            format!("gpu{gpu}_thermal_throttle_s"),
        ]);
    }
    head
}

/// A row's extra CSV cells over several cards, in the order of [`box_csv_head`].
pub fn box_csv_cells(outcome: &SweepOutcome, result: &StepResult) -> Vec<String> {
    if outcome.cards.is_empty() {
        return Vec::new();
    }
    let number = |value: Option<f64>| value.map_or_else(String::new, |value| format!("{value:.4}"));
    let slow = slowest(&result.cards);
    let hot = hottest(&result.cards);
    let mut cells = vec![
        slow.map_or_else(String::new, |card| card.gpu_index.to_string()),
        number(slow.and_then(|card| card.stats.average_sm_clock_mhz)),
        hot.map_or_else(String::new, |card| card.gpu_index.to_string()),
        number(hot.and_then(|card| card.stats.average_temperature_c)),
    ];
    for card in &outcome.cards {
        match result
            .cards
            .iter()
            .find(|measured| measured.gpu_index == card.gpu_index)
        {
            Some(measured) => cells.extend([
                number(measured.stats.average_power_w),
                number(measured.stats.average_sm_clock_mhz),
                number(measured.stats.average_temperature_c),
                format!("{:.1}", thermal_throttle_s(&measured.stats)),
            ]),
            None => cells.extend(std::iter::repeat_n(String::new(), 4)),
        }
    }
    cells
}
