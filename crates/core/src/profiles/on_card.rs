//! How a profile turns into settings for a card: the one it was saved from, or another one (by
//! percentage of that card's default power limit, clamped to what it accepts, with a notice for
//! every change), and what its stability checks say on that card.

use super::checked::CardOffsets;
use super::profile::ProfileApplication;
use crate::device::gate::validate;
use crate::profiles::checked::CheckedCardEntry;
use crate::profiles::checked::CheckedOffsets;
use crate::stability::record::RecordedCheck;
use gputune_formats::card::{ClockRangeMhz, Constraints, GpuIdentity, OffsetRangeMhz, Setting};
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::profile::{PowerLimit, Profile, ProfileClockLock};
use gputune_formats::tuning::Notice;
use gputune_formats::units::watts_exact;

pub(super) fn application(
    profile: &Profile,
    identity: &GpuIdentity,
    constraints: &Constraints,
    offsets: CardOffsets,
) -> ProfileApplication {
    let mut notices: Vec<String> = Vec::new();
    let mut different_model = false;
    let mut settings = Vec::new();
    let same_card = profile.is_for(&identity.uuid);
    // A card of the profile's box was measured with the others: no notice, and its own power
    // limit (a hot slot's) in its own watts.
    let box_card = profile.box_card(&identity.uuid);
    if !same_card && box_card.is_none() {
        if profile.card.name.trim() == identity.name.trim() {
            notices.push(format!(
                "This profile was saved from another {} ({}); its power limit is applied as a share of this card's default.",
                profile.card.name, profile.card.uuid
            ));
        } else {
            different_model = true;
            notices.push(format!(
                "This profile was saved from a different model ({}); it is applied to this {} by percentage of its default power limit and clamped to what it accepts.",
                profile.card.name, identity.name
            ));
        }
    }

    if let Some(setting) =
        box_power_setting(profile, box_card, same_card, constraints, &mut notices)
    {
        settings.push(setting);
    }
    for (clock, lock, range, make) in [
        (
            "GPU",
            profile.gpu_clock_lock,
            constraints.gpu_clock_range,
            gpu_lock as fn(u32, u32) -> Setting,
        ),
        (
            "memory",
            profile.memory_clock_lock,
            constraints.memory_clock_range,
            memory_lock,
        ),
    ] {
        let Some(lock) = lock else { continue };
        if let Some((min_mhz, max_mhz)) = clamp_lock(clock, lock, range, &mut notices) {
            settings.push(make(min_mhz, max_mhz));
        }
    }
    let (gpu_offset_mhz, memory_offset_mhz) = offsets.values(profile);
    for (clock, offset, range, make) in [
        (
            "GPU",
            gpu_offset_mhz,
            constraints.gpu_clock_offset_range,
            gpu_offset as fn(i32) -> Setting,
        ),
        (
            "memory",
            memory_offset_mhz,
            constraints.memory_clock_offset_range,
            memory_offset,
        ),
    ] {
        let Some(offset) = offset else { continue };
        if let Some(offset_mhz) = clamp_offset(clock, offset, range, &mut notices) {
            settings.push(make(offset_mhz));
        }
    }

    let fan_curve = profile.fan_curve.as_ref().and_then(|points| {
        if constraints.fan_count == 0 || constraints.fan_speed_range.is_none() {
            notices.push(
                "This card has no controllable fans; the profile's fan curve is left out."
                    .to_string(),
            );
            return None;
        }
        match FanCurve::new(points.clone(), FanCurve::default().hysteresis_c) {
            Ok(curve) => Some(curve),
            Err(error) => {
                notices.push(format!("The fan curve is left out: {error}"));
                None
            }
        }
    });

    // Belt and braces: what the clamping above missed is dropped, never sent.
    settings.retain(|setting| match validate(constraints, *setting) {
        Ok(_) => true,
        Err(error) => {
            notices.push(format!("The {} is left out: {error}", setting.describe()));
            false
        }
    });
    ProfileApplication {
        settings,
        fan_curve,
        notices: notices
            .into_iter()
            .enumerate()
            .map(|(position, text)| {
                if different_model && position == 0 {
                    Notice::Warning(text)
                } else {
                    Notice::Info(text)
                }
            })
            .chain(stability_notice(profile, identity, &offsets))
            .collect(),
    }
}

/// Said once when a profile that changes clocks is applied to a card: which offsets it
/// gets there and why (another card's own, none, the profile's on trial), else that it
/// was never checked on that card (a check of another card does not count), or that its
/// last check there found it unstable.
fn stability_notice(
    profile: &Profile,
    identity: &GpuIdentity,
    offsets: &CardOffsets,
) -> Option<Notice> {
    let uuid = identity.uuid.as_str();
    match offsets {
        CardOffsets::Checked(entry) => {
            return Some(Notice::Info(format!(
                "This card's own clock offsets from the profile \"{}\" are used: {}.",
                profile.name,
                entry.describe()
            )));
        }
        CardOffsets::Unchecked if profile.sets_offsets() => {
            return profile
                .unchecked_offsets_notice(&identity.name, uuid)
                .map(Notice::Warning);
        }
        CardOffsets::Candidate => {
            return Some(Notice::Info(format!(
                "This card has no clock offsets of its own in the profile \"{}\": its {} are checked here, and a stable verdict makes them this card's.",
                profile.name,
                super::checked::describe_offsets(
                    profile.gpu_clock_offset_mhz,
                    profile.memory_clock_offset_mhz
                )
                .unwrap_or_else(|| "clock offsets".to_string())
            )));
        }
        CardOffsets::Own | CardOffsets::Unchecked => {}
    }
    if !profile.changes_clocks() {
        return None;
    }
    // Its own card's entry at the profile's very offsets is a check of it.
    if matches!(offsets, CardOffsets::Own)
        && profile.checked_cards.iter().any(|entry| {
            entry.counts_on(uuid)
                && (entry.gpu_clock_offset_mhz, entry.memory_clock_offset_mhz)
                    == (
                        profile.gpu_clock_offset_mhz,
                        profile.memory_clock_offset_mhz,
                    )
        })
    {
        return None;
    }
    let check = format!(
        "`gputune stability --profile \"{}\"` checks it",
        profile.name
    );
    match &profile.last_check {
        None => Some(Notice::Info(format!(
            "The profile \"{}\" changes clocks and was never checked for stability ({check}).",
            profile.name
        ))),
        Some(record) if !record.counts_on(uuid) => Some(Notice::Info(format!(
            "The profile \"{}\" changes clocks and was never checked for stability on this card: it was {} ({check} here).",
            profile.name,
            record.describe_for(uuid)
        ))),
        Some(record) if record.verdict == gputune_formats::profile::Verdict::Unstable => {
            Some(Notice::Warning(format!(
                "The profile \"{}\" was {}: it may compute wrong results ({check} again).",
                profile.name,
                record.describe()
            )))
        }
        Some(_) => None,
    }
}

/// "notes may not hold the character \u{1b}: ...": the field and the refused character, escaped.
fn gpu_lock(min_mhz: u32, max_mhz: u32) -> Setting {
    Setting::LockGpuClocks { min_mhz, max_mhz }
}

fn memory_lock(min_mhz: u32, max_mhz: u32) -> Setting {
    Setting::LockMemoryClocks { min_mhz, max_mhz }
}

fn gpu_offset(offset_mhz: i32) -> Setting {
    Setting::GpuClockOffset { offset_mhz }
}

fn memory_offset(offset_mhz: i32) -> Setting {
    Setting::MemoryClockOffset { offset_mhz }
}

/// The power limit for this card, clamped into its range.
/// The power limit for a card: a box card's own (in its own watts), else the profile's.
fn box_power_setting(
    profile: &Profile,
    box_card: Option<&gputune_formats::profile::BoxCard>,
    same_card: bool,
    constraints: &Constraints,
    notices: &mut Vec<String>,
) -> Option<Setting> {
    let own_power = box_card.and_then(|card| card.power_limit);
    let power = own_power.or(profile.power_limit)?;
    power_setting(
        power,
        same_card || own_power.is_some(),
        constraints,
        notices,
    )
}

fn power_setting(
    power: PowerLimit,
    same_card: bool,
    constraints: &Constraints,
    notices: &mut Vec<String>,
) -> Option<Setting> {
    let (Some(min_mw), Some(max_mw)) = (
        constraints.power_limit_min_mw,
        constraints.power_limit_max_mw,
    ) else {
        notices.push(
            "This card does not let its power limit be changed; the power limit is left out."
                .to_string(),
        );
        return None;
    };
    let default_mw = constraints
        .power_limit_default_mw
        .filter(|default_mw| *default_mw > 0);
    let (wanted_mw, described) = match (same_card, default_mw) {
        (false, Some(default_mw)) => {
            // Whole watts, as `gputune apply --power-limit P%` rounds.
            let watts = (power.percent_of_default / 100.0 * f64::from(default_mw) / 1000.0).round();
            (
                watts * 1000.0,
                format!(
                    "{} % of this card's default {}",
                    power.percent_of_default,
                    watts_exact(default_mw)
                ),
            )
        }
        (false, None) => {
            notices.push(
                "This card does not report its default power limit, so the profile's watts are used."
                    .to_string(),
            );
            (power.watts * 1000.0, format!("{} W", power.watts))
        }
        (true, _) => (power.watts * 1000.0, format!("{} W", power.watts)),
    };
    if !wanted_mw.is_finite() {
        notices.push("The profile's power limit is not a number; it is left out.".to_string());
        return None;
    }
    // Clamped in f64 first, so the cast is exact and in range.
    let clamped_mw = wanted_mw
        .round()
        .clamp(f64::from(min_mw), f64::from(max_mw)) as u32;
    if f64::from(clamped_mw) != wanted_mw.round() {
        notices.push(format!(
            "The power limit ({described}) is outside this card's range of {} to {}; {} is used.",
            watts_exact(min_mw),
            watts_exact(max_mw),
            watts_exact(clamped_mw)
        ));
    }
    Some(Setting::PowerLimit {
        power_limit_mw: clamped_mw,
    })
}

/// A clock lock clamped into the card's supported range; `None` (with a notice) when the card
/// cannot lock that clock.
fn clamp_lock(
    clock: &str,
    lock: ProfileClockLock,
    range: Option<ClockRangeMhz>,
    notices: &mut Vec<String>,
) -> Option<(u32, u32)> {
    let Some(range) = range else {
        notices.push(format!(
            "This card does not report a supported {clock} clock range; the {clock} clock lock is left out."
        ));
        return None;
    };
    let (low, high) = (
        lock.min_mhz.min(lock.max_mhz),
        lock.min_mhz.max(lock.max_mhz),
    );
    let min_mhz = low.clamp(range.min_mhz, range.max_mhz.max(range.min_mhz));
    let max_mhz = high.clamp(range.min_mhz, range.max_mhz.max(range.min_mhz));
    if (min_mhz, max_mhz) != (lock.min_mhz, lock.max_mhz) {
        notices.push(format!(
            "The {clock} clock lock {}-{} MHz is outside this card's range of {}-{} MHz; {min_mhz}-{max_mhz} MHz is used.",
            lock.min_mhz, lock.max_mhz, range.min_mhz, range.max_mhz
        ));
    }
    Some((min_mhz, max_mhz))
}

/// A clock offset clamped into the card's range; `None` (with a notice) when the card or its
/// driver has no offsets.
fn clamp_offset(
    clock: &str,
    offset_mhz: i32,
    range: Option<OffsetRangeMhz>,
    notices: &mut Vec<String>,
) -> Option<i32> {
    let Some(range) = range else {
        if offset_mhz != 0 {
            notices.push(format!(
                "This card or driver does not support {clock} clock offsets; the {clock} clock offset of {offset_mhz:+} MHz is left out."
            ));
        }
        return None;
    };
    let clamped = offset_mhz.clamp(range.min_mhz, range.max_mhz.max(range.min_mhz));
    if clamped != offset_mhz {
        notices.push(format!(
            "The {clock} clock offset of {offset_mhz:+} MHz is outside this card's range of {:+} to {:+} MHz; {clamped:+} MHz is used.",
            range.min_mhz, range.max_mhz
        ));
    }
    Some(clamped)
}
