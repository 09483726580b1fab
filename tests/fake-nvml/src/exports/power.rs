//! Power: limits, draw and the energy counter, in milliwatts and millijoules.

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use crate::call::{Ptr, api_call, get_from_gpu, on_gpu, on_state};
use crate::codes::INVALID_ARGUMENT;

/// NVML: the range the power limit may be set in, milliwatts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimitConstraints(
    device: nvmlDevice_t,
    min_limit: *mut c_uint,
    max_limit: *mut c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let (min_out, max_out) = (Ptr::new(min_limit)?, Ptr::new(max_limit)?);
        let (min_mw, max_mw) = on_gpu(faults, device, |gpu| {
            Ok((gpu.spec.power_limit_min_mw, gpu.spec.power_limit_max_mw))
        })?;
        // SAFETY: NVML's contract: both pointers are valid for a write.
        unsafe {
            min_out.write(min_mw);
            max_out.write(max_mw);
        }
        Ok(())
    })
}

/// NVML: the power limit the card ships with, milliwatts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementDefaultLimit(
    device: nvmlDevice_t,
    default_limit: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, default_limit, |_, gpu| {
            Ok(gpu.spec.power_limit_default_mw)
        })
    }
}

/// NVML: the power limit set now, milliwatts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, limit, |_, gpu| Ok(gpu.settings.power_limit_mw)) }
}

/// NVML: the power limit the card enforces now, milliwatts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, limit, |_, gpu| Ok(gpu.enforced_power_limit_mw())) }
}

/// NVML: the board's power draw now, milliwatts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, power, |_, gpu| Ok(gpu.reading.power_draw_mw)) }
}

/// NVML: energy used since the driver loaded, millijoules.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    api_call(|faults| {
        let out = Ptr::new(energy)?;
        let total_mj = on_state(faults, device, |state, index| {
            // Counted: the real call is slow (3.1 ms on an H200), so gputune reads it sparingly.
            state.energy_reads = state.energy_reads.saturating_add(1);
            state
                .machine
                .gpus
                .get(index as usize)
                .map(|gpu| gpu.energy_total_mj())
                .ok_or(INVALID_ARGUMENT)
        })?;
        // SAFETY: NVML's contract: the pointer is null or valid for a write.
        unsafe { out.write(total_mj) };
        Ok(())
    })
}
