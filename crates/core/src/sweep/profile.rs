//! A sweep's recommendation saved as a profile.

use crate::profiles::profile::ProfileOnCard;
use gputune_formats::card::{Constraints, GpuIdentity, Setting};
use gputune_formats::profile::{
    CardIdentity, PowerLimit, Profile, ProfileClockLock, SCHEMA_VERSION,
};
use gputune_formats::reports::sweep::SweepOutcome;

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
    };
    profile.check().map_err(|error| error.to_string())?;
    Ok(profile)
}
