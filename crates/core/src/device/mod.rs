//! Talking to GPUs: the types every other room uses, and the `Backend` trait that the real
//! NVIDIA backend (`nvml`) and the simulator (`sim`) implement.

pub mod gate;
pub mod nvml;
pub mod process;
pub mod procfs;
pub mod sim;
mod throttle;
pub mod worker;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use process::{GpuProcess, ProcessKind};
pub use throttle::{ThrottleReason, ThrottleReasons};

use crate::units::watts_exact;
use gate::ValidatedSetting;

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

impl OffsetRangeMhz {
    /// Whether more than one offset is allowed.
    pub fn has_room(&self) -> bool {
        self.min_mhz < self.max_mhz
    }
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
    pub gpu_clock_offset_range: Option<OffsetRangeMhz>,
    pub memory_clock_offset_range: Option<OffsetRangeMhz>,
    /// The temperature at which the card starts slowing itself down (NVML's slowdown
    /// threshold): gputune's fan safety net hands the fans back to the driver below it.
    #[serde(default)]
    pub slowdown_temperature_c: Option<u32>,
    /// The rated boost clock (NVML's customer boost maximum), where the undervolt scanner
    /// locks the clock by default.
    #[serde(default)]
    pub boost_clock_mhz: Option<u32>,
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

/// Who drives a fan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FanMode {
    /// The driver's own temperature curve.
    Automatic,
    /// A fixed speed someone set.
    Manual { speed_pct: u32 },
}

/// The settings of a card that NVML can read back. Clock locks cannot be read through NVML:
/// the tuning engine keeps its own record of them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CurrentSettings {
    /// The power limit set (not the enforced one, which a board limit may lower).
    pub power_limit_mw: Option<u32>,
    pub gpu_clock_offset_mhz: Option<i32>,
    pub memory_clock_offset_mhz: Option<i32>,
    /// Each fan's mode; `None` when the card has no fans or does not report who drives them.
    #[serde(default)]
    pub fans: Option<Vec<FanMode>>,
}

/// A change to a card, as a user asks for it. Reaches hardware only as a
/// [`ValidatedSetting`], which `device::gate` alone can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
    GpuClockOffset {
        offset_mhz: i32,
    },
    MemoryClockOffset {
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
            Setting::FanSpeed {
                fan_index,
                speed_pct,
            } => format!("fan {fan_index} at {speed_pct} %"),
            Setting::FanAutomatic { fan_index } => format!("fan {fan_index} automatic"),
        }
    }
}

/// A GPU error NVML reports as an event (an "Xid"): the sign of an unstable setting, or worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticalEvent {
    pub gpu_index: u32,
    pub xid: u64,
}

impl CriticalEvent {
    /// What NVIDIA's documentation says an Xid usually means, for the common ones.
    pub fn meaning(&self) -> &'static str {
        match self.xid {
            13 => "a graphics engine exception, often an unstable clock or offset",
            31 => "a GPU memory page fault",
            43 => "the GPU stopped processing",
            45 => "a context was cleaned up after an error",
            48 => "a double-bit ECC error",
            61 | 62 => "an internal micro-controller error",
            63 | 64 => "an ECC page retirement",
            74 => "an NVLink error",
            79 => "the GPU fell off the bus",
            92 => "a high single-bit ECC error rate",
            94 | 95 => "an ECC error",
            119 | 120 => "a GSP firmware error",
            _ => "a GPU error",
        }
    }
}

/// Which backend is talking to the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Nvml,
    Sim,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Nvml => "nvml",
            BackendKind::Sim => "sim",
        }
    }
}

/// Everything that can go wrong talking to a GPU. Each message says what happened and, where
/// there is one, what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
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

/// Opens another handle to the same GPUs, for another thread (see `device::worker`).
pub type Reopener = std::sync::Arc<dyn Fn() -> Result<Box<dyn Backend>, DeviceError> + Send + Sync>;

/// A source of GPUs: the real driver or the simulator. Each handle is used by one thread at a
/// time; `reopener` makes another for another thread (docs/architecture.md, Threads).
pub trait Backend: Send {
    fn kind(&self) -> BackendKind;
    fn gpu_count(&mut self) -> Result<u32, DeviceError>;
    fn identity(&mut self, index: u32) -> Result<GpuIdentity, DeviceError>;
    fn constraints(&mut self, index: u32) -> Result<Constraints, DeviceError>;
    fn telemetry(&mut self, index: u32) -> Result<Telemetry, DeviceError>;
    /// The settings NVML can read back; `None` for what the card does not report.
    fn current_settings(&mut self, index: u32) -> Result<CurrentSettings, DeviceError>;
    /// The power limit the card enforces now (one cheap read, unlike a whole snapshot).
    fn enforced_power_limit(&mut self, index: u32) -> Result<Option<u32>, DeviceError> {
        Ok(self.telemetry(index)?.power_limit_mw)
    }
    /// The processes using GPU `index`, most VRAM first, with their users and commands;
    /// `None` when the card does not list them.
    fn processes(&mut self, index: u32) -> Result<Option<Vec<GpuProcess>>, DeviceError>;
    /// Writes one setting. Only `device::gate` can make a `ValidatedSetting`.
    fn apply(&mut self, index: u32, setting: &ValidatedSetting) -> Result<(), DeviceError>;
    /// How to open another handle to the same GPUs (the same simulated machine, the same
    /// NVML library), so a second thread can sample or revert while this one is busy.
    fn reopener(&self) -> Reopener;
    /// Starts listening for critical errors (Xids) on every GPU that reports them. A simulated
    /// card raises Xid 13 when it goes busy past its silicon's hard limit.
    fn watch_critical_events(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
    /// Waits at most `timeout_ms` for the next critical error; `None` when none came.
    fn next_critical_event(
        &mut self,
        timeout_ms: u32,
    ) -> Result<Option<CriticalEvent>, DeviceError> {
        std::thread::sleep(std::time::Duration::from_millis(u64::from(timeout_ms)));
        Ok(None)
    }
}

/// Which backend the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    /// NVML when it loads and finds a GPU, else the simulator.
    #[default]
    Auto,
    Nvml,
    Sim,
}

/// How to open a backend: the user's choice and where to find the pieces.
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    pub choice: BackendChoice,
    /// Path of libnvidia-ml; the system's default search when `None`.
    pub nvml_library_path: Option<PathBuf>,
    pub sim: sim::SimOptions,
}

/// An opened backend, and why the simulator stands in for NVML when it does.
pub struct OpenedBackend {
    pub backend: Box<dyn Backend>,
    /// Set when `auto` fell back to the simulator: the NVML error, for the banner and log.
    pub fallback_reason: Option<String>,
}

/// Opens the backend the user asked for. `auto` falls back to the simulator when NVML fails to
/// load or finds no GPU, and says why in `fallback_reason`.
pub fn open_backend(options: &BackendOptions) -> Result<OpenedBackend, DeviceError> {
    let open_sim = || -> Box<dyn Backend> { Box::new(sim::SimBackend::new(&options.sim)) };
    match options.choice {
        BackendChoice::Sim => Ok(OpenedBackend {
            backend: open_sim(),
            fallback_reason: None,
        }),
        BackendChoice::Nvml => Ok(OpenedBackend {
            backend: Box::new(nvml::NvmlBackend::open(
                options.nvml_library_path.as_deref(),
            )?),
            fallback_reason: None,
        }),
        BackendChoice::Auto => {
            match nvml::NvmlBackend::open(options.nvml_library_path.as_deref()) {
                Ok(backend) => Ok(OpenedBackend {
                    backend: Box::new(backend),
                    fallback_reason: None,
                }),
                Err(error) => {
                    tracing::warn!("NVML unavailable, using the simulated GPU: {error}");
                    Ok(OpenedBackend {
                        backend: open_sim(),
                        fallback_reason: Some(error.to_string()),
                    })
                }
            }
        }
    }
}

/// Finds a GPU by index ("0") or UUID (full, or a unique prefix of at least 8 characters).
pub fn resolve_gpu(backend: &mut dyn Backend, query: &str) -> Result<u32, DeviceError> {
    let count = backend.gpu_count()?;
    let uuids = (0..count)
        .map(|index| backend.identity(index).map(|identity| identity.uuid))
        .collect::<Result<Vec<_>, _>>()?;
    resolve_among(&uuids, query)
}

/// Finds a GPU among `uuids` (in index order) by index or UUID (full, or a unique prefix of
/// at least 8 characters).
pub fn resolve_among(uuids: &[String], query: &str) -> Result<u32, DeviceError> {
    let query = query.trim();
    let not_found = || DeviceError::GpuNotFound {
        query: crate::text::printable(query),
    };
    if let Ok(index) = query.parse::<u32>() {
        return if (index as usize) < uuids.len() {
            Ok(index)
        } else {
            Err(not_found())
        };
    }
    let wanted = query.to_ascii_lowercase();
    let matches: Vec<u32> = uuids
        .iter()
        .enumerate()
        .filter(|(_, uuid)| {
            let uuid = uuid.to_ascii_lowercase();
            uuid == wanted || (wanted.len() >= 8 && uuid.starts_with(&wanted))
        })
        .map(|(index, _)| index as u32)
        .collect();
    match matches.as_slice() {
        [index] => Ok(*index),
        _ => Err(not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(gpu: Option<(i32, i32)>, memory: Option<(i32, i32)>) -> Constraints {
        let range = |(min_mhz, max_mhz)| OffsetRangeMhz { min_mhz, max_mhz };
        Constraints {
            gpu_clock_offset_range: gpu.map(range),
            memory_clock_offset_range: memory.map(range),
            ..Constraints::default()
        }
    }

    #[test]
    fn an_offset_range_with_no_room_is_not_adjustable() {
        // What an H200 with driver 580 answers: supported, from 0 to 0 MHz.
        let h200 = offsets(Some((0, 0)), Some((0, 0)));
        assert!(!h200.clock_offsets_supported());
        assert_eq!(h200.adjustable_gpu_clock_offset_range(), None);
        assert_eq!(h200.adjustable_memory_clock_offset_range(), None);
        let rtx4090 = offsets(Some((-1000, 1000)), Some((-2000, 3000)));
        assert!(rtx4090.clock_offsets_supported());
        assert_eq!(
            rtx4090.adjustable_gpu_clock_offset_range(),
            rtx4090.gpu_clock_offset_range
        );
        let memory_only = offsets(Some((0, 0)), Some((-2000, 3000)));
        assert!(memory_only.clock_offsets_supported());
        assert_eq!(memory_only.adjustable_gpu_clock_offset_range(), None);
        assert!(!offsets(None, None).clock_offsets_supported());
    }
}
