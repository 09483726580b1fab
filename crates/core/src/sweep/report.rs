//! A sweep's result for people (a table) and for scripts (JSON, CSV); as a profile in
//! `profile.rs`, a box's own columns in `report_cards.rs`.

use std::path::Path;

use crate::sweep::objective::{compare, reference};
use crate::sweep::report_cards::{box_cells, box_csv_cells, box_csv_head, box_head, box_note};
use gputune_formats::reports::sweep::Comparison;
use gputune_formats::reports::sweep::{SweepEnd, SweepOutcome};
use gputune_formats::reports::sweep_step::StepResult;

/// Each step compared with the first setting, where both were measured.
pub fn comparisons(outcome: &SweepOutcome) -> Vec<Option<Comparison>> {
    comparisons_of(&outcome.results)
}

/// Each of `results` compared with the first setting, where both were measured.
pub fn comparisons_of(results: &[StepResult]) -> Vec<Option<Comparison>> {
    let reference = reference(results).map(|(reference, _)| reference);
    results
        .iter()
        .map(|result| {
            reference
                .as_ref()
                .and_then(|reference| compare(result, reference))
        })
        .collect()
}

/// Seconds as people say them: "45 s", "9 min 2 s".
pub fn duration_text(seconds: f64) -> String {
    let whole = seconds.max(0.0).round() as u64;
    if whole < 60 {
        format!("{whole} s")
    } else {
        format!("{} min {} s", whole / 60, whole % 60)
    }
}

/// A signed percentage with one decimal, never "-0.0 %".
pub fn signed_pct(value: f64) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    if rounded == 0.0 {
        "0.0 %".to_string()
    } else {
        format!("{rounded:+.1} %")
    }
}

fn or_dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "—".to_string())
}

/// The throttle reasons a step spent time under, longest first ("Power cap 58 s").
pub fn throttle_summary(result: &StepResult) -> String {
    let mut reasons: Vec<(String, f64)> = result
        .stats
        .throttle_s
        .iter()
        .filter(|time| time.seconds >= 0.5)
        .map(|time| (time.reason.label().to_string(), time.seconds))
        .collect();
    reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
    if reasons.is_empty() {
        return "none".to_string();
    }
    reasons
        .iter()
        .map(|(label, seconds)| format!("{label} {seconds:.0} s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The result table, the notes under it, the answer and what was put back.
pub fn table(outcome: &SweepOutcome) -> String {
    let unit = outcome
        .measured_by
        .as_ref()
        .map_or_else(|| "unit".to_string(), |by| by.unit_name());
    let comparisons = comparisons(outcome);
    let recommended = outcome
        .recommendation
        .as_ref()
        .ok()
        .map(|recommendation| recommendation.step_index);
    let head = vec![
        "".to_string(),
        "Setting".to_string(),
        format!("{unit}/s"),
        "±".to_string(),
        "Power".to_string(),
        format!("J/{unit}"),
        "Speed".to_string(),
        "Energy".to_string(),
        "SM clock".to_string(),
        "Temp".to_string(),
        "Fan".to_string(),
        "Throttled".to_string(),
    ];
    let several = !outcome.cards.is_empty();
    let mut head = head;
    if several {
        box_head(&mut head);
    }
    let mut rows = vec![head];
    for (index, result) in outcome.results.iter().enumerate() {
        let comparison = comparisons.get(index).copied().flatten();
        let marker = if Some(index) == recommended {
            "→"
        } else if result.unstable.is_some() {
            "✗"
        } else if result.noisy.is_some() {
            "~"
        } else {
            ""
        };
        let mut cells = row(marker, result, comparison);
        if several {
            box_cells(&mut cells, result);
        }
        rows.push(cells);
    }
    let mut text = format_rows(&rows);
    if several {
        text.push_str(&box_note(outcome));
    }
    text.push_str(&notes(outcome));
    text
}

/// One setting's row of the table, under `marker` ("→" recommended, "✗" unstable, "~" noisy).
fn row(marker: &str, result: &StepResult, comparison: Option<Comparison>) -> Vec<String> {
    vec![
        marker.to_string(),
        result.step.label.clone(),
        or_dash(
            result
                .throughput
                .map(|throughput| significant(throughput.units_per_s)),
        ),
        or_dash(
            result
                .throughput
                .and_then(|throughput| throughput.spread_pct)
                .map(|spread| format!("{spread:.1} %")),
        ),
        or_dash(result.average_power_w.map(|watts| format!("{watts:.0} W"))),
        or_dash(result.energy_per_unit_j.map(significant)),
        or_dash(comparison.map(|comparison| signed_pct(-comparison.slowdown_pct))),
        or_dash(comparison.map(|comparison| signed_pct(-comparison.energy_saved_pct))),
        or_dash(
            result
                .stats
                .average_sm_clock_mhz
                .map(|mhz| format!("{mhz:.0} MHz")),
        ),
        or_dash(
            result
                .stats
                .average_temperature_c
                .map(|celsius| format!("{celsius:.0} °C")),
        ),
        or_dash(
            result
                .stats
                .average_fan_speed_pct
                .map(|pct| format!("{pct:.0} %")),
        ),
        if result.measured_s > 0.0 {
            throttle_summary(result)
        } else {
            "—".to_string()
        },
    ]
}

/// What the table's rows need said under them: the base, each unstable or noisy step, how
/// speed was measured, the recommendation, how the sweep ended and what was put back.
fn notes(outcome: &SweepOutcome) -> String {
    let mut text = String::new();
    if let Some(note) = outcome
        .results
        .first()
        .map(|result| &result.step.in_force_note)
        .filter(|note| !note.is_empty())
    {
        text.push_str(&format!("Besides each setting: {note}.\n"));
    }
    for result in &outcome.results {
        if let Some(why) = &result.unstable {
            text.push_str(&format!("✗ {}: unstable, {why}.\n", result.step.label));
        }
        if let Some(why) = &result.noisy {
            text.push_str(&format!("~ {}: noisy, {why}.\n", result.step.label));
        }
    }
    if let Some(by) = &outcome.measured_by {
        text.push_str(&format!(
            "Speed and energy are compared with the first setting; throughput is measured by {}.\n",
            by.describe()
        ));
    }
    match &outcome.recommendation {
        Ok(recommendation) => text.push_str(&format!("→ {}\n", recommendation.sentence)),
        Err(why) => text.push_str(&format!("No recommendation: {why}\n")),
    }
    for advice in &outcome.card_advice {
        text.push_str(&format!("! {}\n", advice.sentence));
    }
    match &outcome.ended {
        SweepEnd::Completed => {}
        SweepEnd::Stopped { reason } => {
            text.push_str(&format!("The sweep stopped early. {reason}\n"));
        }
        SweepEnd::JobFailed { message, .. } => {
            text.push_str(&format!("The sweep stopped: {message}\n"));
        }
        SweepEnd::Failed { reason } => text.push_str(&format!("The sweep failed: {reason}\n")),
    }
    text.push_str(&format!(
        "The sweep took {}.\n",
        crate::sweep::report::duration_text(outcome.duration_s)
    ));
    for line in &outcome.restored {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Three significant digits, enough to tell settings apart: "9.87", "43.2", "1234".
pub fn significant(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

fn format_rows(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            rows.iter()
                .map(|row| row.get(column).map_or(0, |cell| cell.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(column, cell)| {
                let pad = widths[column].saturating_sub(cell.chars().count());
                // Words to the left, numbers to the right.
                if column <= 1 || column == columns - 1 {
                    format!("{cell}{}", " ".repeat(pad))
                } else {
                    format!("{}{cell}", " ".repeat(pad))
                }
            })
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// The result as CSV: one row per step, with the comparison and the verdicts.
pub fn csv_bytes(outcome: &SweepOutcome) -> Result<Vec<u8>, csv::Error> {
    let comparisons = comparisons(outcome);
    let unit = outcome
        .measured_by
        .as_ref()
        .map_or_else(|| "unit".to_string(), |by| by.unit_name());
    let recommended = outcome
        .recommendation
        .as_ref()
        .ok()
        .map(|recommendation| recommendation.step_index);
    let mut writer = csv::Writer::from_writer(Vec::new());
    let mut head: Vec<String> = [
        "step",
        "label",
        "power_limit_pct",
        "power_limit_w",
        "clock_cap_mhz",
        "gpu_clock_offset_mhz",
        "also_in_force",
        "repeat_of_first",
        "unit",
        "throughput_per_s",
        "spread_pct",
        "average_power_w",
        "energy_per_unit_j",
        "slowdown_pct",
        "energy_saved_pct",
        "sm_clock_mhz",
        "temperature_c",
        "fan_pct",
        "throttled",
        "measured_s",
        "unstable",
        "noisy",
        "recommended",
    ]
    .iter()
    .map(|name| name.to_string())
    .collect();
    head.extend(box_csv_head(outcome));
    writer.write_record(&head)?;
    let number = |value: Option<f64>| value.map_or_else(String::new, |value| format!("{value:.4}"));
    for (index, result) in outcome.results.iter().enumerate() {
        let comparison = comparisons.get(index).copied().flatten();
        let mut record = vec![
            (index + 1).to_string(),
            result.step.label.clone(),
            format!("{}", result.step.power_limit_pct),
            format!("{}", f64::from(result.step.power_limit_mw) / 1000.0),
            result
                .step
                .clock_cap_mhz
                .map_or_else(String::new, |mhz| mhz.to_string()),
            result
                .step
                .gpu_clock_offset_mhz
                .map_or_else(String::new, |mhz| mhz.to_string()),
            result.step.in_force_note.clone(),
            result.step.is_repeat.to_string(),
            unit.clone(),
            number(result.throughput.map(|throughput| throughput.units_per_s)),
            number(
                result
                    .throughput
                    .and_then(|throughput| throughput.spread_pct),
            ),
            number(result.average_power_w),
            number(result.energy_per_unit_j),
            number(comparison.map(|comparison| comparison.slowdown_pct)),
            number(comparison.map(|comparison| comparison.energy_saved_pct)),
            number(result.stats.average_sm_clock_mhz),
            number(result.stats.average_temperature_c),
            number(result.stats.average_fan_speed_pct),
            throttle_summary(result),
            format!("{:.1}", result.measured_s),
            result.unstable.clone().unwrap_or_default(),
            result.noisy.clone().unwrap_or_default(),
            (Some(index) == recommended).to_string(),
        ];
        record.extend(box_csv_cells(outcome, result));
        writer.write_record(&record)?;
    }
    writer
        .into_inner()
        .map_err(|error| error.into_error().into())
}

/// Writes the CSV to `path` atomically (a half-written file never replaces a good one).
pub fn write_csv(outcome: &SweepOutcome, path: &Path) -> anyhow::Result<()> {
    let bytes = csv_bytes(outcome)?;
    crate::fsafe::write_atomically(path, &bytes, 0o644)?;
    Ok(())
}
