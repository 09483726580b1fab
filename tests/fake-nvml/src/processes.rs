//! The processes the fake driver lists on its GPUs: registered by tests, through
//! `FAKE_NVML_PROCESSES` when the state is created or [`register_process`] afterwards.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::PROCESSES_ENV;
use crate::state::{load_state, parse_state};
use crate::store;
use gputune_core::device::sim::SimMachine;
use gputune_formats::card::ProcessKind;

/// One process as the fake driver lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeProcess {
    /// The GPU it runs on.
    pub gpu_index: u32,
    /// Its pid: a real one (so /proc tells who it is), or one that is gone, as a process NVML
    /// still lists for a moment after it ended.
    pub pid: u32,
    /// Which list it is in: compute, graphics, or both.
    pub kind: ProcessKind,
    /// VRAM it holds; `None` is listed as `NVML_VALUE_NOT_AVAILABLE`.
    pub used_memory_bytes: Option<u64>,
}

/// Adds `process` to the state file at `path` (replacing one with the same GPU and pid), under
/// the lock the library takes. The state is created as the environment describes it when the
/// file does not exist yet.
pub fn register_process(path: impl AsRef<Path>, process: FakeProcess) -> Result<(), String> {
    update_processes(path.as_ref(), |processes| {
        processes.retain(|known| (known.gpu_index, known.pid) != (process.gpu_index, process.pid));
        processes.push(process);
    })
}

/// Removes every process with `pid` from the state file at `path`.
pub fn remove_process(path: impl AsRef<Path>, pid: u32) -> Result<(), String> {
    update_processes(path.as_ref(), |processes| {
        processes.retain(|known| known.pid != pid);
    })
}

fn update_processes(path: &Path, change: impl FnOnce(&mut Vec<FakeProcess>)) -> Result<(), String> {
    let _lock = store::lock_state_file(path)?;
    let mut state = match std::fs::read(path) {
        Ok(bytes) => parse_state(&bytes).map_err(|error| format!("{}: {error}", path.display()))?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            crate::state::FakeState::from_env(gputune_core::clock::wall_clock_ms())?
        }
        Err(error) => return Err(format!("reading {}: {error}", path.display())),
    };
    change(&mut state.processes);
    check_processes(&state.machine, &state.processes)?;
    store::write_atomically(path, &state)?;
    // Read back, so a caller learns at once if the file cannot be used.
    load_state(path).map(|_| ())
}

/// Refuses processes no driver would list: on a GPU the machine does not have, or holding more
/// VRAM than their GPU has (monitors such as nvtop assert on that).
pub(crate) fn check_processes(
    machine: &SimMachine,
    processes: &[FakeProcess],
) -> Result<(), String> {
    for process in processes {
        let Some(gpu) = machine.gpus.get(process.gpu_index as usize) else {
            return Err(format!(
                "process {} is on GPU {}, but the machine has {} GPU(s)",
                process.pid,
                process.gpu_index,
                machine.gpus.len()
            ));
        };
        if process
            .used_memory_bytes
            .is_some_and(|bytes| bytes > gpu.spec.memory_total_bytes)
        {
            return Err(format!(
                "process {} holds more VRAM than GPU {} has ({} bytes)",
                process.pid, process.gpu_index, gpu.spec.memory_total_bytes
            ));
        }
    }
    Ok(())
}

/// Parses `FAKE_NVML_PROCESSES`: comma-separated `GPU:PID:KIND:MIB` entries, KIND `compute`,
/// `graphics` or `both`, MIB a number or `n/a`. Blank entries are ignored.
pub(crate) fn parse_processes(list: &str) -> Result<Vec<FakeProcess>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let fields: Vec<&str> = entry.split(':').map(str::trim).collect();
            let [gpu, pid, kind, mib] = fields.as_slice() else {
                return Err(format!(
                    "{PROCESSES_ENV}: {entry:?} is not GPU:PID:KIND:MIB (e.g. 0:4242:compute:20480)"
                ));
            };
            let number = |what: &str, text: &str| {
                text.parse::<u64>().map_err(|_| {
                    format!("{PROCESSES_ENV}: {entry:?}: {what} {text:?} is not a whole number")
                })
            };
            let kind = match *kind {
                "compute" => ProcessKind::Compute,
                "graphics" => ProcessKind::Graphics,
                "both" => ProcessKind::ComputeAndGraphics,
                other => {
                    return Err(format!(
                        "{PROCESSES_ENV}: {entry:?}: kind {other:?} (use compute, graphics or both)"
                    ));
                }
            };
            let used_memory_bytes = match *mib {
                "n/a" => None,
                mib => Some(number("MiB", mib)?.saturating_mul(1 << 20)),
            };
            Ok(FakeProcess {
                gpu_index: u32::try_from(number("GPU", gpu)?)
                    .map_err(|_| format!("{PROCESSES_ENV}: {entry:?}: GPU out of range"))?,
                pid: u32::try_from(number("pid", pid)?)
                    .map_err(|_| format!("{PROCESSES_ENV}: {entry:?}: pid out of range"))?,
                kind,
                used_memory_bytes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_environment_list() {
        assert_eq!(
            parse_processes(" 0:4242:compute:20480, 1:77:both:n/a,"),
            Ok(vec![
                FakeProcess {
                    gpu_index: 0,
                    pid: 4242,
                    kind: ProcessKind::Compute,
                    used_memory_bytes: Some(20_480 << 20),
                },
                FakeProcess {
                    gpu_index: 1,
                    pid: 77,
                    kind: ProcessKind::ComputeAndGraphics,
                    used_memory_bytes: None,
                },
            ])
        );
        assert_eq!(parse_processes(""), Ok(Vec::new()));
        let machine = SimMachine::new(
            gputune_core::device::sim::SimScenario::Rtx4090,
            gputune_core::device::sim::LoadPattern::Idle,
            0,
        );
        let fits = parse_processes("0:1:compute:20480").unwrap_or_default();
        assert_eq!(check_processes(&machine, &fits), Ok(()));
        for impossible in ["1:1:compute:10", "0:1:compute:70000"] {
            let processes = parse_processes(impossible).unwrap_or_default();
            assert!(
                check_processes(&machine, &processes).is_err(),
                "{impossible}"
            );
        }
        for bad in [
            "0:1:compute",
            "0:x:compute:1",
            "0:1:cuda:1",
            "0:1:compute:-5",
        ] {
            assert!(parse_processes(bad).is_err(), "{bad}");
        }
    }
}
