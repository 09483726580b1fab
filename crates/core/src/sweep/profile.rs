//! A sweep's recommendation saved as a profile.

use crate::profiles::profile::ProfileOnCard;
use gputune_formats::card::{Constraints, GpuIdentity, Setting};
use gputune_formats::profile::{
    BoxCard, CardIdentity, PowerLimit, Profile, ProfileClockLock, SCHEMA_VERSION,
};
use gputune_formats::reports::sweep::SweepOutcome;
use gputune_formats::tuning::GpuInfo;

/// The recommended setting as a profile named `name`, for the card it was measured on.
pub fn recommended_profile(
    outcome: &SweepOutcome,
    name: &str,
    identity: &GpuIdentity,
    constraints: &Constraints,
) -> Result<Profile, String> {
    let recommendation = outcome
        .recommendation
        .as_ref()
        .map_err(|why| format!("There is no recommendation to save: {why}"))?;
    let step = &outcome
        .results
        .get(recommendation.step_index)
        .ok_or("The recommendation names no measured setting.")?
        .step;
    let default_mw = constraints.power_limit_default_mw.unwrap_or(0);
    let percent = if default_mw > 0 {
        (f64::from(step.power_limit_mw) / f64::from(default_mw) * 10_000.0).round() / 100.0
    } else {
        step.power_limit_pct
    };
    // Everything the card ran at that step: the sweep's own controls and what it kept or reset
    // (a reset lock is "leave unlocked", which a profile says by having none).
    let (mut gpu_clock_lock, mut memory_clock_lock) = (None, None);
    let (mut gpu_clock_offset_mhz, mut memory_clock_offset_mhz) = (None, None);
    for setting in &step.settings {
        match *setting {
            Setting::LockGpuClocks { min_mhz, max_mhz } => {
                gpu_clock_lock = Some(ProfileClockLock { min_mhz, max_mhz });
            }
            Setting::LockMemoryClocks { min_mhz, max_mhz } => {
                memory_clock_lock = Some(ProfileClockLock { min_mhz, max_mhz });
            }
            Setting::GpuClockOffset { offset_mhz } => gpu_clock_offset_mhz = Some(offset_mhz),
            Setting::MemoryClockOffset { offset_mhz } => {
                memory_clock_offset_mhz = Some(offset_mhz);
            }
            _ => {}
        }
    }
    let profile = Profile {
        schema_version: SCHEMA_VERSION,
        name: name.trim().to_string(),
        notes: format!(
            "Found by gputune sweep ({}): {}{}",
            outcome.objective.describe(),
            recommendation.sentence,
            if step.in_force_note.is_empty() {
                String::new()
            } else {
                format!(" Measured with {}.", step.in_force_note)
            }
        ),
        card: CardIdentity {
            uuid: identity.uuid.clone(),
            name: identity.name.clone(),
            pci_bus_id: identity.pci_bus_id.clone(),
        },
        default_for_card: false,
        power_limit: Some(PowerLimit {
            percent_of_default: percent,
            watts: f64::from(step.power_limit_mw) / 1000.0,
        }),
        gpu_clock_lock,
        memory_clock_lock,
        gpu_clock_offset_mhz,
        memory_clock_offset_mhz,
        fan_curve: None,
        last_check: None,
        checked_cards: Vec::new(),
        box_cards: Vec::new(),
    };
    profile.check().map_err(|error| error.to_string())?;
    Ok(profile)
}

/// The recommended setting as a profile for every card of the sweep: on one card
/// [`recommended_profile`]; over several, the first card's profile covering the box
/// (`box_cards`), a hot slot with the power limit the sweep's advice suggests for it (as a
/// share of that card's own default, and its watts), so `gputune run` and the boot default
/// apply it to every card as one.
pub fn recommended_box_profile(
    outcome: &SweepOutcome,
    name: &str,
    gpus: &[GpuInfo],
) -> Result<Profile, String> {
    let first = gpus.first().ok_or("The sweep had no GPU.")?;
    let mut profile = recommended_profile(outcome, name, &first.identity, &first.constraints)?;
    if outcome.cards.len() < 2 {
        return Ok(profile);
    }
    for card in &outcome.cards {
        let gpu = gpus
            .iter()
            .find(|gpu| gpu.identity.uuid == card.gpu_uuid)
            .ok_or_else(|| format!("GPU {} of the sweep is not known here.", card.gpu_index))?;
        let own = outcome
            .card_advice
            .iter()
            .find(|advice| advice.gpu_index == card.gpu_index)
            .and_then(|advice| advice.power_limit_pct)
            .and_then(|percent| {
                let default_mw = gpu
                    .constraints
                    .power_limit_default_mw
                    .filter(|default_mw| *default_mw > 0)?;
                Some(PowerLimit {
                    percent_of_default: percent,
                    // Whole watts, as the sweep's steps round.
                    watts: (percent / 100.0 * f64::from(default_mw) / 1000.0).round(),
                })
            });
        profile.box_cards.push(BoxCard {
            gpu_uuid: card.gpu_uuid.clone(),
            gpu_name: card.gpu_name.clone(),
            power_limit: own,
        });
    }
    for advice in &outcome.card_advice {
        profile.notes.push_str(&format!(" {}", advice.sentence));
    }
    profile.check().map_err(|error| error.to_string())?;
    Ok(profile)
}
