//! The simulated machine and the record of what was done to it: what `FAKE_NVML_STATE` holds.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::processes::{FakeProcess, check_processes, parse_processes};
use crate::store;
use crate::{LOAD_ENV, PROCESSES_ENV, PSTATES_ENV, SCENARIO_ENV};
use gputune_core::device::sim::{LoadPattern, SimMachine, SimScenario};
use gputune_formats::card::Setting;

/// Everything the fake driver remembers between calls (and, with a state file, processes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FakeState {
    /// The simulated GPUs; every call first advances them to the wall clock.
    pub machine: SimMachine,
    /// Every set/reset call made on a valid handle, refused ones included, oldest first.
    #[serde(default)]
    pub write_log: Vec<WriteRecord>,
    /// Calls made on a device handle so far, in every process (drives `gpu_lost_after`).
    #[serde(default)]
    pub device_calls: u64,
    /// Calls of `nvmlDeviceGetTotalEnergyConsumption` so far, in every process.
    #[serde(default)]
    pub energy_reads: u64,
    /// The processes the GPUs list (`FAKE_NVML_PROCESSES`, [`crate::register_process`]).
    #[serde(default)]
    pub processes: Vec<FakeProcess>,
}

/// One set/reset call as the fake driver saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRecord {
    /// Wall-clock time of the call, milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Which GPU the handle named.
    pub gpu_index: u32,
    /// The NVML function called, e.g. `"nvmlDeviceSetPowerManagementLimit"`.
    pub function: String,
    /// What the call asked for.
    pub setting: Setting,
    /// What the call returned: 0 for success, else the NVML error code.
    pub result_code: u32,
}

impl FakeState {
    /// A fresh state around `machine`: no writes, no device calls yet.
    pub fn new(machine: SimMachine) -> FakeState {
        FakeState {
            machine,
            write_log: Vec::new(),
            device_calls: 0,
            energy_reads: 0,
            processes: Vec::new(),
        }
    }

    /// A new machine as `FAKE_NVML_SCENARIO` and `FAKE_NVML_LOAD` describe it, warm at `now_ms`.
    pub(crate) fn from_env(now_ms: u64) -> Result<FakeState, String> {
        let scenario = match env_text(SCENARIO_ENV)? {
            None => SimScenario::default(),
            Some(name) => SimScenario::from_name(&name).ok_or_else(|| {
                format!(
                    "{SCENARIO_ENV}={name:?}: unknown scenario (use rtx4090, 8x-rtx4090 or \
                     datacenter-fanless)"
                )
            })?,
        };
        let load = match env_text(LOAD_ENV)? {
            None => LoadPattern::default(),
            Some(name) => parse_load(&name).ok_or_else(|| {
                format!(
                    "{LOAD_ENV}={name:?}: unknown load (use idle, training, stop-and-go or game)"
                )
            })?,
        };
        let linked = match env_text(PSTATES_ENV)?.as_deref() {
            None | Some("independent") => false,
            Some("linked") => true,
            Some(other) => {
                return Err(format!(
                    "{PSTATES_ENV}={other:?}: unknown P-state model (use independent or linked)"
                ));
            }
        };
        let mut machine = SimMachine::new(scenario, load, now_ms);
        for gpu in &mut machine.gpus {
            gpu.spec.offset_pstates_linked = linked;
        }
        let mut state = FakeState::new(machine);
        if let Some(list) = env_text(PROCESSES_ENV)? {
            state.processes = parse_processes(&list)?;
            check_processes(&state.machine, &state.processes)?;
        }
        Ok(state)
    }
}

/// Reads a state file, e.g. to check which writes a test's process made.
pub fn load_state(path: impl AsRef<Path>) -> Result<FakeState, String> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?;
    parse_state(&bytes).map_err(|error| format!("{}: {error}", path.display()))
}

/// Writes a state file atomically, under the same lock the fake library takes, e.g. to start
/// a test from a machine with particular settings.
pub fn save_state(path: impl AsRef<Path>, state: &FakeState) -> Result<(), String> {
    let path = path.as_ref();
    let _lock = store::lock_state_file(path)?;
    store::write_atomically(path, state)
}

/// Parses a state file's contents.
pub(crate) fn parse_state(bytes: &[u8]) -> Result<FakeState, String> {
    serde_json::from_slice(bytes).map_err(|error| format!("not a fake-nvml state: {error}"))
}

/// A variable's value; `None` when unset or blank.
fn env_text(name: &str) -> Result<Option<String>, String> {
    match std::env::var(name) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => Ok(Some(text.trim().to_owned())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{name} is not valid UTF-8")),
    }
}

/// Parses a load name the way gputune's `--sim-load` spells it (serde's kebab-case names).
fn parse_load(name: &str) -> Option<LoadPattern> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_names_match_the_command_line() {
        assert_eq!(parse_load("idle"), Some(LoadPattern::Idle));
        assert_eq!(parse_load("training"), Some(LoadPattern::Training));
        assert_eq!(parse_load("stop-and-go"), Some(LoadPattern::StopAndGo));
        assert_eq!(parse_load("game"), Some(LoadPattern::Game));
        assert_eq!(parse_load("gaming"), None);
    }

    #[test]
    fn state_round_trips_through_a_file() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|error| error.to_string())?;
        let path = dir.path().join("state.json");
        let mut state = FakeState::new(SimMachine::new(
            SimScenario::Rtx4090,
            LoadPattern::Idle,
            1_000_000,
        ));
        state.write_log.push(WriteRecord {
            time_ms: 5,
            gpu_index: 0,
            function: "nvmlDeviceSetPowerManagementLimit".to_owned(),
            setting: Setting::PowerLimit {
                power_limit_mw: 300_000,
            },
            result_code: 0,
        });
        save_state(&path, &state)?;
        let loaded = load_state(&path)?;
        assert_eq!(loaded.write_log, state.write_log);
        assert_eq!(loaded.machine.gpus.len(), 1);
        Ok(())
    }
}
