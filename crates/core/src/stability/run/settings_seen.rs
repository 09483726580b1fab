//! The settings a card runs, as far as a check cares: its offsets and the top of its clock lock,
//! which a finding's sentence names ("at +150 MHz").

/// The settings a card runs, as far as a check cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SettingsSeen {
    pub gpu_clock_offset_mhz: Option<i32>,
    pub memory_clock_offset_mhz: Option<i32>,
    /// The top of the GPU clock lock, when one is in force.
    pub locked_max_mhz: Option<u32>,
}

impl SettingsSeen {
    pub fn of(in_force: &gputune_formats::tuning::SettingsInForce) -> SettingsSeen {
        use gputune_formats::tuning::ClockLockInForce;
        SettingsSeen {
            gpu_clock_offset_mhz: in_force.gpu_clock_offset_mhz,
            memory_clock_offset_mhz: in_force.memory_clock_offset_mhz,
            locked_max_mhz: match in_force.gpu_clock_lock {
                ClockLockInForce::Locked { max_mhz, .. } => Some(max_mhz),
                ClockLockInForce::Unlocked | ClockLockInForce::Unknown => None,
            },
        }
    }
}
