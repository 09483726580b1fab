//! Modes monitors show beside the readings (nvitop's and nvidia-smi's columns): compute mode,
//! persistence, display, driver model, ECC and MIG, answered as the simulated card would. A
//! GeForce card (the RTX 4090): persistence off, no display attached (a training box), ECC
//! available but off (so its error counters are NOT_SUPPORTED), no MIG. A datacenter card (the
//! H100): persistence on, ECC on with the simulated card's error counts, MIG off. The driver model is Windows-only:
//! NOT_SUPPORTED, as on every Linux driver.

use std::ffi::{c_uint, c_ulonglong};

use gputune_core::device::sim::SimGpu;
use nvml_wrapper_sys::bindings::{
    nvmlComputeMode_enum_NVML_COMPUTEMODE_DEFAULT, nvmlComputeMode_t, nvmlDevice_t,
    nvmlDriverModel_t, nvmlEccCounterType_enum_NVML_ECC_COUNTER_TYPE_COUNT, nvmlEccCounterType_t,
    nvmlEnableState_enum_NVML_FEATURE_DISABLED, nvmlEnableState_enum_NVML_FEATURE_ENABLED,
    nvmlEnableState_t, nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED,
    nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_COUNT, nvmlMemoryErrorType_t, nvmlReturn_t,
};

use crate::call::{Ptr, api_call, get_from_gpu, on_gpu};
use crate::codes::{INVALID_ARGUMENT, NOT_SUPPORTED};

const DISABLED: nvmlEnableState_t = nvmlEnableState_enum_NVML_FEATURE_DISABLED;
const ENABLED: nvmlEnableState_t = nvmlEnableState_enum_NVML_FEATURE_ENABLED;

/// Whether the card is a GeForce (consumer) card rather than a datacenter one.
pub(crate) fn is_geforce(gpu: &SimGpu) -> bool {
    gpu.spec.name.contains("GeForce")
}

/// ECC is on by default on datacenter cards, off (but available) on the RTX 4090.
fn ecc_enabled(gpu: &SimGpu) -> bool {
    gpu.spec.ecc_reported
}

/// NVML: who may create contexts (the default: any process, any number).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    device: nvmlDevice_t,
    mode: *mut nvmlComputeMode_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, mode, |_, _| {
            Ok(nvmlComputeMode_enum_NVML_COMPUTEMODE_DEFAULT)
        })
    }
}

/// NVML: whether the driver stays loaded with no client (on for datacenter cards).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: nvmlDevice_t,
    mode: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, mode, |_, gpu| {
            Ok(if is_geforce(gpu) { DISABLED } else { ENABLED })
        })
    }
}

/// NVML: whether a display is initialized on the card (none: a training box).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDisplayActive(
    device: nvmlDevice_t,
    is_active: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, is_active, |_, _| Ok(DISABLED)) }
}

/// NVML: whether a display is connected (none).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDisplayMode(
    device: nvmlDevice_t,
    display: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, display, |_, _| Ok(DISABLED)) }
}

/// NVML: the Windows driver model (WDDM/TCC): NOT_SUPPORTED on Linux.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel(
    device: nvmlDevice_t,
    current: *mut nvmlDriverModel_t,
    pending: *mut nvmlDriverModel_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let _ = (Ptr::new(current)?, Ptr::new(pending)?);
        on_gpu(faults, device, |_| Err(NOT_SUPPORTED))
    })
}

/// NVML: the Windows driver model, newer name: NOT_SUPPORTED on Linux.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel_v2(
    device: nvmlDevice_t,
    current: *mut nvmlDriverModel_t,
    pending: *mut nvmlDriverModel_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { nvmlDeviceGetDriverModel(device, current, pending) }
}

/// NVML: ECC now and after the next reboot.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let (current, pending) = (Ptr::new(current)?, Ptr::new(pending)?);
        let mode = on_gpu(faults, device, |gpu| {
            Ok(if ecc_enabled(gpu) { ENABLED } else { DISABLED })
        })?;
        // SAFETY: NVML's contract: both pointers are valid for a write.
        unsafe {
            current.write(mode);
            pending.write(mode);
        }
        Ok(())
    })
}

/// NVML: ECC errors counted since the driver loaded (the simulated card's counters: none
/// until its memory runs past its margin or a test adds some); the aggregate counter counts
/// the same (the fake's driver never reloads). NOT_SUPPORTED while ECC is off.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    counter_type: nvmlEccCounterType_t,
    ecc_counts: *mut c_ulonglong,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, ecc_counts, |_, gpu| {
            if error_type >= nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_COUNT
                || counter_type >= nvmlEccCounterType_enum_NVML_ECC_COUNTER_TYPE_COUNT
            {
                return Err(INVALID_ARGUMENT);
            }
            if !ecc_enabled(gpu) {
                return Err(NOT_SUPPORTED);
            }
            let counts = gpu.ecc_counts().unwrap_or_default();
            Ok(
                if error_type == nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED {
                    counts.corrected_volatile
                } else {
                    counts.uncorrected_volatile
                },
            )
        })
    }
}

/// NVML: Multi-Instance GPU mode: off on the H100, not a feature of GeForce cards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current_mode: *mut c_uint,
    pending_mode: *mut c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let (current, pending) = (Ptr::new(current_mode)?, Ptr::new(pending_mode)?);
        on_gpu(faults, device, |gpu| {
            if is_geforce(gpu) {
                Err(NOT_SUPPORTED)
            } else {
                Ok(())
            }
        })?;
        // SAFETY: NVML's contract: both pointers are valid for a write.
        unsafe {
            current.write(0);
            pending.write(0);
        }
        Ok(())
    })
}
