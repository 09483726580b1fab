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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::{CardSpec, sim_constraints};
    use crate::sweep::objective::recommend;
    use gputune_formats::reports::sweep::{Objective, SweepEnd};
    use gputune_formats::reports::sweep_box::{CardAdvice, CardAdviceReason, SweepCard};
    use gputune_formats::reports::sweep_step::{StepResult, SweepStep, Throughput};
    use gputune_formats::tuning::TrialStats;

    fn gpu(index: u32) -> GpuInfo {
        GpuInfo {
            identity: GpuIdentity {
                index,
                uuid: format!("GPU-box-{index}"),
                name: "NVIDIA GeForce RTX 4090".to_string(),
                pci_bus_id: format!("00000000:0{index}:00.0"),
                memory_total_bytes: 24 << 30,
                driver_version: None,
                nvml_version: None,
                architecture: None,
                minor_number: None,
            },
            constraints: sim_constraints(&CardSpec::rtx4090()),
        }
    }

    fn row(percent: f64, units_per_s: f64, watts: f64) -> StepResult {
        let power_limit_mw = (percent * 4_500.0) as u32;
        StepResult {
            step: SweepStep {
                label: format!("{percent} %"),
                power_limit_pct: percent,
                power_limit_mw,
                clock_cap_mhz: None,
                gpu_clock_offset_mhz: None,
                settings: vec![Setting::PowerLimit { power_limit_mw }],
                is_repeat: false,
                in_force_note: String::new(),
            },
            throughput: Some(Throughput {
                units_per_s,
                spread_pct: None,
            }),
            average_power_w: Some(watts),
            energy_per_unit_j: Some(watts / units_per_s),
            stats: TrialStats::default(),
            measured_s: 60.0,
            unstable: None,
            noisy: None,
            cards: Vec::new(),
        }
    }

    #[test]
    fn a_box_profile_covers_every_card_and_gives_the_hot_slot_its_own_limit() {
        let gpus = [gpu(0), gpu(3)];
        let results = vec![row(100.0, 10.0, 880.0), row(80.0, 9.8, 720.0)];
        let outcome = SweepOutcome {
            gpu_index: 0,
            gpu_name: gpus[0].identity.name.clone(),
            gpu_uuid: gpus[0].identity.uuid.clone(),
            objective: Objective::default(),
            measured_by: None,
            recommendation: recommend(&results, Objective::default()),
            results,
            ended: SweepEnd::Completed,
            restored: Vec::new(),
            restore_complete: true,
            duration_s: 120.0,
            cards: gpus
                .iter()
                .map(|gpu| SweepCard {
                    gpu_index: gpu.identity.index,
                    gpu_name: gpu.identity.name.clone(),
                    gpu_uuid: gpu.identity.uuid.clone(),
                })
                .collect(),
            card_advice: vec![CardAdvice {
                gpu_index: 3,
                reason: CardAdviceReason::ThermalThrottle { throttled_s: 30.0 },
                temperature_c: Some(86.0),
                power_limit_pct: Some(70.0),
                power_limit_mw: Some(315_000),
                sentence: "GPU 3 throttles for heat: a hot slot.".to_string(),
            }],
        };
        let profile = recommended_box_profile(&outcome, "Box", &gpus).unwrap();
        assert_eq!(profile.power_limit.map(|power| power.watts), Some(360.0));
        assert_eq!(profile.box_cards.len(), 2);
        assert_eq!(profile.box_cards[0].power_limit, None);
        assert!(
            profile
                .notes
                .ends_with("GPU 3 throttles for heat: a hot slot.")
        );
        // The file reads back as it was written.
        let text = toml::to_string(&profile).unwrap();
        assert!(text.contains("[[box_cards]]"), "{text}");
        let back: Profile = toml::from_str(&text).unwrap();
        assert_eq!(back, profile);
        // The hot slot gets its own watts, the other card the profile's, neither a notice.
        let hot = profile.for_card(&gpus[1].identity, &gpus[1].constraints);
        assert_eq!(
            hot.settings,
            vec![Setting::PowerLimit {
                power_limit_mw: 315_000
            }]
        );
        assert!(hot.notices.is_empty(), "{:?}", hot.notices);
        let first = profile.for_card(&gpus[0].identity, &gpus[0].constraints);
        assert_eq!(
            first.settings,
            vec![Setting::PowerLimit {
                power_limit_mw: 360_000
            }]
        );
        // A card named twice is refused, like every other impossible value.
        let mut twice = profile.clone();
        twice.box_cards.push(twice.box_cards[0].clone());
        assert!(twice.check().is_err());
        // One card: the profile it always was.
        let single = SweepOutcome {
            cards: Vec::new(),
            card_advice: Vec::new(),
            ..outcome
        };
        let plain = recommended_box_profile(&single, "One", &gpus[..1]).unwrap();
        assert!(plain.box_cards.is_empty());
    }
}
