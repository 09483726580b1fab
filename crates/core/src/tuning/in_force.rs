//! What a card runs: every control gputune can change and its value now. The engine keeps one
//! [`SettingsInForce`] per GPU, read back from the card where NVML can (power limit, clock
//! offsets, fan modes) and from its own record where it cannot (clock locks). A value is put
//! back by writing the [`Setting`] that [`SettingsInForce::restoring`] gives for its control.

use crate::device::{COMPUTE_PSTATES, CurrentSettings, compute_offset_mhz};
pub use crate::tuning::pstate_offsets::{controls_written, describe_offset, pstates_at};
use crate::tuning::pstate_offsets::{offset_in, set_offsets};
use gputune_formats::card::{FanMode, Setting};
use gputune_formats::tuning::{ClockLockInForce, Hold, LockRecord, SettingsInForce};

/// One thing on a card that a setting changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Control {
    PowerLimit,
    GpuClockLock,
    MemoryClockLock,
    /// The offset of the P-states compute runs in, as one value (what a card that does not say
    /// per P-state has).
    GpuClockOffset,
    /// One P-state's offset (each is put back to its own value). Put back in this order, the
    /// offsets and locks before the fans.
    GpuClockOffsetAt {
        pstate: u32,
    },
    MemoryClockOffset,
    MemoryClockOffsetAt {
        pstate: u32,
    },
    Fan {
        fan_index: u32,
    },
}

impl Control {
    /// The control a setting changes.
    pub fn of(setting: &Setting) -> Control {
        match *setting {
            Setting::PowerLimit { .. } => Control::PowerLimit,
            Setting::LockGpuClocks { .. } | Setting::ResetGpuClocks => Control::GpuClockLock,
            Setting::LockMemoryClocks { .. } | Setting::ResetMemoryClocks => {
                Control::MemoryClockLock
            }
            Setting::GpuClockOffset { .. } => Control::GpuClockOffset,
            Setting::MemoryClockOffset { .. } => Control::MemoryClockOffset,
            Setting::GpuClockOffsetAt { pstate, .. } => Control::GpuClockOffsetAt { pstate },
            Setting::MemoryClockOffsetAt { pstate, .. } => Control::MemoryClockOffsetAt { pstate },
            Setting::FanSpeed { fan_index, .. } | Setting::FanAutomatic { fan_index } => {
                Control::Fan { fan_index }
            }
        }
    }

    /// "the power limit", "fan 1": for messages.
    pub fn describe(self) -> String {
        match self {
            Control::PowerLimit => "the power limit".to_string(),
            Control::GpuClockLock => "the GPU clock lock".to_string(),
            Control::MemoryClockLock => "the memory clock lock".to_string(),
            Control::GpuClockOffset => "the GPU clock offset".to_string(),
            Control::MemoryClockOffset => "the memory clock offset".to_string(),
            Control::Fan { fan_index } => format!("fan {fan_index}"),
            Control::GpuClockOffsetAt { pstate } => format!("the GPU clock offset in P{pstate}"),
            Control::MemoryClockOffsetAt { pstate } => {
                format!("the memory clock offset in P{pstate}")
            }
        }
    }
}

impl Control {
    /// What a session holds to change this control: every fan of a card is one [`Hold`].
    pub fn hold(self) -> Hold {
        match self {
            Control::PowerLimit => Hold::PowerLimit,
            Control::GpuClockLock => Hold::GpuClockLock,
            Control::MemoryClockLock => Hold::MemoryClockLock,
            Control::GpuClockOffset | Control::GpuClockOffsetAt { .. } => Hold::GpuClockOffset,
            Control::MemoryClockOffset | Control::MemoryClockOffsetAt { .. } => {
                Hold::MemoryClockOffset
            }
            Control::Fan { .. } => Hold::Fans,
        }
    }
}

/// What a card runs, kept up to date: read from the card, changed by each setting applied, and the setting that puts each control back.
pub trait ControlsInForce {
    /// What the card reports, with the locks from the engine's record.
    fn from_card(current: &CurrentSettings, locks: LockRecord) -> SettingsInForce;

    /// The readable part taken from a fresh read of the card; the locks stay as recorded.
    fn refresh_from_card(&mut self, current: &CurrentSettings);

    /// Notes a setting the driver accepted.
    fn record_applied(&mut self, setting: &Setting);

    fn set_fan(&mut self, fan_index: u32, mode: FanMode);

    /// The setting that puts `control` back to its value now, and whether that is exact. An
    /// unknown clock lock is put back by a reset (not exact); a value the card does not report
    /// cannot be put back (`None`).
    fn restoring(&self, control: Control) -> Option<(Setting, bool)>;

    /// The controls whose readable value differs between `self` and `other` (locks are not
    /// readable, so they never differ here).
    fn readable_differences(&self, other: &SettingsInForce) -> Vec<Control>;

    /// Whether a control is at the value `setting` would give it (for checking a restore).
    fn matches(&self, setting: &Setting) -> bool;

    /// One line for people: "315 W, GPU clocks 210-2520 MHz, GPU offset +150 MHz, fans automatic".
    fn summary(&self) -> String;
}

impl ControlsInForce for SettingsInForce {
    fn from_card(current: &CurrentSettings, locks: LockRecord) -> SettingsInForce {
        SettingsInForce {
            power_limit_mw: current.power_limit_mw,
            gpu_clock_lock: locks.gpu_clock_lock,
            memory_clock_lock: locks.memory_clock_lock,
            gpu_clock_offset_mhz: current.gpu_clock_offset_mhz,
            memory_clock_offset_mhz: current.memory_clock_offset_mhz,
            fans: current.fans.clone(),
            gpu_clock_offsets: current.gpu_clock_offsets.clone(),
            memory_clock_offsets: current.memory_clock_offsets.clone(),
        }
    }

    fn refresh_from_card(&mut self, current: &CurrentSettings) {
        *self = SettingsInForce::from_card(current, self.locks());
    }

    fn record_applied(&mut self, setting: &Setting) {
        match *setting {
            Setting::PowerLimit { power_limit_mw } => self.power_limit_mw = Some(power_limit_mw),
            Setting::LockGpuClocks { .. } | Setting::ResetGpuClocks => {
                self.gpu_clock_lock = ClockLockInForce::after(setting).unwrap_or_default();
            }
            Setting::LockMemoryClocks { .. } | Setting::ResetMemoryClocks => {
                self.memory_clock_lock = ClockLockInForce::after(setting).unwrap_or_default();
            }
            Setting::GpuClockOffset { offset_mhz } => {
                self.gpu_clock_offset_mhz = Some(offset_mhz);
                set_offsets(&mut self.gpu_clock_offsets, &COMPUTE_PSTATES, offset_mhz);
            }
            Setting::MemoryClockOffset { offset_mhz } => {
                self.memory_clock_offset_mhz = Some(offset_mhz);
                set_offsets(&mut self.memory_clock_offsets, &COMPUTE_PSTATES, offset_mhz);
            }
            Setting::GpuClockOffsetAt { pstate, offset_mhz } => {
                set_offsets(&mut self.gpu_clock_offsets, &[pstate], offset_mhz);
                self.gpu_clock_offset_mhz =
                    compute_offset_mhz(&self.gpu_clock_offsets).or(self.gpu_clock_offset_mhz);
            }
            Setting::MemoryClockOffsetAt { pstate, offset_mhz } => {
                set_offsets(&mut self.memory_clock_offsets, &[pstate], offset_mhz);
                self.memory_clock_offset_mhz =
                    compute_offset_mhz(&self.memory_clock_offsets).or(self.memory_clock_offset_mhz);
            }
            Setting::FanSpeed {
                fan_index,
                speed_pct,
            } => self.set_fan(fan_index, FanMode::Manual { speed_pct }),
            Setting::FanAutomatic { fan_index } => self.set_fan(fan_index, FanMode::Automatic),
        }
    }

    fn set_fan(&mut self, fan_index: u32, mode: FanMode) {
        if let Some(slot) = self
            .fans
            .as_mut()
            .and_then(|fans| fans.get_mut(fan_index as usize))
        {
            *slot = mode;
        }
    }

    fn restoring(&self, control: Control) -> Option<(Setting, bool)> {
        match control {
            Control::PowerLimit => self
                .power_limit_mw
                .map(|power_limit_mw| (Setting::PowerLimit { power_limit_mw }, true)),
            Control::GpuClockLock => Some(match self.gpu_clock_lock {
                ClockLockInForce::Locked { min_mhz, max_mhz } => {
                    (Setting::LockGpuClocks { min_mhz, max_mhz }, true)
                }
                ClockLockInForce::Unlocked => (Setting::ResetGpuClocks, true),
                ClockLockInForce::Unknown => (Setting::ResetGpuClocks, false),
            }),
            Control::MemoryClockLock => Some(match self.memory_clock_lock {
                ClockLockInForce::Locked { min_mhz, max_mhz } => {
                    (Setting::LockMemoryClocks { min_mhz, max_mhz }, true)
                }
                ClockLockInForce::Unlocked => (Setting::ResetMemoryClocks, true),
                ClockLockInForce::Unknown => (Setting::ResetMemoryClocks, false),
            }),
            Control::GpuClockOffset => self
                .gpu_clock_offset_mhz
                .map(|offset_mhz| (Setting::GpuClockOffset { offset_mhz }, true)),
            Control::MemoryClockOffset => self
                .memory_clock_offset_mhz
                .map(|offset_mhz| (Setting::MemoryClockOffset { offset_mhz }, true)),
            Control::GpuClockOffsetAt { pstate } => offset_in(&self.gpu_clock_offsets, pstate)
                .map(|offset_mhz| (Setting::GpuClockOffsetAt { pstate, offset_mhz }, true)),
            Control::MemoryClockOffsetAt { pstate } => {
                offset_in(&self.memory_clock_offsets, pstate)
                    .map(|offset_mhz| (Setting::MemoryClockOffsetAt { pstate, offset_mhz }, true))
            }
            Control::Fan { fan_index } => {
                let mode = self.fans.as_ref()?.get(fan_index as usize)?;
                Some(match *mode {
                    FanMode::Automatic => (Setting::FanAutomatic { fan_index }, true),
                    FanMode::Manual { speed_pct } => (
                        Setting::FanSpeed {
                            fan_index,
                            speed_pct,
                        },
                        true,
                    ),
                })
            }
        }
    }

    fn readable_differences(&self, other: &SettingsInForce) -> Vec<Control> {
        let mut changed = Vec::new();
        if self.power_limit_mw != other.power_limit_mw {
            changed.push(Control::PowerLimit);
        }
        if self.gpu_clock_offset_mhz != other.gpu_clock_offset_mhz
            || self.gpu_clock_offsets != other.gpu_clock_offsets
        {
            changed.push(Control::GpuClockOffset);
        }
        if self.memory_clock_offset_mhz != other.memory_clock_offset_mhz
            || self.memory_clock_offsets != other.memory_clock_offsets
        {
            changed.push(Control::MemoryClockOffset);
        }
        let fans_now = self.fans.as_deref().unwrap_or_default();
        let fans_then = other.fans.as_deref().unwrap_or_default();
        for index in 0..fans_now.len().max(fans_then.len()) {
            if fans_now.get(index) != fans_then.get(index) {
                changed.push(Control::Fan {
                    fan_index: index as u32,
                });
            }
        }
        changed
    }

    fn matches(&self, setting: &Setting) -> bool {
        match self.restoring(Control::of(setting)) {
            Some((now, _)) => now == *setting,
            None => false,
        }
    }

    fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(power_limit_mw) = self.power_limit_mw {
            parts.push(format!(
                "power limit {}",
                gputune_formats::units::watts_exact(power_limit_mw)
            ));
        }
        match self.gpu_clock_lock {
            ClockLockInForce::Unknown => {}
            lock => parts.push(format!("GPU clocks {}", lock.describe())),
        }
        match self.memory_clock_lock {
            ClockLockInForce::Unknown => {}
            lock => parts.push(format!("memory clocks {}", lock.describe())),
        }
        if let Some(offset) = self.gpu_clock_offset_mhz {
            parts.push(format!(
                "GPU offset {}",
                describe_offset(offset, &self.gpu_clock_offsets)
            ));
        }
        if let Some(offset) = self.memory_clock_offset_mhz {
            parts.push(format!(
                "memory offset {}",
                describe_offset(offset, &self.memory_clock_offsets)
            ));
        }
        if let Some(fans) = &self.fans {
            parts.push(fans_summary(fans));
        }
        parts.join(", ")
    }
}

/// "fans automatic", "fans at 60 %", "fan 0 at 60 %, fan 1 automatic".
pub fn fans_summary(fans: &[FanMode]) -> String {
    match fans.first() {
        None => "no fans".to_string(),
        Some(first) if fans.iter().all(|mode| mode == first) => match first {
            FanMode::Automatic => "fans automatic".to_string(),
            FanMode::Manual { speed_pct } => format!("fans at {speed_pct} %"),
        },
        Some(_) => fans
            .iter()
            .enumerate()
            .map(|(index, mode)| match mode {
                FanMode::Automatic => format!("fan {index} automatic"),
                FanMode::Manual { speed_pct } => format!("fan {index} at {speed_pct} %"),
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::card::PstateOffset;

    fn tuned() -> SettingsInForce {
        SettingsInForce {
            power_limit_mw: Some(315_000),
            gpu_clock_lock: ClockLockInForce::Locked {
                min_mhz: 210,
                max_mhz: 2520,
            },
            memory_clock_lock: ClockLockInForce::Unlocked,
            gpu_clock_offset_mhz: Some(150),
            memory_clock_offset_mhz: Some(0),
            fans: Some(vec![FanMode::Manual { speed_pct: 60 }, FanMode::Automatic]),
            gpu_clock_offsets: vec![
                PstateOffset {
                    pstate: 0,
                    offset_mhz: 100,
                },
                PstateOffset {
                    pstate: 2,
                    offset_mhz: 150,
                },
            ],
            memory_clock_offsets: Vec::new(),
        }
    }

    #[test]
    fn every_control_restores_exactly_what_it_was() {
        let before = tuned();
        for (control, expected) in [
            (
                Control::PowerLimit,
                Setting::PowerLimit {
                    power_limit_mw: 315_000,
                },
            ),
            (
                Control::GpuClockLock,
                Setting::LockGpuClocks {
                    min_mhz: 210,
                    max_mhz: 2520,
                },
            ),
            (Control::MemoryClockLock, Setting::ResetMemoryClocks),
            (
                Control::GpuClockOffset,
                Setting::GpuClockOffset { offset_mhz: 150 },
            ),
            (
                Control::GpuClockOffsetAt { pstate: 0 },
                Setting::GpuClockOffsetAt {
                    pstate: 0,
                    offset_mhz: 100,
                },
            ),
            (
                Control::GpuClockOffsetAt { pstate: 2 },
                Setting::GpuClockOffsetAt {
                    pstate: 2,
                    offset_mhz: 150,
                },
            ),
            (
                Control::Fan { fan_index: 0 },
                Setting::FanSpeed {
                    fan_index: 0,
                    speed_pct: 60,
                },
            ),
            (
                Control::Fan { fan_index: 1 },
                Setting::FanAutomatic { fan_index: 1 },
            ),
        ] {
            assert_eq!(before.restoring(control), Some((expected, true)));
            assert_eq!(Control::of(&expected), control);
        }
    }

    #[test]
    fn an_unknown_lock_is_reset_and_said_to_be_inexact() {
        let unknown = SettingsInForce::default();
        assert_eq!(
            unknown.restoring(Control::GpuClockLock),
            Some((Setting::ResetGpuClocks, false))
        );
        assert_eq!(unknown.restoring(Control::PowerLimit), None);
    }

    #[test]
    fn applied_settings_update_the_record_and_readable_changes_are_found() {
        let mut now = tuned();
        now.record_applied(&Setting::ResetGpuClocks);
        now.record_applied(&Setting::FanAutomatic { fan_index: 0 });
        now.record_applied(&Setting::PowerLimit {
            power_limit_mw: 300_000,
        });
        assert_eq!(now.gpu_clock_lock, ClockLockInForce::Unlocked);
        assert_eq!(
            now.readable_differences(&tuned()),
            vec![Control::PowerLimit, Control::Fan { fan_index: 0 }]
        );
        assert!(now.matches(&Setting::FanAutomatic { fan_index: 0 }));
        assert_eq!(
            now.summary(),
            "power limit 300 W, GPU clocks unlocked, memory clocks unlocked, GPU offset +150 MHz (P2; P0 at +100 MHz), memory offset +0 MHz, fans automatic"
        );
    }
}
