//! What a session holds and the clock locks in force: the methods of `tuning::Hold` and
//! `tuning::ClockLockInForce`, and the locks of a `SettingsInForce`.

use crate::card::Setting;
use crate::tuning::{ClockLockInForce, Hold, LockRecord, SettingsInForce};

impl Hold {
    pub const ALL: [Hold; 6] = [
        Hold::PowerLimit,
        Hold::GpuClockLock,
        Hold::MemoryClockLock,
        Hold::GpuClockOffset,
        Hold::MemoryClockOffset,
        Hold::Fans,
    ];

    /// What a setting makes its session hold.
    pub fn of(setting: &Setting) -> Hold {
        match setting {
            Setting::PowerLimit { .. } => Hold::PowerLimit,
            Setting::LockGpuClocks { .. } | Setting::ResetGpuClocks => Hold::GpuClockLock,
            Setting::LockMemoryClocks { .. } | Setting::ResetMemoryClocks => Hold::MemoryClockLock,
            Setting::GpuClockOffset { .. } | Setting::GpuClockOffsetAt { .. } => {
                Hold::GpuClockOffset
            }
            Setting::MemoryClockOffset { .. } | Setting::MemoryClockOffsetAt { .. } => {
                Hold::MemoryClockOffset
            }
            Setting::FanSpeed { .. } | Setting::FanAutomatic { .. } => Hold::Fans,
        }
    }

    /// Its name in files and on the wire ("power_limit", "fans").
    pub fn as_str(self) -> &'static str {
        match self {
            Hold::PowerLimit => "power_limit",
            Hold::GpuClockLock => "gpu_clock_lock",
            Hold::MemoryClockLock => "memory_clock_lock",
            Hold::GpuClockOffset => "gpu_clock_offset",
            Hold::MemoryClockOffset => "memory_clock_offset",
            Hold::Fans => "fans",
        }
    }

    /// "power limit", "fans": for "GPU 0's power limit".
    pub fn name(self) -> &'static str {
        match self {
            Hold::PowerLimit => "power limit",
            Hold::GpuClockLock => "GPU clock lock",
            Hold::MemoryClockLock => "memory clock lock",
            Hold::GpuClockOffset => "GPU clock offset",
            Hold::MemoryClockOffset => "memory clock offset",
            Hold::Fans => "fans",
        }
    }
}

/// "power limit and fans", "GPU clock lock, GPU clock offset and fans", with "is" or "are" to
/// follow it.
pub fn describe_holds(holds: &[Hold]) -> (String, &'static str) {
    let names: Vec<&str> = holds.iter().map(|hold| hold.name()).collect();
    let text = match names.as_slice() {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    };
    let verb = if holds.len() > 1 || holds == [Hold::Fans] {
        "are"
    } else {
        "is"
    };
    (text, verb)
}

impl ClockLockInForce {
    /// "210-2520 MHz", "unlocked", "not known (NVML cannot read clock locks)".
    pub fn describe(self) -> String {
        match self {
            ClockLockInForce::Unlocked => "unlocked".to_string(),
            ClockLockInForce::Locked { min_mhz, max_mhz } => format!("{min_mhz}-{max_mhz} MHz"),
            ClockLockInForce::Unknown => "not known (NVML cannot read clock locks)".to_string(),
        }
    }

    /// The lock a setting leaves, if it is a lock setting.
    pub fn after(setting: &Setting) -> Option<ClockLockInForce> {
        match *setting {
            Setting::LockGpuClocks { min_mhz, max_mhz }
            | Setting::LockMemoryClocks { min_mhz, max_mhz } => {
                Some(ClockLockInForce::Locked { min_mhz, max_mhz })
            }
            Setting::ResetGpuClocks | Setting::ResetMemoryClocks => {
                Some(ClockLockInForce::Unlocked)
            }
            _ => None,
        }
    }
}

impl SettingsInForce {
    /// The clock locks, for the engine's record.
    pub fn locks(&self) -> LockRecord {
        LockRecord {
            gpu_clock_lock: self.gpu_clock_lock,
            memory_clock_lock: self.memory_clock_lock,
        }
    }
}
