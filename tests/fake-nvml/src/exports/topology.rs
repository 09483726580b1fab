//! How two cards reach each other and whether the driver allows P2P between them, as the
//! simulator models the box (`gputune_core::device::sim::sim_topology`): the 8-GPU box's two
//! sockets of two PCIe switches. `FAKE_NVML_P2P`, read on every call, is `stock` (the default:
//! GeForce cards get no P2P, CNS) or `enabled` (a patched driver).

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t, nvmlGpuTopologyLevel_t, nvmlReturn_t,
};

use crate::call::{Ptr, api_call, index_of, on_state};
use crate::codes::{Code, INVALID_ARGUMENT, UNKNOWN, sim_error_code};
use crate::enums::{P2P_CAPS_READ, P2P_CAPS_WRITE};
use crate::faults::Faults;
use gputune_core::device::sim::{P2pDriver, sim_p2p_access, sim_topology};
use gputune_formats::reports::links::{P2pStatus, Topology};
use nvml_wrapper_sys::bindings as nvml;

/// The driver `FAKE_NVML_P2P` names; `UNKNOWN` (said on stderr) for a name it does not know.
fn p2p_driver() -> Result<P2pDriver, Code> {
    match std::env::var(crate::P2P_ENV) {
        Err(_) => Ok(P2pDriver::Stock),
        Ok(name) if name.trim().is_empty() => Ok(P2pDriver::Stock),
        Ok(name) => P2pDriver::from_name(&name).ok_or_else(|| {
            eprintln!(
                "fake-nvml: {}={name:?}: unknown P2P driver (use stock or enabled)",
                crate::P2P_ENV
            );
            UNKNOWN
        }),
    }
}

/// Runs `body` with the indices of both handles' GPUs, as one device call.
fn on_pair<T>(
    faults: &Faults,
    device1: nvmlDevice_t,
    device2: nvmlDevice_t,
    body: impl FnOnce(gputune_core::device::sim::SimScenario, u32, u32, u32) -> Result<T, Code>,
) -> Result<T, Code> {
    on_state(faults, device1, |state, first| {
        let second = index_of(state, faults, device2)?;
        let count = u32::try_from(state.machine.gpus.len()).map_err(|_| INVALID_ARGUMENT)?;
        body(state.machine.scenario, count, first, second)
    })
}

fn level_of(topology: Topology) -> nvmlGpuTopologyLevel_t {
    match topology {
        Topology::Internal => nvml::nvmlGpuLevel_enum_NVML_TOPOLOGY_INTERNAL,
        Topology::SingleSwitch => nvml::nvmlGpuLevel_enum_NVML_TOPOLOGY_SINGLE,
        Topology::MultipleSwitches => nvml::nvmlGpuLevel_enum_NVML_TOPOLOGY_MULTIPLE,
        Topology::HostBridge => nvml::nvmlGpuLevel_enum_NVML_TOPOLOGY_HOSTBRIDGE,
        Topology::NumaNode => nvml::nvmlGpuLevel_enum_NVML_TOPOLOGY_NODE,
        Topology::System => nvml::nvmlGpuLevel_enum_NVML_TOPOLOGY_SYSTEM,
    }
}

fn status_of(status: P2pStatus) -> nvmlGpuP2PStatus_t {
    match status {
        P2pStatus::Ok => nvml::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_OK,
        P2pStatus::ChipsetNotSupported => {
            nvml::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
        }
        P2pStatus::GpuNotSupported => nvml::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_GPU_NOT_SUPPORTED,
        P2pStatus::TopologyNotSupported => {
            nvml::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
        }
        P2pStatus::DisabledByRegkey => {
            nvml::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_DISABLED_BY_REGKEY
        }
        P2pStatus::NotSupported => nvml::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_NOT_SUPPORTED,
        P2pStatus::Unknown => nvml::nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_UNKNOWN,
    }
}

/// NVML: the nearest common ancestor of two cards on the PCIe tree.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    device1: nvmlDevice_t,
    device2: nvmlDevice_t,
    path_info: *mut nvmlGpuTopologyLevel_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let out = Ptr::new(path_info)?;
        let topology = on_pair(faults, device1, device2, |scenario, count, a, b| {
            sim_topology(scenario, count, a, b).map_err(|error| sim_error_code(&error))
        })?;
        // SAFETY: NVML's contract: the pointer is valid for a write.
        unsafe { out.write(level_of(topology)) };
        Ok(())
    })
}

/// NVML: whether `device1` may read (or write) `device2`'s memory directly.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    device1: nvmlDevice_t,
    device2: nvmlDevice_t,
    p2p_index: nvmlGpuP2PCapsIndex_t,
    p2p_status: *mut nvmlGpuP2PStatus_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let out = Ptr::new(p2p_status)?;
        let driver = p2p_driver()?;
        let access = on_pair(faults, device1, device2, |scenario, count, a, b| {
            sim_p2p_access(scenario, count, a, b, driver).map_err(|error| sim_error_code(&error))
        })?;
        let status = match p2p_index {
            P2P_CAPS_READ => access.read,
            P2P_CAPS_WRITE => access.write,
            // NVLink, atomics and the rest: these cards have none of them.
            _ => P2pStatus::NotSupported,
        };
        // SAFETY: NVML's contract: the pointer is valid for a write.
        unsafe { out.write(status_of(status)) };
        Ok(())
    })
}
