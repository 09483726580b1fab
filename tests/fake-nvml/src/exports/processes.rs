//! The processes on a GPU: the compute and graphics lists, in each version a monitor may link
//! (gputune and nvml-wrapper call `_v3`; nvtop and nvitop take the newest they find).

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlProcessInfo_v1_t, nvmlProcessInfo_v2_t, nvmlProcessUtilizationSample_t,
    nvmlReturn_t,
};

use crate::call::{api_call, on_state, write_list};
use crate::codes::{Code, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED};
use crate::faults::Faults;
use gputune_core::clock::wall_clock_ms;
use gputune_formats::card::ProcessKind;

/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned long long: VRAM the driver cannot tell.
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// A MIG instance id when MIG is off.
const NO_INSTANCE: c_uint = c_uint::MAX;

/// Which list is asked for.
#[derive(Clone, Copy)]
enum List {
    Compute,
    Graphics,
}

/// The GPU's processes in `list`: (pid, VRAM as NVML writes it).
fn listed(faults: &Faults, device: nvmlDevice_t, list: List) -> Result<Vec<(u32, u64)>, Code> {
    on_state(faults, device, |state, index| {
        if faults.processes_not_supported {
            return Err(NOT_SUPPORTED);
        }
        Ok(state
            .processes
            .iter()
            .filter(|process| process.gpu_index == index)
            .filter(|process| match (list, process.kind) {
                (List::Compute, ProcessKind::Compute | ProcessKind::ComputeAndGraphics)
                | (List::Graphics, ProcessKind::Graphics | ProcessKind::ComputeAndGraphics) => true,
                (List::Compute, ProcessKind::Graphics) | (List::Graphics, ProcessKind::Compute) => {
                    false
                }
            })
            .map(|process| {
                (
                    process.pid,
                    process.used_memory_bytes.unwrap_or(VALUE_NOT_AVAILABLE),
                )
            })
            .collect())
    })
}

/// A list in the unversioned layout (`nvmlProcessInfo_v1_t`).
///
/// # Safety
/// NVML's contract: `count` is valid for reads and writes, `infos` null or valid for `*count`.
unsafe fn list_v1(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v1_t,
    list: List,
) -> nvmlReturn_t {
    api_call(|faults| {
        let entries: Vec<nvmlProcessInfo_v1_t> = listed(faults, device, list)?
            .into_iter()
            .map(|(pid, used)| nvmlProcessInfo_v1_t {
                pid,
                usedGpuMemory: used,
            })
            .collect();
        // SAFETY: this function's contract.
        unsafe { write_list(count, infos, &entries) }
    })
}

/// A list in the `_v2` / `_v3` layout (`nvmlProcessInfo_v2_t`, MIG ids "none").
///
/// # Safety
/// NVML's contract: `count` is valid for reads and writes, `infos` null or valid for `*count`.
unsafe fn list_v2(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
    list: List,
) -> nvmlReturn_t {
    api_call(|faults| {
        let entries: Vec<nvmlProcessInfo_v2_t> = listed(faults, device, list)?
            .into_iter()
            .map(|(pid, used)| nvmlProcessInfo_v2_t {
                pid,
                usedGpuMemory: used,
                gpuInstanceId: NO_INSTANCE,
                computeInstanceId: NO_INSTANCE,
            })
            .collect();
        // SAFETY: this function's contract.
        unsafe { write_list(count, infos, &entries) }
    })
}

/// NVML: processes with a compute context (CUDA), `nvmlProcessInfo_v2_t` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { list_v2(device, info_count, infos, List::Compute) }
}

/// NVML: processes with a compute context, `nvmlProcessInfo_v2_t` entries (as `_v3`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { list_v2(device, info_count, infos, List::Compute) }
}

/// NVML: processes with a compute context, `nvmlProcessInfo_v1_t` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v1_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { list_v1(device, info_count, infos, List::Compute) }
}

/// NVML: processes with a graphics context (OpenGL, Vulkan), `nvmlProcessInfo_v2_t` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { list_v2(device, info_count, infos, List::Graphics) }
}

/// NVML: processes with a graphics context, `nvmlProcessInfo_v2_t` entries (as `_v3`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { list_v2(device, info_count, infos, List::Graphics) }
}

/// NVML: processes with a graphics context, `nvmlProcessInfo_v1_t` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v1_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { list_v1(device, info_count, infos, List::Graphics) }
}

/// NVML: each process's share of the GPU since `last_seen_time_stamp` (Unix µs): the card's
/// utilization split evenly between its processes, one sample each, stamped now. NOT_FOUND
/// when the card runs none, as the driver answers when it has no sample.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    process_samples_count: *mut c_uint,
    last_seen_time_stamp: c_ulonglong,
) -> nvmlReturn_t {
    api_call(|faults| {
        let now_us = wall_clock_ms().saturating_mul(1000);
        let samples = on_state(faults, device, |state, index| {
            if faults.processes_not_supported {
                return Err(NOT_SUPPORTED);
            }
            let gpu = state
                .machine
                .gpus
                .get(index as usize)
                .ok_or(INVALID_ARGUMENT)?;
            let pids: Vec<u32> = state
                .processes
                .iter()
                .filter(|process| process.gpu_index == index)
                .map(|process| process.pid)
                .collect();
            let share = |pct: u32| pct / u32::try_from(pids.len().max(1)).unwrap_or(1);
            let (sm_pct, memory_pct) = (
                share(gpu.reading.utilization_gpu_pct),
                share(gpu.reading.utilization_memory_pct),
            );
            Ok(pids
                .into_iter()
                .map(|pid| nvmlProcessUtilizationSample_t {
                    pid,
                    timeStamp: now_us,
                    smUtil: sm_pct,
                    memUtil: memory_pct,
                    encUtil: 0,
                    decUtil: 0,
                })
                .collect::<Vec<_>>())
        })?;
        if samples.is_empty() || now_us <= last_seen_time_stamp {
            return Err(NOT_FOUND);
        }
        // SAFETY: NVML's contract: the count is valid, the array null or valid for `*count`.
        unsafe { write_list(process_samples_count, utilization, &samples) }
    })
}
