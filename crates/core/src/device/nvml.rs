//! The real NVIDIA backend, through nvml-wrapper. NVML is loaded at run time, from the system's
//! default search path or from a path the user gives (WSL and non-standard installs need that).

mod energy;
mod offsets;
mod processes;
mod slow;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    Clock, ClockId, PerformanceState, TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::device::{FanControlPolicy, GpuLockedClocksSetting};
use nvml_wrapper::error::NvmlError;

use super::gate::ValidatedSetting;
use super::procfs::ProcReader;
use super::{Backend, CurrentSettings, Reopener, compute_offset_mhz, compute_offset_range};
use crate::clock::wall_clock_ms;
use gputune_formats::{
    card::{
        BackendKind, ClockRangeMhz, Constraints, CriticalEvent, DeviceError, FanMode, FanRangePct,
        FanReading, GpuIdentity, GpuProcess, Setting, Telemetry,
    },
    throttle::ThrottleReasons,
};

/// An NVML device handle, kept between calls so each reading or write is one driver call,
/// not two (with a slow driver, the second call was a second more).
#[derive(Clone, Copy)]
struct DeviceHandle(nvml_wrapper_sys::bindings::nvmlDevice_t);

// SAFETY: an NVML device handle is an opaque token that NVML accepts from any thread (NVML is
// thread-safe); it stays valid until `nvmlShutdown`, which runs when the `Nvml` that made it is
// dropped, and the handles live in the same `NvmlBackend` as that `Nvml`.
unsafe impl Send for DeviceHandle {}

/// An NVML event set, freed with its backend.
struct EventSet(nvml_wrapper_sys::bindings::nvmlEventSet_t);

// SAFETY: as for `DeviceHandle`: an opaque NVML token, usable from any thread, freed (in
// `NvmlBackend::drop`) before the `Nvml` that made it shuts down.
unsafe impl Send for EventSet {}

/// Talks to real GPUs through libnvidia-ml.
pub struct NvmlBackend {
    nvml: Nvml,
    /// The library this handle loaded, so another handle loads the same one.
    library_path: Option<PathBuf>,
    /// Device handles by index, once asked for.
    handles: Vec<Option<DeviceHandle>>,
    /// The set critical errors are reported to, once watched.
    events: Option<EventSet>,
    /// Who the processes on the GPUs are (/proc), with the user names already looked up.
    proc_reader: ProcReader,
    /// Each GPU's energy counter, really read at most once a second (it is slow: `energy`).
    energy: Vec<energy::EnergyCounter>,
    /// Each GPU's slowly changing readings, read at most once a second (`slow`).
    slow: Vec<Option<slow::SlowReadings>>,
    /// The start of the monotonic clock of the energy counters and slow readings.
    opened_at: Instant,
    /// Each GPU's P-states to read clock offsets of, once listed (`offsets`).
    offset_pstates: Vec<Option<Vec<PerformanceState>>>,
}

impl Drop for NvmlBackend {
    fn drop(&mut self) {
        if let Some(set) = self.events.take()
            && let Ok(free) = self.nvml.lib().nvmlEventSetFree.as_ref()
        {
            // SAFETY: the set came from nvmlEventSetCreate of this library and is freed once.
            unsafe { free(set.0) };
        }
    }
}

const NVML_EVENT_XID_CRITICAL: u64 = 8;
const NVML_ERROR_TIMEOUT: u32 = 10;

impl NvmlBackend {
    /// Loads NVML and checks that it sees at least one GPU.
    pub fn open(library_path: Option<&Path>) -> Result<NvmlBackend, DeviceError> {
        let chosen = library_path.map(choose_library).transpose()?;
        let library_path = chosen.as_deref();
        let nvml = match library_path {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
            None => Nvml::init(),
        }
        .map_err(|error| map_load_error(error, library_path))?;
        let mut backend = NvmlBackend {
            nvml,
            library_path: library_path.map(Path::to_path_buf),
            handles: Vec::new(),
            events: None,
            proc_reader: ProcReader::default(),
            energy: Vec::new(),
            slow: Vec::new(),
            opened_at: Instant::now(),
            offset_pstates: Vec::new(),
        };
        if backend.gpu_count()? == 0 {
            return Err(DeviceError::NoGpus);
        }
        Ok(backend)
    }

    /// GPU `index`'s handle: asked of NVML once, then kept.
    fn handle(&mut self, index: u32) -> Result<DeviceHandle, DeviceError> {
        if let Some(Some(handle)) = self.handles.get(index as usize).copied() {
            return Ok(handle);
        }
        let device = self
            .nvml
            .device_by_index(index)
            .map_err(|error| match error {
                NvmlError::InvalidArg | NvmlError::NotFound => DeviceError::GpuNotFound {
                    query: index.to_string(),
                },
                other => map_error(other, "opening the GPU", index),
            })?;
        // SAFETY: reading the handle of a live device of this `Nvml`.
        let handle = DeviceHandle(unsafe { device.handle() });
        if self.handles.len() <= index as usize {
            self.handles.resize(index as usize + 1, None);
        }
        self.handles[index as usize] = Some(handle);
        Ok(handle)
    }

    /// GPU `index`'s P-states to read clock offsets of: listed by the driver once, then kept.
    fn offset_pstates(
        &mut self,
        index: u32,
        handle: DeviceHandle,
    ) -> Result<Vec<PerformanceState>, DeviceError> {
        if let Some(Some(pstates)) = self.offset_pstates.get(index as usize) {
            return Ok(pstates.clone());
        }
        let device = device_in(&self.nvml, handle);
        let pstates = offsets::listed_pstates(&device)
            .map_err(|error| map_error(error, "listing the P-states", index))?;
        if self.offset_pstates.len() <= index as usize {
            self.offset_pstates.resize(index as usize + 1, None);
        }
        self.offset_pstates[index as usize] = Some(pstates.clone());
        Ok(pstates)
    }

    /// The device behind a kept handle.
    fn device_at(&self, handle: DeviceHandle) -> nvml_wrapper::Device<'_> {
        device_in(&self.nvml, handle)
    }
}

/// The device behind a handle `nvml` gave (borrowing only the library, not the backend).
fn device_in(nvml: &Nvml, handle: DeviceHandle) -> nvml_wrapper::Device<'_> {
    // SAFETY: the handle came from this `Nvml` (`NvmlBackend::handle`), which is still
    // initialized.
    unsafe { nvml_wrapper::Device::new(handle.0, nvml) }
}

/// The library to load for `--nvml-lib` / `GPUTUNE_NVML_LIB`: a path, or several separated by
/// `:` as PATH lists folders, of which the first that exists is loaded. A container that may
/// find the driver's library in more than one place (the host's `/usr/lib`, or
/// `/run/nvidia/driver` where NVIDIA's GPU Operator installs the driver) names them all; the
/// daemon asks again each time it retries while waiting for the driver.
pub fn choose_library(listed: &Path) -> Result<PathBuf, DeviceError> {
    let Some(text) = listed.to_str().filter(|text| text.contains(':')) else {
        return Ok(listed.to_path_buf());
    };
    if listed.exists() {
        return Ok(listed.to_path_buf());
    }
    let candidates: Vec<&str> = text.split(':').filter(|part| !part.is_empty()).collect();
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| DeviceError::LibraryNotLoaded {
            detail: format!(
                "none of {} exists",
                candidates
                    .iter()
                    .map(|candidate| crate::text::printable(candidate))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

fn map_load_error(error: NvmlError, library_path: Option<&Path>) -> DeviceError {
    match error {
        NvmlError::LibloadingError(load_error) => DeviceError::LibraryNotLoaded {
            detail: match library_path {
                Some(path) => format!("{}: {load_error}", path.display()),
                None => load_error.to_string(),
            },
        },
        NvmlError::DriverNotLoaded => DeviceError::DriverNotLoaded {
            detail: "NVML says the driver is not loaded".to_string(),
        },
        NvmlError::FailedToLoadSymbol(symbol) => DeviceError::LibraryNotLoaded {
            detail: format!("the library lacks {symbol}; is it really libnvidia-ml?"),
        },
        other => DeviceError::Other {
            what: "Starting NVML".to_string(),
            detail: other.to_string(),
        },
    }
}

/// Maps an NVML error on GPU `index` while doing `what` to a `DeviceError`.
fn map_error(error: NvmlError, what: &str, index: u32) -> DeviceError {
    match error {
        NvmlError::GpuLost | NvmlError::ResetRequired => DeviceError::GpuLost { index },
        NvmlError::NoPermission => DeviceError::NoPermission {
            action: what.to_string(),
        },
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => DeviceError::NotSupported {
            what: what.to_string(),
        },
        NvmlError::InvalidArg => DeviceError::InvalidArgument {
            what: what.to_string(),
        },
        NvmlError::DriverNotLoaded | NvmlError::Uninitialized => DeviceError::DriverNotLoaded {
            detail: error.to_string(),
        },
        other => DeviceError::Other {
            what: what.to_string(),
            detail: other.to_string(),
        },
    }
}

/// A reading the card may not support: unsupported or refused becomes `None`; a lost GPU or a
/// dead driver is an error that ends the whole snapshot.
fn optional<T>(
    result: Result<T, NvmlError>,
    what: &str,
    index: u32,
) -> Result<Option<T>, DeviceError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) => match map_error(error, what, index) {
            fatal @ (DeviceError::GpuLost { .. } | DeviceError::DriverNotLoaded { .. }) => {
                Err(fatal)
            }
            other => {
                tracing::debug!("GPU {index}: no {what}: {other}");
                Ok(None)
            }
        },
    }
}

impl Backend for NvmlBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Nvml
    }

    fn gpu_count(&mut self) -> Result<u32, DeviceError> {
        self.nvml
            .device_count()
            .map_err(|error| map_error(error, "counting GPUs", 0))
    }

    fn identity(&mut self, index: u32) -> Result<GpuIdentity, DeviceError> {
        let handle = self.handle(index)?;
        let device = self.device_at(handle);
        let uuid = device
            .uuid()
            .map_err(|error| map_error(error, "reading the UUID", index))?;
        let name =
            optional(device.name(), "name", index)?.unwrap_or_else(|| "NVIDIA GPU".to_string());
        let pci_bus_id = optional(device.pci_info(), "PCI bus id", index)?
            .map(|info| info.bus_id)
            .unwrap_or_default();
        let memory_total_bytes =
            optional(device.memory_info(), "memory size", index)?.map_or(0, |info| info.total);
        let architecture =
            optional(device.architecture(), "architecture", index)?.map(|arch| arch.to_string());
        Ok(GpuIdentity {
            index,
            uuid,
            name,
            pci_bus_id,
            memory_total_bytes,
            driver_version: optional(self.nvml.sys_driver_version(), "driver version", index)?,
            nvml_version: optional(self.nvml.sys_nvml_version(), "NVML version", index)?,
            architecture,
            minor_number: optional(device.minor_number(), "minor number", index)?,
        })
    }

    fn constraints(&mut self, index: u32) -> Result<Constraints, DeviceError> {
        let handle = self.handle(index)?;
        let pstates = self.offset_pstates(index, handle)?;
        let device = self.device_at(handle);
        let power = optional(
            device.power_management_limit_constraints(),
            "power limit range",
            index,
        )?;
        let power_limit_default_mw = optional(
            device.power_management_limit_default(),
            "default power limit",
            index,
        )?;
        let memory_clocks = optional(
            supported_clocks(&self.nvml, &device, ClockList::Memory),
            "supported memory clocks",
            index,
        )?
        .unwrap_or_default();
        let memory_clock_range = range_of(&memory_clocks);
        let gpu_clock_range = match memory_clocks.iter().max() {
            Some(&top_memory_clock) => {
                let clocks = optional(
                    supported_clocks(
                        &self.nvml,
                        &device,
                        ClockList::Graphics { top_memory_clock },
                    ),
                    "supported graphics clocks",
                    index,
                )?
                .unwrap_or_default();
                range_of(&clocks)
            }
            None => None,
        };
        let fan_count = optional(device.num_fans(), "fan count", index)?.unwrap_or(0);
        let fan_speed_range = if fan_count > 0 {
            optional(device.min_max_fan_speed(), "fan speed range", index)?
                .map(|(min_pct, max_pct)| FanRangePct { min_pct, max_pct })
        } else {
            None
        };
        let offset_ranges = |clock: Clock, what: &str| {
            optional(offsets::read(&device, clock, &pstates), what, index).map(|readings| {
                readings
                    .unwrap_or_default()
                    .iter()
                    .map(offsets::PstateReading::range)
                    .collect::<Vec<_>>()
            })
        };
        let gpu_clock_offset_pstates = offset_ranges(Clock::Graphics, "GPU clock offset")?;
        let memory_clock_offset_pstates = offset_ranges(Clock::Memory, "memory clock offset")?;
        Ok(Constraints {
            power_limit_min_mw: power.as_ref().map(|range| range.min_limit),
            power_limit_max_mw: power.as_ref().map(|range| range.max_limit),
            power_limit_default_mw,
            gpu_clock_range,
            memory_clock_range,
            fan_count,
            fan_speed_range,
            gpu_clock_offset_range: compute_offset_range(&gpu_clock_offset_pstates),
            memory_clock_offset_range: compute_offset_range(&memory_clock_offset_pstates),
            gpu_clock_offset_pstates,
            memory_clock_offset_pstates,
            slowdown_temperature_c: optional(
                device.temperature_threshold(TemperatureThreshold::Slowdown),
                "slowdown temperature",
                index,
            )?,
            // Only the scanner's default lock depends on it: a driver without it just has none.
            boost_clock_mhz: device
                .clock(Clock::Graphics, ClockId::CustomerMaxBoost)
                .ok()
                .filter(|clock_mhz| *clock_mhz > 0),
        })
    }

    fn telemetry(&mut self, index: u32) -> Result<Telemetry, DeviceError> {
        let handle = self.handle(index)?;
        let device = device_in(&self.nvml, handle);
        let now_ms = u64::try_from(self.opened_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        if self.slow.len() <= index as usize {
            self.slow.resize(index as usize + 1, None);
        }
        let slow = match self.slow[index as usize].filter(|slow| slow.fresh_at(now_ms)) {
            Some(slow) => slow,
            None => {
                let slow = slow::SlowReadings {
                    read_at_ms: now_ms,
                    fan_count: optional(device.num_fans(), "fan count", index)?.unwrap_or(0),
                    pcie_link_gen: optional(
                        device.current_pcie_link_gen(),
                        "PCIe generation",
                        index,
                    )?,
                    pcie_link_width: optional(
                        device.current_pcie_link_width(),
                        "PCIe width",
                        index,
                    )?,
                    pcie_link_gen_max: optional(
                        device.max_pcie_link_gen(),
                        "maximum PCIe generation",
                        index,
                    )?,
                    pcie_link_width_max: optional(
                        device.max_pcie_link_width(),
                        "maximum PCIe width",
                        index,
                    )?,
                    ecc: slow::ecc_counts(&device, index)?,
                };
                self.slow[index as usize] = Some(slow);
                slow
            }
        };
        let fan_count = slow.fan_count;
        let mut fans = Vec::new();
        for fan in 0..fan_count {
            fans.push(FanReading {
                speed_pct: optional(device.fan_speed(fan), "fan speed", index)?,
                speed_rpm: optional(device.fan_speed_rpm(fan), "fan RPM", index)?,
            });
        }
        let fans_reported = fans
            .iter()
            .any(|fan| fan.speed_pct.is_some() || fan.speed_rpm.is_some());
        let utilization = optional(device.utilization_rates(), "utilization", index)?;
        let performance_state = optional(device.performance_state(), "performance state", index)?
            .and_then(|state| {
                let number = state.as_c();
                (number <= 15).then_some(number)
            });
        let power_draw_mw = optional(device.power_usage(), "power draw", index)?;
        if self.energy.len() <= index as usize {
            self.energy
                .resize(index as usize + 1, energy::EnergyCounter::default());
        }
        let counter = &mut self.energy[index as usize];
        let energy_total_mj = match power_draw_mw {
            Some(power_mw) if !counter.due(now_ms, power_draw_mw) => {
                counter.carry(now_ms, power_mw)
            }
            _ => counter.read(
                now_ms,
                optional(device.total_energy_consumption(), "energy counter", index)?,
            ),
        };
        Ok(Telemetry {
            sampled_at_ms: wall_clock_ms(),
            power_draw_mw,
            // Read at every sample: a limit another handle (the engine's) writes shows at once.
            power_limit_mw: optional(device.enforced_power_limit(), "enforced power limit", index)?,
            temperature_c: optional(
                device.temperature(TemperatureSensor::Gpu),
                "temperature",
                index,
            )?,
            fans: fans_reported.then_some(fans),
            gpu_clock_mhz: optional(device.clock_info(Clock::Graphics), "graphics clock", index)?,
            sm_clock_mhz: optional(device.clock_info(Clock::SM), "SM clock", index)?,
            memory_clock_mhz: optional(device.clock_info(Clock::Memory), "memory clock", index)?,
            utilization_gpu_pct: utilization.as_ref().map(|rates| rates.gpu),
            utilization_memory_pct: utilization.as_ref().map(|rates| rates.memory),
            memory_used_bytes: optional(device.memory_info(), "memory use", index)?
                .map(|info| info.used),
            performance_state,
            throttle_reasons: optional(
                device.current_throttle_reasons(),
                "throttle reasons",
                index,
            )?
            .map(|reasons| ThrottleReasons::from_bits(reasons.bits())),
            pcie_link_gen: slow.pcie_link_gen,
            pcie_link_width: slow.pcie_link_width,
            pcie_link_gen_max: slow.pcie_link_gen_max,
            pcie_link_width_max: slow.pcie_link_width_max,
            energy_total_mj,
            processes: None,
            ecc: slow.ecc,
        })
    }

    fn processes(&mut self, index: u32) -> Result<Option<Vec<GpuProcess>>, DeviceError> {
        let handle = self.handle(index)?;
        let listed = processes::listed_processes(&self.device_at(handle), index)?;
        Ok(listed.map(|listed| {
            listed
                .into_iter()
                .map(|process| self.proc_reader.describe(process))
                .collect()
        }))
    }

    fn current_settings(&mut self, index: u32) -> Result<CurrentSettings, DeviceError> {
        let handle = self.handle(index)?;
        let pstates = self.offset_pstates(index, handle)?;
        let device = self.device_at(handle);
        let offsets_of = |clock: Clock, what: &str| {
            optional(offsets::read(&device, clock, &pstates), what, index).map(|readings| {
                readings
                    .unwrap_or_default()
                    .iter()
                    .map(offsets::PstateReading::offset)
                    .collect::<Vec<_>>()
            })
        };
        let gpu_clock_offsets = offsets_of(Clock::Graphics, "GPU clock offset")?;
        let memory_clock_offsets = offsets_of(Clock::Memory, "memory clock offset")?;
        let fan_count = optional(device.num_fans(), "fan count", index)?.unwrap_or(0);
        let mut fans = Vec::new();
        for fan in 0..fan_count {
            let Some(policy) =
                optional(device.fan_control_policy(fan), "fan control policy", index)?
            else {
                break;
            };
            fans.push(match policy {
                FanControlPolicy::TemperatureContinousSw => FanMode::Automatic,
                FanControlPolicy::Manual => {
                    let target = optional(
                        target_fan_speed(&self.nvml, &device, fan),
                        "fan target speed",
                        index,
                    )?;
                    let speed = match target {
                        Some(speed) => Some(speed),
                        None => optional(device.fan_speed(fan), "fan speed", index)?,
                    };
                    match speed {
                        Some(speed_pct) => FanMode::Manual { speed_pct },
                        // Manual, at a speed nobody can read: not something to restore.
                        None => break,
                    }
                }
            });
        }
        Ok(CurrentSettings {
            power_limit_mw: optional(device.power_management_limit(), "power limit", index)?,
            gpu_clock_offset_mhz: compute_offset_mhz(&gpu_clock_offsets),
            memory_clock_offset_mhz: compute_offset_mhz(&memory_clock_offsets),
            fans: (fan_count > 0 && fans.len() == fan_count as usize).then_some(fans),
            gpu_clock_offsets,
            memory_clock_offsets,
        })
    }

    fn apply(&mut self, index: u32, setting: &ValidatedSetting) -> Result<(), DeviceError> {
        let setting = *setting.setting();
        let handle = self.handle(index)?;
        let pstates = match setting {
            Setting::GpuClockOffset { .. } | Setting::MemoryClockOffset { .. } => {
                self.offset_pstates(index, handle)?
            }
            _ => Vec::new(),
        };
        let mut device = self.device_at(handle);
        let result = match setting {
            Setting::PowerLimit { power_limit_mw } => {
                device.set_power_management_limit(power_limit_mw)
            }
            Setting::LockGpuClocks { min_mhz, max_mhz } => {
                device.set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric {
                    min_clock_mhz: min_mhz,
                    max_clock_mhz: max_mhz,
                })
            }
            Setting::ResetGpuClocks => device.reset_gpu_locked_clocks(),
            Setting::LockMemoryClocks { min_mhz, max_mhz } => {
                device.set_mem_locked_clocks(min_mhz, max_mhz)
            }
            Setting::ResetMemoryClocks => device.reset_mem_locked_clocks(),
            Setting::GpuClockOffset { offset_mhz } => {
                offsets::set_for_compute(&mut device, Clock::Graphics, &pstates, offset_mhz)
            }
            Setting::MemoryClockOffset { offset_mhz } => {
                offsets::set_for_compute(&mut device, Clock::Memory, &pstates, offset_mhz)
            }
            Setting::GpuClockOffsetAt { pstate, offset_mhz } => {
                offsets::set_at(&mut device, Clock::Graphics, pstate, offset_mhz)
            }
            Setting::MemoryClockOffsetAt { pstate, offset_mhz } => {
                offsets::set_at(&mut device, Clock::Memory, pstate, offset_mhz)
            }
            Setting::FanSpeed {
                fan_index,
                speed_pct,
            } => device.set_fan_speed(fan_index, speed_pct),
            Setting::FanAutomatic { fan_index } => device.set_default_fan_speed(fan_index),
        };
        result.map_err(|error| map_error(error, &setting.describe(), index))
    }

    fn enforced_power_limit(&mut self, index: u32) -> Result<Option<u32>, DeviceError> {
        let handle = self.handle(index)?;
        let device = self.device_at(handle);
        optional(device.enforced_power_limit(), "enforced power limit", index)
    }

    fn watch_critical_events(&mut self) -> Result<(), DeviceError> {
        if self.events.is_some() {
            return Ok(());
        }
        let count = self.gpu_count()?;
        let handles = (0..count)
            .map(|index| self.handle(index))
            .collect::<Result<Vec<_>, _>>()?;
        let library = self.nvml.lib();
        let missing = |name: &str| DeviceError::NotSupported {
            what: format!("GPU error events ({name} is missing)"),
        };
        let create = library
            .nvmlEventSetCreate
            .as_ref()
            .map_err(|_| missing("nvmlEventSetCreate"))?;
        let register = library
            .nvmlDeviceRegisterEvents
            .as_ref()
            .map_err(|_| missing("nvmlDeviceRegisterEvents"))?;
        let mut set: nvml_wrapper_sys::bindings::nvmlEventSet_t = std::ptr::null_mut();
        // SAFETY: `set` is valid for a write.
        let code = unsafe { create(&mut set) };
        if code != NVML_SUCCESS {
            return Err(map_error(NvmlError::from(code), "watching GPU errors", 0));
        }
        self.events = Some(EventSet(set));
        let mut registered = 0;
        for (index, handle) in handles.iter().enumerate() {
            // SAFETY: a live device handle and event set of this library.
            let code = unsafe { register(handle.0, NVML_EVENT_XID_CRITICAL, set) };
            match code {
                NVML_SUCCESS => registered += 1,
                // Some GPUs (and vGPUs) do not report Xids as events: they are not watched.
                code => tracing::info!(
                    "GPU {index}: GPU error events are not reported ({})",
                    NvmlError::from(code)
                ),
            }
        }
        if registered == 0 {
            return Err(DeviceError::NotSupported {
                what: "GPU error events on any GPU".to_string(),
            });
        }
        Ok(())
    }

    fn next_critical_event(
        &mut self,
        timeout_ms: u32,
    ) -> Result<Option<CriticalEvent>, DeviceError> {
        let Some(set) = self.events.as_ref().map(|set| set.0) else {
            return Err(DeviceError::Other {
                what: "Waiting for GPU errors".to_string(),
                detail: "they are not watched".to_string(),
            });
        };
        let wait = self.nvml.lib().nvmlEventSetWait_v2.as_ref().map_err(|_| {
            DeviceError::NotSupported {
                what: "GPU error events (nvmlEventSetWait_v2 is missing)".to_string(),
            }
        })?;
        // SAFETY: an all-zero struct of integers and a null pointer is a valid value to fill.
        let mut data: nvml_wrapper_sys::bindings::nvmlEventData_t = unsafe { std::mem::zeroed() };
        // SAFETY: a live event set of this library; `data` is valid for a write.
        let code = unsafe { wait(set, &mut data, timeout_ms) };
        match code {
            NVML_SUCCESS => {
                let gpu_index = self
                    .handles
                    .iter()
                    .position(|handle| handle.is_some_and(|handle| handle.0 == data.device))
                    .map_or(0, |index| index as u32);
                Ok(Some(CriticalEvent {
                    gpu_index,
                    xid: data.eventData,
                }))
            }
            NVML_ERROR_TIMEOUT => Ok(None),
            code => Err(map_error(
                NvmlError::from(code),
                "waiting for GPU errors",
                0,
            )),
        }
    }

    fn reopener(&self) -> Reopener {
        let library_path = self.library_path.clone();
        Arc::new(move || {
            NvmlBackend::open(library_path.as_deref())
                .map(|backend| Box::new(backend) as Box<dyn Backend>)
        })
    }
}

/// The speed a manual fan was set to (`nvmlDeviceGetTargetFanSpeed`, which nvml-wrapper 0.13
/// does not wrap): the fan's own reading lags behind while it spins up or down.
fn target_fan_speed(
    nvml: &Nvml,
    device: &nvml_wrapper::Device<'_>,
    fan: u32,
) -> Result<u32, NvmlError> {
    let function = nvml
        .lib()
        .nvmlDeviceGetTargetFanSpeed
        .as_ref()
        .map_err(|error| NvmlError::FailedToLoadSymbol(error.to_string()))?;
    let mut speed = 0u32;
    // SAFETY: the handle comes from a live `Device` of this `Nvml`; `speed` is valid for a write.
    let code = unsafe { function(device.handle(), fan, &mut speed) };
    match code {
        NVML_SUCCESS => Ok(speed),
        code => Err(NvmlError::from(code)),
    }
}

/// Which supported-clock list to read.
enum ClockList {
    Memory,
    Graphics { top_memory_clock: u32 },
}

const NVML_SUCCESS: u32 = 0;
const NVML_ERROR_INSUFFICIENT_SIZE: u32 = 7;

/// nvml-wrapper 0.13's `supported_graphics_clocks` / `supported_memory_clocks` treat
/// INSUFFICIENT_SIZE as success and return a buffer of zeros when a card lists more clocks than
/// their first guess (128 graphics clocks; an RTX 4090 lists about 190). So ask NVML for the
/// count first, then for exactly that many, as nvml.h describes.
fn supported_clocks(
    nvml: &Nvml,
    device: &nvml_wrapper::Device<'_>,
    list: ClockList,
) -> Result<Vec<u32>, NvmlError> {
    let library = nvml.lib();
    // SAFETY: the handle comes from a live `Device` of this `Nvml`, which outlives the calls.
    let handle = unsafe { device.handle() };
    let call = |count: &mut u32, clocks: *mut u32| -> Result<u32, NvmlError> {
        match list {
            ClockList::Memory => {
                let function = library
                    .nvmlDeviceGetSupportedMemoryClocks
                    .as_ref()
                    .map_err(|error| NvmlError::FailedToLoadSymbol(error.to_string()))?;
                // SAFETY: `count` is valid; `clocks` is null with a count of 0, or holds `count`
                // entries (nvml.h's contract for this call).
                Ok(unsafe { function(handle, count, clocks) })
            }
            ClockList::Graphics { top_memory_clock } => {
                let function = library
                    .nvmlDeviceGetSupportedGraphicsClocks
                    .as_ref()
                    .map_err(|error| NvmlError::FailedToLoadSymbol(error.to_string()))?;
                // SAFETY: as above.
                Ok(unsafe { function(handle, top_memory_clock, count, clocks) })
            }
        }
    };
    let mut count = 0;
    match call(&mut count, std::ptr::null_mut())? {
        NVML_SUCCESS => return Ok(Vec::new()),
        NVML_ERROR_INSUFFICIENT_SIZE => {}
        code => return Err(NvmlError::from(code)),
    }
    // A card lists a few hundred clocks at most; a larger count is a broken driver.
    let mut clocks = vec![0u32; count.min(4096) as usize];
    let mut filled = clocks.len() as u32;
    match call(&mut filled, clocks.as_mut_ptr())? {
        NVML_SUCCESS => {
            clocks.truncate(filled as usize);
            Ok(clocks)
        }
        code => Err(NvmlError::from(code)),
    }
}

fn range_of(clocks_mhz: &[u32]) -> Option<ClockRangeMhz> {
    match (clocks_mhz.iter().min(), clocks_mhz.iter().max()) {
        (Some(&min_mhz), Some(&max_mhz)) => Some(ClockRangeMhz { min_mhz, max_mhz }),
        _ => None,
    }
}
