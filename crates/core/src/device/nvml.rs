//! The real NVIDIA backend, through nvml-wrapper. NVML is loaded at run time, from the system's
//! default search path or from a path the user gives (WSL and non-standard installs need that).
//! Here: loading, device handles kept between calls, identity, and the `Backend` trait, each
//! method handed to the file that does it: `constraints.rs` (what a card allows),
//! `readings.rs` (each sample, with `slow.rs` and `energy.rs`), `settings.rs` (what a card
//! runs, and writing one validated setting), `offsets.rs` (clock offsets per P-state),
//! `processes.rs`, `events.rs` (Xids), `errors.rs` (what NVML's errors become).

mod constraints;
mod energy;
mod errors;
mod events;
mod offsets;
mod processes;
mod readings;
mod settings;
mod slow;
mod topology;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::PerformanceState;
use nvml_wrapper::error::NvmlError;

use errors::{map_error, map_load_error, optional};

use super::gate::ValidatedSetting;
use super::procfs::ProcReader;
use super::{Backend, CurrentSettings, Reopener};
use gputune_formats::card::{
    BackendKind, Constraints, CriticalEvent, DeviceError, GpuIdentity, GpuProcess, Telemetry,
};

/// An NVML device handle, kept between calls so each reading or write is one driver call,
/// not two (with a slow driver, the second call was a second more).
#[derive(Clone, Copy)]
struct DeviceHandle(nvml_wrapper_sys::bindings::nvmlDevice_t);

// SAFETY: an NVML device handle is an opaque token that NVML accepts from any thread (NVML is
// thread-safe); it stays valid until `nvmlShutdown`, which runs when the `Nvml` that made it is
// dropped, and the handles live in the same `NvmlBackend` as that `Nvml`.
unsafe impl Send for DeviceHandle {}

/// Talks to real GPUs through libnvidia-ml.
pub struct NvmlBackend {
    nvml: Nvml,
    /// The library this handle loaded, so another handle loads the same one.
    library_path: Option<PathBuf>,
    /// Device handles by index, once asked for.
    handles: Vec<Option<DeviceHandle>>,
    /// The set critical errors are reported to, once watched.
    events: Option<events::EventSet>,
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
        self.read_constraints(index)
    }

    fn telemetry(&mut self, index: u32) -> Result<Telemetry, DeviceError> {
        self.read_telemetry(index)
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
        self.read_settings(index)
    }

    fn apply(&mut self, index: u32, setting: &ValidatedSetting) -> Result<(), DeviceError> {
        self.write_setting(index, setting)
    }

    fn enforced_power_limit(&mut self, index: u32) -> Result<Option<u32>, DeviceError> {
        let handle = self.handle(index)?;
        let device = self.device_at(handle);
        optional(device.enforced_power_limit(), "enforced power limit", index)
    }

    fn topology(
        &mut self,
        a: u32,
        b: u32,
    ) -> Result<Option<gputune_formats::reports::links::Topology>, DeviceError> {
        self.read_topology(a, b)
    }

    fn p2p_access(
        &mut self,
        a: u32,
        b: u32,
    ) -> Result<Option<gputune_formats::reports::links::P2pAccess>, DeviceError> {
        self.read_p2p_access(a, b)
    }

    fn pcie_link(&mut self, index: u32) -> Result<super::PcieLinkNow, DeviceError> {
        self.read_pcie_link(index)
    }

    fn watch_critical_events(&mut self) -> Result<(), DeviceError> {
        self.watch_xids()
    }

    fn next_critical_event(
        &mut self,
        timeout_ms: u32,
    ) -> Result<Option<CriticalEvent>, DeviceError> {
        self.next_xid(timeout_ms)
    }

    fn reopener(&self) -> Reopener {
        let library_path = self.library_path.clone();
        Arc::new(move || {
            NvmlBackend::open(library_path.as_deref())
                .map(|backend| Box::new(backend) as Box<dyn Backend>)
        })
    }
}
