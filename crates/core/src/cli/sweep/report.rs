//! What the sweep says: its plan before it starts; at its end the table (or JSON), the CSV
//! and the profile.

use std::io::Write;
use std::path::Path;

use crate::profiles::store::ProfileStore;
use crate::sweep::profile::recommended_box_profile;
use crate::sweep::report::{table, write_csv};
use crate::sweep::runner::{SweepCardPlan, SweepTiming};
use gputune_formats::reports::sweep::SweepOutcome;
use gputune_formats::tuning::GpuInfo;

pub(super) fn say_plan(messages: &mut dyn Write, cards: &[SweepCardPlan], timing: &SweepTiming) {
    let Some(first) = cards.first() else {
        return;
    };
    let plan = &first.plan;
    let labels: Vec<&str> = plan
        .iter()
        .filter(|step| !step.is_repeat)
        .map(|step| step.label.as_str())
        .collect();
    let total_s = timing.total_s(plan.len());
    let duration = if total_s < 120.0 {
        format!("{total_s:.0} s")
    } else {
        format!("{:.0} min", total_s / 60.0)
    };
    let (what, put_back) = match cards {
        [one] => (
            format!("GPU {} ({})", one.index, one.gpu.identity.name),
            "The card is put back",
        ),
        several => (
            format!(
                "GPUs {} together ({}), each setting on every card at once",
                several
                    .iter()
                    .map(|card| card.index.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                models(several)
            ),
            "The cards are put back",
        ),
    };
    let _ = writeln!(
        messages,
        "gputune: sweeping {what}: {} settings × {} s ({} s warm-up each), about {duration}: {}{}. {put_back} when the sweep ends.",
        plan.len(),
        crate::text::number(timing.step_s),
        crate::text::number(timing.warmup_s),
        labels.join(", "),
        if plan.iter().any(|step| step.is_repeat) {
            ", then the first again (the noise)"
        } else {
            ""
        }
    );
}

/// "4 × NVIDIA GeForce RTX 4090", or each model counted when they differ.
fn models(cards: &[SweepCardPlan]) -> String {
    let mut counted: Vec<(&str, usize)> = Vec::new();
    for card in cards {
        let name = card.gpu.identity.name.as_str();
        match counted.iter_mut().find(|(seen, _)| *seen == name) {
            Some(entry) => entry.1 += 1,
            None => counted.push((name, 1)),
        }
    }
    counted
        .iter()
        .map(|(name, count)| format!("{count} × {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The table (or JSON), the CSV and the profile.
/// Where the result goes besides the table: the options that say so.
pub(super) struct ReportTo<'a> {
    /// JSON on stdout instead of the table.
    pub json: bool,
    pub csv: Option<&'a Path>,
    pub save_profile: Option<&'a str>,
}

pub(super) fn report(
    to: &ReportTo<'_>,
    outcome: &SweepOutcome,
    gpus: &[GpuInfo],
    store: Option<&ProfileStore>,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    if to.json {
        let report = gputune_formats::reports::sweep::SweepReport {
            format_version: gputune_formats::reports::sweep::SWEEP_REPORT_FORMAT,
            outcome,
        };
        crate::text::write_json_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", table(outcome))?;
    }
    if let Some(path) = to.csv {
        match write_csv(outcome, path) {
            Ok(()) => {
                let _ = writeln!(messages, "gputune: wrote {}.", crate::text::path(path));
            }
            Err(error) => {
                let _ = writeln!(messages, "gputune: the CSV was not written: {error}");
            }
        }
    }
    if let (Some(name), Some(store)) = (to.save_profile, store) {
        match recommended_box_profile(outcome, name, gpus)
            .map_err(anyhow::Error::msg)
            .and_then(|profile| Ok(store.save(&profile)?))
        {
            Ok(path) => {
                let cards = if outcome.cards.len() > 1 {
                    format!(" for its {} cards", outcome.cards.len())
                } else {
                    String::new()
                };
                let _ = writeln!(
                    messages,
                    "gputune: saved the recommended setting{cards} as the profile \"{}\" ({}); use it with gputune run --profile \"{}\" -- COMMAND.",
                    name.trim(),
                    crate::text::path(&path),
                    name.trim()
                );
            }
            Err(error) => {
                let _ = writeln!(messages, "gputune: the profile was not saved: {error}");
            }
        }
    }
    Ok(())
}
