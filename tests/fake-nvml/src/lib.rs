//! A fake `libnvidia-ml.so`: the NVML C functions gputune calls, answered by gputune's own
//! simulator, so tests can drive the real NVML code path (`gputune_core::device::nvml`, through
//! nvml-wrapper and a real `dlopen`) on a machine without a GPU.
//!
//! Build it with `cargo build -p fake-nvml`; tests find the `.so` with [`fake_library_path`] and
//! hand it to `Nvml::builder().lib_path(...)` or gputune's `--nvml-lib`.
//!
//! # Contract
//!
//! **State.** When `FAKE_NVML_STATE` names a file, the whole simulated machine lives in that file
//! (JSON), so separate processes see the same "hardware": apply in one process, read in the
//! next. Every call takes an exclusive lock on `<state>.lock`, reads the state (creating it if
//! missing), advances the machine to the wall clock, does its work, and writes the state back
//! atomically (temporary file in the same folder, then rename). Without `FAKE_NVML_STATE` the
//! state lives in process memory. A corrupt state file makes calls return `UNKNOWN` (999) with
//! a message on stderr; the file is never overwritten.
//!
//! **Scenario.** `FAKE_NVML_SCENARIO` = `rtx4090` (default) | `8x-rtx4090` |
//! `datacenter-fanless`, and `FAKE_NVML_LOAD` = `idle` | `training` (default) | `stop-and-go` |
//! `game`, and `FAKE_NVML_PSTATES` = `independent` (default) | `linked`, are read once, when
//! the state is created. An unknown name makes that call return `UNKNOWN` and says why on
//! stderr.
//!
//! **Processes.** `FAKE_NVML_PROCESSES`, read when the state is created, lists processes as
//! comma-separated `GPU:PID:KIND:MIB` entries (KIND `compute`, `graphics` or `both`; MIB a
//! number or `n/a`, listed as `NVML_VALUE_NOT_AVAILABLE`), e.g. `0:4242:compute:20480`;
//! [`register_process`] and [`remove_process`] change the list in a state file later. The
//! compute and graphics lists (`nvmlDevice{Compute,Graphics}RunningProcesses`, unversioned
//! with `nvmlProcessInfo_v1_t`, `_v2` and `_v3` with `nvmlProcessInfo_v2_t`) hold the GPU's
//! processes of that kind, in the order registered, nothing else: the simulated load runs no
//! process of its own here. A pid is listed as given, whether or not it lives; a process on a
//! GPU the machine lacks, or holding more VRAM than its GPU has, is refused (`UNKNOWN`, and
//! an error from [`register_process`]).
//!
//! **Faults.** `FAKE_NVML_FAULTS` is a comma-separated list, read on every call; the file
//! `FAKE_NVML_FAULTS_FILE` names, when it exists, adds its own list (also read on every call,
//! so a test can slow down or break a driver under a process that is already running):
//! - `no_permission`: every set/reset call returns `NO_PERMISSION` (4), as for a normal user;
//! - `fans_not_supported`: fan count, speed, RPM, range and the fan setters return
//!   `NOT_SUPPORTED` (3);
//! - `gpu_lost_after=N`: after N device calls in total (counted in the state, so across
//!   processes), every device call returns `GPU_IS_LOST` (15), and so does getting a handle;
//! - `slow_ms=N`: every call sleeps N ms first;
//! - `offsets_not_supported`: clock offset get/set return `NOT_SUPPORTED`;
//! - `driver_not_loaded`: `nvmlInit_v2` returns `DRIVER_NOT_LOADED` (9);
//! - `no_gpus`: the device count is 0 and no handle can be had;
//! - `xid_after_ms=N`: an event set reports one critical error, Xid 13 on the first GPU
//!   registered to it, once the set is N ms old (once per set; sets live in their process);
//! - `processes_not_supported`: both process lists return `NOT_SUPPORTED`;
//! - `pstates_not_listed`: `nvmlDeviceGetSupportedPerformanceStates` returns `NOT_SUPPORTED`,
//!   as an older driver (gputune then knows P0's offsets only).
//!
//! **Xids and ECC, as the simulated card makes them.** Besides that fault, every Xid 13 a
//! simulated card raises (busy past its silicon's hard limit: gputune's docs/simulator.md) is
//! reported once to each event set its GPU was registered to before it happened. The ECC error
//! counters (`nvmlDeviceGetTotalEccErrors`) are the card's own: on the H100 zero until a test
//! adds some to a saved state (`SimGpu::inject_ecc_errors`); NOT_SUPPORTED on the RTX 4090,
//! whose ECC is off.
//!
//! An unknown fault makes `nvmlInit_v2` (and every later call) return `UNKNOWN`, saying why on
//! stderr. A "device call" is any call that takes a device handle.
//!
//! **Topology and P2P.** `nvmlDeviceGetTopologyCommonAncestor` and `nvmlDeviceGetP2PStatus`
//! answer as gputune's simulator models the box (two sockets of two PCIe switches in the 8-GPU
//! box); `FAKE_NVML_P2P` = `stock` (default) | `enabled`, read on every call, says whether the
//! driver allows P2P (an unknown value makes the call return `UNKNOWN`).
//!
//! **Errors, as the driver gives them.** Calls before `nvmlInit_v2` (or after the matching
//! `nvmlShutdown`; init is reference-counted) return `UNINITIALIZED` (1). Null out-pointers and
//! unknown handles return `INVALID_ARGUMENT` (2). Writes go through the simulated card's own
//! setters: out of range is `INVALID_ARGUMENT`, unsupported is `NOT_SUPPORTED`. Versioned
//! structs with the wrong `version` return `ARGUMENT_VERSION_MISMATCH` (25). Lists too small
//! for their buffer return `INSUFFICIENT_SIZE` (7) with the needed count written back. No call
//! panics across the C boundary: a panic inside becomes `UNKNOWN`.
//!
//! **What the card reports.** The fanless datacenter card has 0 fans (successfully); its fan
//! speed, RPM, range and control policy, and its clock offsets, are `NOT_SUPPORTED`. A fan's
//! control policy is manual when a speed was set, else the driver's curve; its target speed is
//! the speed set, or the curve's. The SM clock equals the
//! graphics clock; the video clock is `NOT_SUPPORTED`. Temperature thresholds: shutdown (0) =
//! the card's shutdown temperature, slowdown (1) = its hardware slowdown, GPU max (3) and
//! acoustic current (5) = its thermal target; others `NOT_SUPPORTED`. Clock offsets are per
//! P-state (`nvmlDevice{Get,Set}ClockOffsets` name one): the RTX 4090 lists P0, P2 and P8
//! (`nvmlDeviceGetSupportedPerformanceStates`), takes offsets in P0 and P2 (the card's ranges)
//! and reports P8's as 0 in a range of 0 to 0; it computes in P2, so only P2's offset changes
//! its clocks and stability under load. Independent P-states each keep their own offset;
//! linked ones all move with a write to any. Other P-states' offsets are `NOT_SUPPORTED`. A
//! write is logged as the P-state it named (`Setting::GpuClockOffsetAt`). The driver version is [`DRIVER_VERSION`], the NVML
//! version [`NVML_VERSION`].
//!
//! **Write log.** Every set/reset call on a valid handle, refused ones included, appends a
//! [`WriteRecord`] to [`FakeState::write_log`]; read it with [`load_state`]. A clock-offset call
//! for a clock other than graphics or memory is refused with `INVALID_ARGUMENT` and not logged,
//! as it names no gputune `Setting`.

#![warn(missing_docs)]

mod call;
mod codes;
mod enums;
mod exports;
mod faults;
mod locate;
mod processes;
mod state;
mod store;

pub use locate::fake_library_path;
pub use processes::{FakeProcess, register_process, remove_process};
pub use state::{FakeState, WriteRecord, load_state, save_state};

/// Environment variable naming the state file shared between processes.
pub const STATE_ENV: &str = "FAKE_NVML_STATE";
/// Environment variable choosing the simulated machine when the state is created.
pub const SCENARIO_ENV: &str = "FAKE_NVML_SCENARIO";
/// Environment variable choosing the simulated workload when the state is created.
pub const LOAD_ENV: &str = "FAKE_NVML_LOAD";
/// Environment variable listing the faults to inject (see the crate documentation).
pub const FAULTS_ENV: &str = "FAKE_NVML_FAULTS";
/// Environment variable naming a file of more faults, read on every call.
pub const FAULTS_FILE_ENV: &str = "FAKE_NVML_FAULTS_FILE";
/// Environment variable choosing, when the state is created, whether the cards' P-states share
/// one clock offset (`linked`) or each has its own (`independent`, the default).
pub const PSTATES_ENV: &str = "FAKE_NVML_PSTATES";
/// Environment variable listing the processes the GPUs run when the state is created.
pub const PROCESSES_ENV: &str = "FAKE_NVML_PROCESSES";
/// Environment variable giving each GPU's device-file number (`/dev/nvidiaN`), in NVML's index
/// order ("2,0,3,1"), read on every call; a GPU it does not cover has its index. Slurm's
/// gres.conf numbers cards this way, so a test can make that order differ from NVML's.
pub const MINORS_ENV: &str = "FAKE_NVML_MINORS";

/// Environment variable choosing, on every call, what the driver says of P2P between cards:
/// `stock` (the default: none on GeForce cards, "chipset not supported") or `enabled` (a
/// patched driver: P2P between the cards of one CPU socket).
pub const P2P_ENV: &str = "FAKE_NVML_P2P";

/// The driver version the fake reports (`nvmlSystemGetDriverVersion`).
pub const DRIVER_VERSION: &str = "fake-560.35";
/// The NVML version the fake reports (`nvmlSystemGetNVMLVersion`).
pub const NVML_VERSION: &str = "12.560.35";
/// The CUDA driver version the fake reports (`nvmlSystemGetCudaDriverVersion_v2`): 12.6.
pub const CUDA_DRIVER_VERSION: i32 = 12_060;
