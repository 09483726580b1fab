//! `gputune profile list` and `show`: what the user's profiles hold, as text or JSON.

use std::io::Write;

use crate::profiles::checked::CheckedOffsets;
use crate::profiles::profile::ProfileOnCard;
use crate::profiles::store::{LoadProblem, ProfileStore};
use crate::text::short_uuid;
use gputune_formats::reports::profile_list::{
    ListedProblem, ListedProfile, PROFILE_LIST_FORMAT, ProfileList,
};

/// `profile list`: a line per profile on `out`, each unreadable file on `messages`.
pub fn list(
    store: &ProfileStore,
    json: bool,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let (profiles, problems) = store.list();
    if json {
        let report = ProfileList {
            format_version: PROFILE_LIST_FORMAT,
            folder: store.folder().display().to_string(),
            profiles: profiles
                .iter()
                .map(|stored| ListedProfile {
                    path: stored.path.display().to_string(),
                    profile: &stored.profile,
                })
                .collect(),
            problems: problems
                .iter()
                .map(|problem| ListedProblem {
                    path: problem.path.display().to_string(),
                    message: problem.message.clone(),
                })
                .collect(),
        };
        crate::text::write_json_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else if profiles.is_empty() {
        writeln!(
            out,
            "No profiles in {} yet: `gputune profile save NAME` saves a card's current settings.",
            crate::text::path(store.folder())
        )?;
    } else {
        let rows: Vec<[String; 5]> = profiles
            .iter()
            .map(|stored| {
                let profile = &stored.profile;
                [
                    profile.name.clone(),
                    format!("{} ({})", profile.card.name, short_uuid(&profile.card.uuid)),
                    if profile.default_for_card {
                        "default".to_string()
                    } else {
                        String::new()
                    },
                    profile.summary(),
                    if profile.changes_clocks() || profile.last_check.is_some() {
                        profile.check_text()
                    } else {
                        String::new()
                    },
                ]
            })
            .collect();
        let header = [
            "NAME".to_string(),
            "CARD".to_string(),
            "BOOT".to_string(),
            "SETTINGS".to_string(),
            "STABILITY".to_string(),
        ];
        let widths: Vec<usize> = (0..5)
            .map(|column| {
                std::iter::once(&header)
                    .chain(&rows)
                    .map(|row| row[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in std::iter::once(&header).chain(&rows) {
            let mut line = String::new();
            for (column, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if column < 4 {
                    let padding = widths[column] - cell.chars().count();
                    line.push_str(&" ".repeat(padding + 2));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    report_problems(&problems, messages);
    Ok(())
}

/// Each file that is not a readable profile, on `messages`: skipped, and why.
pub(super) fn report_problems(problems: &[LoadProblem], messages: &mut dyn Write) {
    for problem in problems {
        let _ = writeln!(messages, "gputune: skipped: {}", problem.message);
    }
}

/// `profile show NAME`.
pub fn show(store: &ProfileStore, name: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    let stored = store.load(name)?;
    let profile = &stored.profile;
    writeln!(out, "Profile:        {}", profile.name)?;
    writeln!(out, "File:           {}", crate::text::path(&stored.path))?;
    writeln!(
        out,
        "Card:           {} ({}, PCI {})",
        profile.card.name, profile.card.uuid, profile.card.pci_bus_id
    )?;
    writeln!(
        out,
        "Boot default:   {}",
        if profile.default_for_card {
            "yes"
        } else {
            "no"
        }
    )?;
    let unchanged = "left as it is";
    match profile.power_limit {
        Some(power) => writeln!(
            out,
            "Power limit:    {} W on this card, {} % of the default on another",
            gputune_formats::units::plain_number(power.watts),
            gputune_formats::units::plain_number(power.percent_of_default)
        )?,
        None => writeln!(out, "Power limit:    {unchanged}")?,
    }
    for (label, lock) in [
        ("GPU clocks:    ", profile.gpu_clock_lock),
        ("Memory clocks: ", profile.memory_clock_lock),
    ] {
        match lock {
            Some(lock) => writeln!(
                out,
                "{label} locked to {}-{} MHz",
                lock.min_mhz, lock.max_mhz
            )?,
            None => writeln!(out, "{label} {unchanged}")?,
        }
    }
    for (label, offset) in [
        ("GPU offset:    ", profile.gpu_clock_offset_mhz),
        ("Memory offset: ", profile.memory_clock_offset_mhz),
    ] {
        match offset {
            Some(offset) => writeln!(out, "{label} {offset:+} MHz")?,
            None => writeln!(out, "{label} {unchanged}")?,
        }
    }
    match &profile.fan_curve {
        Some(points) => {
            let points: Vec<String> = points
                .iter()
                .map(|point| {
                    format!(
                        "{} °C → {} %",
                        gputune_formats::units::plain_number(point.temperature_c),
                        gputune_formats::units::plain_number(point.speed_pct)
                    )
                })
                .collect();
            writeln!(
                out,
                "Fan curve:      {} (followed by the window and `gputune run`)",
                points.join(", ")
            )?;
        }
        None => writeln!(out, "Fan curve:      none (the driver's own)")?,
    }
    match &profile.last_check {
        Some(record) => {
            writeln!(out, "Stability:      {}", profile.check_text())?;
            writeln!(out, "  {}", crate::text::printable(&record.summary))?;
        }
        None if profile.changes_clocks() => writeln!(
            out,
            "Stability:      never checked (`gputune stability --profile \"{}\"` checks it)",
            crate::text::printable(&profile.name)
        )?,
        None => {}
    }
    let checked_cards = profile.checked_card_lines();
    if !checked_cards.is_empty() {
        writeln!(out, "Checked cards:  each card's own clock offsets")?;
        for line in checked_cards {
            writeln!(out, "  {}", crate::text::printable(&line))?;
        }
    }
    if !profile.notes.is_empty() {
        writeln!(out, "Notes:")?;
        for line in profile.notes.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}
