//! The cards: what a GPU is, what it reads, what it accepts and what may be written to it, and
//! what can go wrong talking to it. Their code is in `device` (the backends, the gate).

use serde::{Deserialize, Serialize};

use super::throttle::ThrottleReasons;
use crate::units::watts_exact;

/// What a GPU is: fixed for as long as the driver runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuIdentity {
    /// Position in the driver's enumeration; for display only, it can change between boots.
    pub index: u32,
    /// NVML UUID ("GPU-..."): how gputune names a GPU everywhere.
    pub uuid: String,
    pub name: String,
    /// PCI bus id as NVML writes it ("00000000:01:00.0").
    pub pci_bus_id: String,
    pub memory_total_bytes: u64,
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    /// Chip generation ("Ada", "Hopper", ...), used for precision advice.
    pub architecture: Option<String>,
    /// The device file's number (`/dev/nvidiaN`): how Slurm's gres.conf (`File=`) and its
    /// `SLURM_STEP_GPUS` name a card, whatever NVML's index order. `None` where the driver
    /// does not say (an older daemon, Windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_number: Option<u32>,
}

/// One fan's reading. Either value is `None` when the card does not report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanReading {
    pub speed_pct: Option<u32>,
    pub speed_rpm: Option<u32>,
}

/// One snapshot of everything that changes. `None` means "this card does not report it",
/// never zero.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Telemetry {
    /// Wall-clock time of the snapshot, milliseconds since the Unix epoch.
    pub sampled_at_ms: u64,
    pub power_draw_mw: Option<u32>,
    /// The limit the card enforces right now (may be below the one set, e.g. by a board limit).
    pub power_limit_mw: Option<u32>,
    pub temperature_c: Option<u32>,
    /// `None` when the card has no fans or does not report them (datacenter cards).
    pub fans: Option<Vec<FanReading>>,
    pub gpu_clock_mhz: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    pub utilization_gpu_pct: Option<u32>,
    pub utilization_memory_pct: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    /// Performance state number: 0 is P0 (fastest) ... 15 is P15.
    pub performance_state: Option<u32>,
    pub throttle_reasons: Option<ThrottleReasons>,
    pub pcie_link_gen: Option<u32>,
    pub pcie_link_width: Option<u32>,
    pub pcie_link_gen_max: Option<u32>,
    pub pcie_link_width_max: Option<u32>,
    /// Energy used since the driver loaded, millijoules.
    pub energy_total_mj: Option<u64>,
    /// The processes on the GPU, most VRAM first; `None` when the card does not list them.
    /// `Backend::telemetry` leaves it `None`: the sampler fills it from `Backend::processes`
    /// (at most once a second, the same list on the samples in between), and so does
    /// `gputune status`.
    #[serde(default)]
    pub processes: Option<Vec<GpuProcess>>,
    /// The card's ECC error counters; `None` when it has no ECC (or it is off) or does not say.
    /// Read from the driver at most once a second.
    #[serde(default)]
    pub ecc: Option<EccCounts>,
}

/// ECC errors the memory made since the driver loaded (NVML's volatile counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EccCounts {
    /// Single-bit errors the memory corrected.
    pub corrected_volatile: u64,
    /// Errors it could not correct: data was lost.
    pub uncorrected_volatile: u64,
}

/// An inclusive clock range in MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockRangeMhz {
    pub min_mhz: u32,
    pub max_mhz: u32,
}

/// An inclusive clock-offset range in MHz (negative offsets lower the clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRangeMhz {
    pub min_mhz: i32,
    pub max_mhz: i32,
}

/// One P-state's clock offset as the card reports it (P0 is the fastest state; GeForce cards
/// run CUDA work in P2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PstateOffset {
    pub pstate: u32,
    pub offset_mhz: i32,
}

/// The range one P-state's clock offset may be set in (a range of 0 to 0: not adjustable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PstateOffsetRange {
    pub pstate: u32,
    pub min_mhz: i32,
    pub max_mhz: i32,
}

/// An inclusive fan-speed range in percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanRangePct {
    pub min_pct: u32,
    pub max_pct: u32,
}

/// What a card accepts. `None` means the card does not support that control.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Constraints {
    pub power_limit_min_mw: Option<u32>,
    pub power_limit_max_mw: Option<u32>,
    pub power_limit_default_mw: Option<u32>,
    pub gpu_clock_range: Option<ClockRangeMhz>,
    pub memory_clock_range: Option<ClockRangeMhz>,
    pub fan_count: u32,
    pub fan_speed_range: Option<FanRangePct>,
    /// The range a GPU clock offset for the P-states compute runs in (`Setting::GpuClockOffset`)
    /// may take: what every one of them accepts.
    pub gpu_clock_offset_range: Option<OffsetRangeMhz>,
    pub memory_clock_offset_range: Option<OffsetRangeMhz>,
    /// Each P-state the card reports a GPU clock offset for, with its own range; empty when
    /// the driver does not say per P-state (then only P0's offset is known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_clock_offset_pstates: Vec<PstateOffsetRange>,
    /// The same for the memory clock.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_clock_offset_pstates: Vec<PstateOffsetRange>,
    /// The temperature at which the card starts slowing itself down (NVML's slowdown
    /// threshold): gputune's fan safety net hands the fans back to the driver below it.
    #[serde(default)]
    pub slowdown_temperature_c: Option<u32>,
    /// The rated boost clock (NVML's customer boost maximum), where the undervolt scanner
    /// locks the clock by default.
    #[serde(default)]
    pub boost_clock_mhz: Option<u32>,
}

/// Who drives a fan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FanMode {
    /// The driver's own temperature curve.
    Automatic,
    /// A fixed speed someone set.
    Manual { speed_pct: u32 },
}

/// A change to a card, as a user asks for it. Reaches hardware only as a
/// `device::gate::ValidatedSetting` (gputune-core), which `device::gate` alone can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Setting {
    PowerLimit {
        power_limit_mw: u32,
    },
    LockGpuClocks {
        min_mhz: u32,
        max_mhz: u32,
    },
    ResetGpuClocks,
    LockMemoryClocks {
        min_mhz: u32,
        max_mhz: u32,
    },
    ResetMemoryClocks,
    /// The GPU clock offset of the P-states compute runs in (P0 and P2, each the card offers
    /// offsets in; written once where the card links them).
    GpuClockOffset {
        offset_mhz: i32,
    },
    MemoryClockOffset {
        offset_mhz: i32,
    },
    /// The GPU clock offset of one P-state alone: what puts back a card whose P-states had
    /// different offsets.
    GpuClockOffsetAt {
        pstate: u32,
        offset_mhz: i32,
    },
    MemoryClockOffsetAt {
        pstate: u32,
        offset_mhz: i32,
    },
    FanSpeed {
        fan_index: u32,
        speed_pct: u32,
    },
    /// Hand the fan back to the driver's own curve.
    FanAutomatic {
        fan_index: u32,
    },
}

/// A GPU error NVML reports as an event (an "Xid"): the sign of an unstable setting, or worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticalEvent {
    pub gpu_index: u32,
    pub xid: u64,
}

/// Which backend is talking to the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    Nvml,
    Sim,
}

/// Everything that can go wrong talking to a GPU. Each message says what happened and, where
/// there is one, what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DeviceError {
    #[error(
        "The NVIDIA management library could not be loaded ({detail}). Install the NVIDIA driver, or point --nvml-lib / GPUTUNE_NVML_LIB at libnvidia-ml.so.1."
    )]
    LibraryNotLoaded { detail: String },
    #[error("The NVIDIA driver is not running ({detail}). Check `nvidia-smi`, or load the driver.")]
    DriverNotLoaded { detail: String },
    #[error("The NVIDIA driver found no GPU.")]
    NoGpus,
    #[error(
        "No GPU matches \"{query}\": give an index (0, 1, ...) or a UUID from `gputune status`."
    )]
    GpuNotFound { query: String },
    #[error(
        "Changing the {action} needs administrator rights: set up the gputune daemon once with `sudo gputune daemon install` (or install the package: `sudo apt install ./gputune_*.deb`), then log out and in again; or run gputune as root."
    )]
    NoPermission { action: String },
    #[error("This GPU does not support {what}.")]
    NotSupported { what: String },
    #[error("The driver refused {what}: the value is outside what this GPU accepts.")]
    InvalidArgument { what: String },
    #[error(
        "GPU {index} stopped answering (it fell off the bus or its driver reset). Check `dmesg`; a reboot may be needed."
    )]
    GpuLost { index: u32 },
    #[error(
        "The driver did not answer within {waited_s} s while {what}: it is hung or very slow. Check `nvidia-smi` and `dmesg`."
    )]
    Timeout { what: String, waited_s: u64 },
    #[error("{what} failed: {detail}")]
    Other { what: String, detail: String },
}

/// What kind of context a process holds on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessKind {
    /// A compute context (CUDA, a training job): `nvmlDeviceGetComputeRunningProcesses`.
    Compute,
    /// A graphics context (OpenGL, Vulkan, a desktop): `nvmlDeviceGetGraphicsRunningProcesses`.
    Graphics,
    /// Listed by both.
    ComputeAndGraphics,
}

/// One process using a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// As NVML reports it: the pid in the host's pid namespace.
    pub pid: u32,
    pub kind: ProcessKind,
    /// VRAM the process holds on this GPU; `None` when the driver does not say (Windows' WDDM,
    /// some MIG and vGPU setups).
    pub used_memory_bytes: Option<u64>,
    /// The owner's user name (or uid, when it has no name); `None` when it could not be read.
    pub user: Option<String>,
    /// The command line, made printable and cut to `device::process::MAX_COMMAND_CHARS` (gputune-core); `None` when it could
    /// not be read.
    pub command: Option<String>,
    /// The process had ended by the time /proc was read (NVML lists a process a little longer
    /// than it lives, and a pid can end between the two).
    #[serde(default)]
    pub exited: bool,
    /// Its parent, grandparent, … as /proc named them when it was read (nearest first, at most
    /// `device::procfs::MAX_ANCESTORS` of gputune-core, init left out); empty when /proc could
    /// not tell. A job's worker started by a launcher (torchrun, accelerate, a shell script)
    /// is known as the job's by it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestor_pids: Vec<u32>,
}

impl OffsetRangeMhz {
    /// Whether more than one offset is allowed.
    pub fn has_room(&self) -> bool {
        self.min_mhz < self.max_mhz
    }
}

impl PstateOffsetRange {
    pub fn range(&self) -> OffsetRangeMhz {
        OffsetRangeMhz {
            min_mhz: self.min_mhz,
            max_mhz: self.max_mhz,
        }
    }
}

impl Constraints {
    /// Whether the driver lets us shift the voltage/frequency curve (driver 555 and later,
    /// consumer cards).
    /// A range with no room (an H200 with driver 580 answers 0 to 0 MHz) is not adjustable.
    pub fn clock_offsets_supported(&self) -> bool {
        self.adjustable_gpu_clock_offset_range().is_some()
            || self.adjustable_memory_clock_offset_range().is_some()
    }

    /// The GPU clock offset range, when it has room to move (a slider's range).
    pub fn adjustable_gpu_clock_offset_range(&self) -> Option<OffsetRangeMhz> {
        self.gpu_clock_offset_range.filter(OffsetRangeMhz::has_room)
    }

    /// The memory clock offset range, when it has room to move.
    pub fn adjustable_memory_clock_offset_range(&self) -> Option<OffsetRangeMhz> {
        self.memory_clock_offset_range
            .filter(OffsetRangeMhz::has_room)
    }
}

impl Setting {
    /// A short description for messages and logs ("power limit 315 W").
    pub fn describe(&self) -> String {
        match self {
            Setting::PowerLimit { power_limit_mw } => {
                format!("power limit {}", watts_exact(*power_limit_mw))
            }
            Setting::LockGpuClocks { min_mhz, max_mhz } => {
                format!("GPU clock lock {min_mhz}-{max_mhz} MHz")
            }
            Setting::ResetGpuClocks => "GPU clock reset".to_string(),
            Setting::LockMemoryClocks { min_mhz, max_mhz } => {
                format!("memory clock lock {min_mhz}-{max_mhz} MHz")
            }
            Setting::ResetMemoryClocks => "memory clock reset".to_string(),
            Setting::GpuClockOffset { offset_mhz } => {
                format!("GPU clock offset {offset_mhz:+} MHz")
            }
            Setting::MemoryClockOffset { offset_mhz } => {
                format!("memory clock offset {offset_mhz:+} MHz")
            }
            Setting::GpuClockOffsetAt { pstate, offset_mhz } => {
                format!("GPU clock offset {offset_mhz:+} MHz in P{pstate}")
            }
            Setting::MemoryClockOffsetAt { pstate, offset_mhz } => {
                format!("memory clock offset {offset_mhz:+} MHz in P{pstate}")
            }
            Setting::FanSpeed {
                fan_index,
                speed_pct,
            } => format!("fan {fan_index} at {speed_pct} %"),
            Setting::FanAutomatic { fan_index } => format!("fan {fan_index} automatic"),
        }
    }
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Nvml => "nvml",
            BackendKind::Sim => "sim",
        }
    }
}

impl DeviceError {
    /// Whether nothing more will get through to this GPU (it fell off the bus, the driver went
    /// away or stopped answering): the caller stops talking to it instead of trying the next call.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            DeviceError::GpuLost { .. }
                | DeviceError::DriverNotLoaded { .. }
                | DeviceError::Timeout { .. }
        )
    }
}

impl ProcessKind {
    /// nvidia-smi's letters: "C", "G", "C+G".
    pub fn short(self) -> &'static str {
        match self {
            ProcessKind::Compute => "C",
            ProcessKind::Graphics => "G",
            ProcessKind::ComputeAndGraphics => "C+G",
        }
    }

    /// "compute", "graphics", "compute + graphics".
    pub fn describe(self) -> &'static str {
        match self {
            ProcessKind::Compute => "compute",
            ProcessKind::Graphics => "graphics",
            ProcessKind::ComputeAndGraphics => "compute + graphics",
        }
    }

    /// The kind of a process listed as both (`self` in one list, `other` in another).
    pub fn with(self, other: ProcessKind) -> ProcessKind {
        if self == other {
            self
        } else {
            ProcessKind::ComputeAndGraphics
        }
    }
}

impl GpuProcess {
    /// Whether this process is the job `job_pid` (a session's, as its holder says) or was
    /// started by it, however deep.
    pub fn belongs_to_job(&self, job_pid: Option<u32>) -> bool {
        job_pid.is_some_and(|job| self.pid == job || self.ancestor_pids.contains(&job))
    }

    /// The command as shown: the command line, "(exited)" or "(unknown)".
    pub fn command_text(&self) -> &str {
        match (&self.command, self.exited) {
            (Some(command), _) => command,
            (None, true) => "(exited)",
            (None, false) => "(unknown)",
        }
    }

    /// The user as shown, "?" when unknown.
    pub fn user_text(&self) -> &str {
        self.user.as_deref().unwrap_or("?")
    }
}
