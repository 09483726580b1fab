//! What a scan found: each measured step, the outcome, what it saves against stock, and the
//! confirmed offset as a profile.

use std::path::PathBuf;

use crate::profiles::checked::CheckedOffsets;
use crate::profiles::profile::ProfileOnCard;
use crate::profiles::store::{ProfileStore, StoreError};
use gputune_formats::profile::Profile;
use gputune_formats::profile::{CheckedBy, CheckedCard};
use gputune_formats::reports::scan::ScanOptions;
use gputune_formats::reports::scan::ScanOutcome;
use gputune_formats::tuning::GpuInfo;
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};

/// The summary of a scan whose long check confirmed `offset_mhz`, with the margin explained:
/// why the offset to use is below steps that passed.
pub fn confirmed_summary(
    options: &ScanOptions,
    offset_mhz: i32,
    first_unstable_mhz: Option<i32>,
    confirmed_s: f64,
) -> String {
    let lock = options.lock_mhz;
    let confirmed = gputune_formats::units::duration_s(confirmed_s);
    let Some(unstable_mhz) = first_unstable_mhz else {
        return format!(
            "The offset to use at the {lock} MHz lock is {offset_mhz:+} MHz, the card's highest, confirmed stable for {confirmed}: no step failed, so no margin was taken."
        );
    };
    let last_stable_mhz = unstable_mhz - options.step_mhz;
    let below_mhz = last_stable_mhz - offset_mhz;
    let margin_mhz = options.step_mhz * options.margin_steps as i32;
    let steps = options.margin_steps;
    if below_mhz <= 0 {
        return format!(
            "The offset to use at the {lock} MHz lock is {offset_mhz:+} MHz, confirmed stable for {confirmed}. {unstable_mhz:+} MHz was the first unstable step; this is the last step that passed, with no margin below it (--margin-steps {steps})."
        );
    }
    let why = if below_mhz > margin_mhz {
        format!(
            "the margin of {steps} steps ({margin_mhz} MHz), and a step more for each long check that failed above it"
        )
    } else if below_mhz < margin_mhz {
        format!("the margin of {steps} steps ({margin_mhz} MHz), which stops at +0 MHz")
    } else {
        format!(
            "a margin of {steps} steps, since a step near the edge passes a short check and can still fail in a long run"
        )
    };
    format!(
        "The offset to use at the {lock} MHz lock is {offset_mhz:+} MHz, confirmed stable for {confirmed}. {unstable_mhz:+} MHz was the first unstable step; the result is {below_mhz} MHz below the last step that passed ({last_stable_mhz:+} MHz): {why}."
    )
}

/// Saves the confirmed offset in `store` as the profile `name`: the scan's own settings
/// only (the offset, and a lock from the card's lowest clock to the scan's, so the card
/// still clocks down when idle), never what others held on the card meanwhile, with its
/// confirmation as its check and as the card's own checked offset. A profile of that name
/// is replaced only when `replace` says so (its notes, boot-default flag and the other
/// cards' checked offsets kept); a profile saved from another card keeps its settings and
/// gains this card's own offset. The profile and its file, or `None` when no offset was
/// confirmed. The CLI and the window save through here.
pub fn save_scan_profile(
    outcome: &ScanOutcome,
    store: &ProfileStore,
    name: &str,
    gpu: &GpuInfo,
    replace: bool,
) -> Result<Option<(Profile, PathBuf)>, StoreError> {
    let previous = match store.load(name) {
        Ok(existing) if existing.profile.name == name => Some(existing),
        Err(error @ StoreError::Ambiguous { .. }) => return Err(error),
        // Another name, none, or an unreadable file (which the store never overwrites).
        Ok(_) | Err(_) => None,
    };
    if let Some(existing) = &previous
        && !replace
    {
        return Err(StoreError::AlreadyExists {
            name: name.to_string(),
            path: existing.path.clone(),
        });
    }
    let previous = previous.map(|stored| stored.profile);
    let Some(profile) = scan_profile(outcome, name, gpu, previous.as_ref()) else {
        return Ok(None);
    };
    let path = store.save(&profile)?;
    Ok(Some((profile, path)))
}

fn scan_profile(
    outcome: &ScanOutcome,
    name: &str,
    gpu: &GpuInfo,
    previous: Option<&Profile>,
) -> Option<Profile> {
    let offset_mhz = outcome.stable_offset_mhz?;
    let report = outcome.confirmation.as_ref()?;
    let entry = CheckedCard {
        gpu_uuid: gpu.identity.uuid.clone(),
        gpu_name: gpu.identity.name.clone(),
        gpu_clock_offset_mhz: Some(offset_mhz),
        memory_clock_offset_mhz: None,
        checked_at_ms: report.ended_at_ms,
        ran_s: report.result.ran_s,
        by: CheckedBy::Scan,
        verdict: report.verdict,
    };
    if let Some(previous) = previous.filter(|previous| !previous.is_for(&gpu.identity.uuid)) {
        let mut profile = previous.clone();
        profile.record_checked_card(entry);
        return Some(profile);
    }
    let lowest_mhz = gpu
        .constraints
        .gpu_clock_range
        .map_or(outcome.options.lock_mhz, |range| range.min_mhz);
    let in_force = SettingsInForce {
        gpu_clock_offset_mhz: Some(offset_mhz),
        gpu_clock_lock: ClockLockInForce::Locked {
            min_mhz: lowest_mhz.min(outcome.options.lock_mhz),
            max_mhz: outcome.options.lock_mhz,
        },
        memory_clock_lock: ClockLockInForce::Unlocked,
        ..SettingsInForce::default()
    };
    let mut profile =
        Profile::from_in_force(name, &gpu.identity, &gpu.constraints, &in_force, None, None);
    if let Some(previous) = previous.filter(|previous| previous.is_for(&gpu.identity.uuid)) {
        profile.notes = previous.notes.clone();
        profile.default_for_card = previous.default_for_card;
    }
    profile.last_check = Some(report.record());
    profile.checked_cards = previous
        .map(|previous| previous.checked_cards.clone())
        .unwrap_or_default();
    profile.record_checked_card(entry);
    if profile.notes.is_empty() {
        profile.notes = format!("Found by gputune scan: {}", outcome.summary);
    }
    Some(profile)
}

/// Said when a scan's offset is recorded into a profile saved from another card whose GPU
/// clocks may go above the scan's lock, where the offset was not found stable.
pub fn lock_caveat(profile: &Profile, lock_mhz: u32, gpu_uuid: &str) -> Option<String> {
    if profile.is_for(gpu_uuid)
        || profile
            .gpu_clock_lock
            .is_some_and(|lock| lock.max_mhz <= lock_mhz)
    {
        return None;
    }
    Some(format!(
        "The offset was found at a {lock_mhz} MHz lock and the profile \"{}\" lets the GPU clock {}; `gputune stability --profile \"{}\" --gpu {gpu_uuid}` checks it at the profile's settings.",
        profile.name,
        profile.gpu_clock_lock.map_or_else(
            || "as high as the card goes".to_string(),
            |lock| format!("up to {} MHz", lock.max_mhz)
        ),
        profile.name
    ))
}
