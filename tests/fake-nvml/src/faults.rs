//! Faults a test switches on with `FAKE_NVML_FAULTS`, to see how gputune copes with a driver
//! that refuses, loses a GPU or answers slowly.

use std::env::VarError;
use std::time::Duration;

use gputune_formats::card::Setting;

use crate::{FAULTS_ENV, FAULTS_FILE_ENV};

/// The faults in force for one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Faults {
    /// Set/reset calls are refused, as for a user without administrator rights.
    pub no_permission: bool,
    /// Fan readings and fan control are not supported.
    pub fans_not_supported: bool,
    /// The GPU falls off the bus once this many device calls have been made.
    pub gpu_lost_after_calls: Option<u64>,
    /// Every call sleeps this long first.
    pub slow_ms: u64,
    /// Clock offsets can be neither read nor set.
    pub offsets_not_supported: bool,
    /// `nvmlInit_v2` says the kernel driver is not loaded.
    pub driver_not_loaded: bool,
    /// The driver sees no GPU.
    pub no_gpus: bool,
    /// An event set reports one critical error (Xid 13 on GPU 0) once it is this old.
    pub xid_after_ms: Option<u64>,
    /// Neither process list is supported.
    pub processes_not_supported: bool,
    /// The driver cannot list the card's P-states (`nvmlDeviceGetSupportedPerformanceStates`
    /// is NOT_SUPPORTED), as an older one.
    pub pstates_not_listed: bool,
}

const KNOWN_FAULTS: &str = "no_permission, fans_not_supported, gpu_lost_after=N, slow_ms=N, \
                            offsets_not_supported, driver_not_loaded, no_gpus, xid_after_ms=N, \
                            processes_not_supported, pstates_not_listed";

impl Faults {
    /// The faults `FAKE_NVML_FAULTS` asks for, and those listed in the file
    /// `FAKE_NVML_FAULTS_FILE` names (read on every call, so a test can change the faults of a
    /// process already running); none when neither is set.
    pub(crate) fn from_env() -> Result<Faults, String> {
        let mut list = match std::env::var(FAULTS_ENV) {
            Ok(list) => list,
            Err(VarError::NotPresent) => String::new(),
            Err(VarError::NotUnicode(_)) => return Err(format!("{FAULTS_ENV} is not valid UTF-8")),
        };
        if let Some(path) = std::env::var_os(FAULTS_FILE_ENV).filter(|path| !path.is_empty()) {
            match std::fs::read_to_string(&path) {
                Ok(more) => {
                    list.push(',');
                    list.push_str(more.trim());
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(format!("{FAULTS_FILE_ENV}={path:?}: {error}"));
                }
            }
        }
        Faults::parse(&list).map_err(|error| format!("faults {list:?}: {error}"))
    }

    /// Parses a comma-separated fault list; blank entries are ignored.
    pub(crate) fn parse(list: &str) -> Result<Faults, String> {
        let mut faults = Faults::default();
        for item in list
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let (name, value) = match item.split_once('=') {
                Some((name, value)) => (name.trim(), Some(value.trim())),
                None => (item, None),
            };
            match (name, value) {
                ("no_permission", None) => faults.no_permission = true,
                ("fans_not_supported", None) => faults.fans_not_supported = true,
                ("offsets_not_supported", None) => faults.offsets_not_supported = true,
                ("driver_not_loaded", None) => faults.driver_not_loaded = true,
                ("no_gpus", None) => faults.no_gpus = true,
                ("processes_not_supported", None) => faults.processes_not_supported = true,
                ("pstates_not_listed", None) => faults.pstates_not_listed = true,
                ("gpu_lost_after", Some(value)) => {
                    faults.gpu_lost_after_calls = Some(parse_count(name, value)?);
                }
                ("slow_ms", Some(value)) => faults.slow_ms = parse_count(name, value)?,
                ("xid_after_ms", Some(value)) => {
                    faults.xid_after_ms = Some(parse_count(name, value)?);
                }
                _ => return Err(format!("unknown fault {item:?} (known: {KNOWN_FAULTS})")),
            }
        }
        Ok(faults)
    }

    /// Sleeps for `slow_ms`, if set.
    pub(crate) fn delay(&self) {
        if self.slow_ms > 0 {
            std::thread::sleep(Duration::from_millis(self.slow_ms));
        }
    }

    /// Whether the GPU is lost for a device call made after `device_calls_before` others.
    pub(crate) fn gpu_lost(&self, device_calls_before: u64) -> bool {
        self.gpu_lost_after_calls
            .is_some_and(|limit| device_calls_before >= limit)
    }

    /// Whether a fault makes this setting unsupported, whatever the card could do.
    pub(crate) fn refuses(&self, setting: &Setting) -> bool {
        match setting {
            Setting::FanSpeed { .. } | Setting::FanAutomatic { .. } => self.fans_not_supported,
            Setting::GpuClockOffset { .. }
            | Setting::MemoryClockOffset { .. }
            | Setting::GpuClockOffsetAt { .. }
            | Setting::MemoryClockOffsetAt { .. } => self.offsets_not_supported,
            Setting::PowerLimit { .. }
            | Setting::LockGpuClocks { .. }
            | Setting::ResetGpuClocks
            | Setting::LockMemoryClocks { .. }
            | Setting::ResetMemoryClocks => false,
        }
    }
}

fn parse_count(name: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("{name}={value:?}: expected a whole number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_fault() {
        let faults = Faults::parse(
            " no_permission,fans_not_supported, gpu_lost_after=3,slow_ms = 5,\
             offsets_not_supported,driver_not_loaded,no_gpus,xid_after_ms=7,\
             processes_not_supported,pstates_not_listed",
        );
        assert_eq!(
            faults,
            Ok(Faults {
                no_permission: true,
                fans_not_supported: true,
                gpu_lost_after_calls: Some(3),
                slow_ms: 5,
                offsets_not_supported: true,
                driver_not_loaded: true,
                no_gpus: true,
                xid_after_ms: Some(7),
                processes_not_supported: true,
                pstates_not_listed: true,
            })
        );
        assert_eq!(Faults::parse(""), Ok(Faults::default()));
    }

    #[test]
    fn rejects_unknown_faults_and_bad_numbers() {
        assert!(Faults::parse("no_permision").is_err());
        assert!(Faults::parse("gpu_lost_after").is_err());
        assert!(Faults::parse("gpu_lost_after=soon").is_err());
        assert!(Faults::parse("no_gpus=1").is_err());
    }

    #[test]
    fn gpu_is_lost_after_the_budget() {
        let faults = Faults::parse("gpu_lost_after=2").unwrap_or_default();
        assert!(!faults.gpu_lost(0));
        assert!(!faults.gpu_lost(1));
        assert!(faults.gpu_lost(2));
        assert!(!Faults::default().gpu_lost(1_000));
    }
}
