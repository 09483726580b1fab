//! Where a card goes back to after it was found unstable at its own settings ("Put back" in
//! the window, `gputune stability --put-back`): the settings of the profile last checked
//! stable on this card, if there is one, else stock clock offsets and locks. The fans and
//! anything the profile does not set are left as they are: a card that just failed needs its
//! cooling more than ever.

use crate::profiles::checked::CheckedOffsets;
use crate::profiles::profile::ProfileOnCard;
use crate::profiles::store::StoredProfile;
use crate::tuning::in_force::Control;
use gputune_formats::card::Setting;
use gputune_formats::tuning::GpuInfo;
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};

/// What putting the card back writes, and what it goes back to.
#[derive(Debug, Clone, PartialEq)]
pub struct PutBack {
    pub gpu_index: u32,
    /// Nothing when the card already runs the target.
    pub settings: Vec<Setting>,
    /// "stock clock offsets and locks", "the profile \"Mild\" (checked stable on this card)".
    pub target: String,
    /// The profile gone back to, if one.
    pub profile: Option<String>,
}

impl PutBack {
    /// For GPU `gpu` running `in_force`, given the saved `profiles`.
    pub fn for_card(
        gpu: &GpuInfo,
        in_force: &SettingsInForce,
        profiles: &[StoredProfile],
    ) -> PutBack {
        let mut settings = stock_clocks(gpu, in_force, false);
        let profile = last_stable_profile(profiles, &gpu.identity.uuid);
        if let Some(stored) = profile {
            let application = stored.profile.for_card(&gpu.identity, &gpu.constraints);
            for setting in application.settings {
                if is_fan(&setting) {
                    continue;
                }
                settings.retain(|stock| Control::of(stock) != Control::of(&setting));
                settings.push(setting);
            }
        }
        PutBack {
            gpu_index: gpu.identity.index,
            settings,
            target: match profile {
                Some(stored) => format!(
                    "the profile \"{}\" (the last checked stable on this card)",
                    stored.profile.name
                ),
                None => "stock clock offsets and locks".to_string(),
            },
            profile: profile.map(|stored| stored.profile.name.clone()),
        }
    }

    /// "Put GPU 0 back to stock clock offsets and locks (GPU clock offset 0 MHz, …)".
    pub fn describe(&self) -> String {
        if self.settings.is_empty() {
            format!(
                "GPU {} already runs {}: nothing to put back.",
                self.gpu_index, self.target
            )
        } else {
            format!(
                "GPU {} back to {}: {}.",
                self.gpu_index,
                self.target,
                crate::tuning::describe_all(&self.settings)
            )
        }
    }
}

/// The profile whose last check found it stable on this very card (the record names the card
/// checked, or the card has its own checked offsets in it; a record of another card, or one
/// that names none, does not count), the latest such.
pub fn last_stable_profile<'a>(
    profiles: &'a [StoredProfile],
    uuid: &str,
) -> Option<&'a StoredProfile> {
    profiles
        .iter()
        .filter_map(|stored| {
            stored
                .profile
                .stable_on_since(uuid)
                .map(|ended_at_ms| (ended_at_ms, stored))
        })
        .max_by_key(|(ended_at_ms, _)| *ended_at_ms)
        .map(|(_, stored)| stored)
}

/// The settings that bring `gpu`'s clock offsets and locks to stock from `in_force`: only
/// those that differ, unless `always` (every control the card has, to learn at once whether
/// the driver lets this user write, and to hold them all).
pub fn stock_clocks(gpu: &GpuInfo, in_force: &SettingsInForce, always: bool) -> Vec<Setting> {
    let constraints = &gpu.constraints;
    let mut settings = Vec::new();
    let offset_set = |offset: Option<i32>| always || offset.is_some_and(|offset| offset != 0);
    let locked = |lock: ClockLockInForce| always || matches!(lock, ClockLockInForce::Locked { .. });
    if constraints.adjustable_gpu_clock_offset_range().is_some()
        && offset_set(in_force.gpu_clock_offset_mhz)
    {
        settings.push(Setting::GpuClockOffset { offset_mhz: 0 });
    }
    if constraints.adjustable_memory_clock_offset_range().is_some()
        && offset_set(in_force.memory_clock_offset_mhz)
    {
        settings.push(Setting::MemoryClockOffset { offset_mhz: 0 });
    }
    if constraints.gpu_clock_range.is_some() && locked(in_force.gpu_clock_lock) {
        settings.push(Setting::ResetGpuClocks);
    }
    // Memory locks are reset only when one is set: many cards cannot lock memory at all.
    if constraints.memory_clock_range.is_some()
        && matches!(in_force.memory_clock_lock, ClockLockInForce::Locked { .. })
    {
        settings.push(Setting::ResetMemoryClocks);
    }
    settings
}

fn is_fan(setting: &Setting) -> bool {
    matches!(
        setting,
        Setting::FanSpeed { .. } | Setting::FanAutomatic { .. }
    )
}
