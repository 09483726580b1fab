//! The shapes of protocol 4's era and before (ahead of the one serde style of [`super`]), kept
//! only to read the files an older release left: gputune 0.1's one-file journal (format 1), a
//! journal of format 2, a boot default and a clock-lock record without `format_version`.
//! Nothing writes them. Each converts to today's type.

use serde::Deserialize;

use super::card::{BackendKind, Setting};
use super::fan_curve::FanCurve;
use super::tuning::{ClockLockInForce, LockRecord};

/// `Setting` as protocol 4 wrote it: externally tagged, PascalCase
/// (`{"PowerLimit":{"power_limit_mw":315000}}`, `"ResetGpuClocks"`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum SettingV4 {
    PowerLimit { power_limit_mw: u32 },
    LockGpuClocks { min_mhz: u32, max_mhz: u32 },
    ResetGpuClocks,
    LockMemoryClocks { min_mhz: u32, max_mhz: u32 },
    ResetMemoryClocks,
    GpuClockOffset { offset_mhz: i32 },
    MemoryClockOffset { offset_mhz: i32 },
    FanSpeed { fan_index: u32, speed_pct: u32 },
    FanAutomatic { fan_index: u32 },
}

impl From<SettingV4> for Setting {
    fn from(old: SettingV4) -> Setting {
        match old {
            SettingV4::PowerLimit { power_limit_mw } => Setting::PowerLimit { power_limit_mw },
            SettingV4::LockGpuClocks { min_mhz, max_mhz } => {
                Setting::LockGpuClocks { min_mhz, max_mhz }
            }
            SettingV4::ResetGpuClocks => Setting::ResetGpuClocks,
            SettingV4::LockMemoryClocks { min_mhz, max_mhz } => {
                Setting::LockMemoryClocks { min_mhz, max_mhz }
            }
            SettingV4::ResetMemoryClocks => Setting::ResetMemoryClocks,
            SettingV4::GpuClockOffset { offset_mhz } => Setting::GpuClockOffset { offset_mhz },
            SettingV4::MemoryClockOffset { offset_mhz } => {
                Setting::MemoryClockOffset { offset_mhz }
            }
            SettingV4::FanSpeed {
                fan_index,
                speed_pct,
            } => Setting::FanSpeed {
                fan_index,
                speed_pct,
            },
            SettingV4::FanAutomatic { fan_index } => Setting::FanAutomatic { fan_index },
        }
    }
}

fn settings(old: &[SettingV4]) -> Vec<Setting> {
    old.iter().copied().map(Setting::from).collect()
}

/// The single journal of gputune 0.1 (`<state>/journal.json`, every GPU in one file, format 1):
/// restored once by a newer engine, then removed.
#[derive(Debug, Deserialize)]
pub struct JournalV1 {
    pub backend: BackendKind,
    #[serde(default)]
    pub owner: Option<JournalV1Owner>,
    pub gpus: Vec<JournalV1Entry>,
}

/// The process that wrote a format-1 journal (a live one still owns it).
#[derive(Debug, Deserialize)]
pub struct JournalV1Owner {
    pub pid: u32,
}

/// One GPU's part of a format-1 journal.
#[derive(Debug, Deserialize)]
pub struct JournalV1Entry {
    pub uuid: String,
    pub restore: Vec<SettingV4>,
}

impl JournalV1Entry {
    /// The settings that put the card back, in today's type.
    pub fn restore(&self) -> Vec<Setting> {
        settings(&self.restore)
    }
}

/// A journal of format 2 (releases up to protocol 4).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalV2 {
    pub format_version: u32,
    pub backend: BackendKind,
    pub uuid: String,
    pub index: u32,
    pub restore: Vec<SettingV4>,
    pub by: String,
    pub written_at_ms: u64,
}

impl JournalV2 {
    /// The settings that put the card back, in today's type.
    pub fn restore(&self) -> Vec<Setting> {
        settings(&self.restore)
    }
}

/// A boot default without `format_version` (releases up to protocol 4).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootDefaultV1 {
    pub gpu_uuid: String,
    pub profile_name: String,
    pub settings: Vec<SettingV4>,
    #[serde(default)]
    pub fan_curve: Option<FanCurve>,
}

impl BootDefaultV1 {
    /// Its parts in today's types: the settings, then the curve.
    pub fn settings(&self) -> Vec<Setting> {
        settings(&self.settings)
    }
}

/// A clock lock as protocol 4 wrote it: tagged `state`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ClockLockV4 {
    Unlocked,
    Locked { min_mhz: u32, max_mhz: u32 },
    Unknown,
}

impl From<ClockLockV4> for ClockLockInForce {
    fn from(old: ClockLockV4) -> ClockLockInForce {
        match old {
            ClockLockV4::Unlocked => ClockLockInForce::Unlocked,
            ClockLockV4::Locked { min_mhz, max_mhz } => {
                ClockLockInForce::Locked { min_mhz, max_mhz }
            }
            ClockLockV4::Unknown => ClockLockInForce::Unknown,
        }
    }
}

/// A clock-lock record without `format_version` (releases up to protocol 4; a daemon upgraded
/// without a reboot meets one).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockRecordFileV1 {
    pub boot_id: String,
    pub locks: LockRecordV1,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockRecordV1 {
    pub gpu_clock_lock: ClockLockV4,
    pub memory_clock_lock: ClockLockV4,
}

impl From<LockRecordV1> for LockRecord {
    fn from(old: LockRecordV1) -> LockRecord {
        LockRecord {
            gpu_clock_lock: old.gpu_clock_lock.into(),
            memory_clock_lock: old.memory_clock_lock.into(),
        }
    }
}

/// The `format_version` a JSON file says it has; `None` when it names none (or is not an
/// object), which for the files above means the protocol-4 era.
pub fn format_version_of(bytes: &[u8]) -> Result<Option<u64>, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_slice(bytes)?;
    Ok(value
        .get("format_version")
        .and_then(serde_json::Value::as_u64))
}
