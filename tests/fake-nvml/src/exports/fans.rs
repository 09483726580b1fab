//! Fans: how many, how fast (percent and RPM), and the range they may be set in.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    NVML_FAN_POLICY_MANUAL, NVML_FAN_POLICY_TEMPERATURE_CONTINOUS_SW, nvmlDevice_t,
    nvmlFanControlPolicy_t, nvmlFanSpeedInfo_t, nvmlReturn_t,
};

use crate::call::{Ptr, api_call, get_from_gpu, on_gpu};
use crate::codes::{
    ARGUMENT_VERSION_MISMATCH, INVALID_ARGUMENT, NOT_SUPPORTED, sim_error_code, struct_version,
};

/// NVML: how many fans the card has (0 for a fanless card, successfully).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(
    device: nvmlDevice_t,
    num_fans: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, num_fans, |faults, gpu| {
            if faults.fans_not_supported {
                return Err(NOT_SUPPORTED);
            }
            Ok(gpu.spec.fan_count)
        })
    }
}

/// NVML: the lowest and highest speed a fan may be set to, percent.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinMaxFanSpeed(
    device: nvmlDevice_t,
    min_speed: *mut c_uint,
    max_speed: *mut c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let (min_out, max_out) = (Ptr::new(min_speed)?, Ptr::new(max_speed)?);
        let range = on_gpu(faults, device, |gpu| {
            if faults.fans_not_supported {
                return Err(NOT_SUPPORTED);
            }
            gpu.spec.fan_speed_range.ok_or(NOT_SUPPORTED)
        })?;
        // SAFETY: NVML's contract: both pointers are valid for a write.
        unsafe {
            min_out.write(range.min_pct);
            max_out.write(range.max_pct);
        }
        Ok(())
    })
}

/// NVML: one fan's speed now, percent.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: nvmlDevice_t,
    fan: c_uint,
    speed: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, speed, |faults, gpu| {
            if faults.fans_not_supported {
                return Err(NOT_SUPPORTED);
            }
            gpu.fan_speed_pct(fan)
                .map_err(|error| sim_error_code(&error))
        })
    }
}

/// NVML: the first fan's speed now, percent (the name from before cards had several fans).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(
    device: nvmlDevice_t,
    speed: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { nvmlDeviceGetFanSpeed_v2(device, 0, speed) }
}

/// NVML: one fan's speed now, RPM (`fan` in, `speed` out).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeedRPM(
    device: nvmlDevice_t,
    fan_speed: *mut nvmlFanSpeedInfo_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let info = Ptr::new(fan_speed)?;
        // SAFETY: NVML's contract: the pointer is valid for reads and writes.
        let request = unsafe { info.read() };
        if request.version != struct_version::<nvmlFanSpeedInfo_t>(1) {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let rpm = on_gpu(faults, device, |gpu| {
            if faults.fans_not_supported {
                return Err(NOT_SUPPORTED);
            }
            gpu.fan_speed_rpm(request.fan)
                .map_err(|error| sim_error_code(&error))
        })?;
        // SAFETY: as above.
        unsafe {
            info.write(nvmlFanSpeedInfo_t {
                speed: rpm,
                ..request
            });
        }
        Ok(())
    })
}

/// NVML: who drives a fan: the driver's curve (0) or a manual speed (1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanControlPolicy_v2(
    device: nvmlDevice_t,
    fan: c_uint,
    policy: *mut nvmlFanControlPolicy_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, policy, |faults, gpu| {
            if faults.fans_not_supported || gpu.spec.fan_count == 0 {
                return Err(NOT_SUPPORTED);
            }
            match gpu.settings.fan_manual_pct.get(fan as usize) {
                Some(Some(_)) => Ok(NVML_FAN_POLICY_MANUAL),
                Some(None) => Ok(NVML_FAN_POLICY_TEMPERATURE_CONTINOUS_SW),
                None => Err(INVALID_ARGUMENT),
            }
        })
    }
}

/// NVML: the speed a fan is driven towards, percent: the manual speed, or the driver curve's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTargetFanSpeed(
    device: nvmlDevice_t,
    fan: c_uint,
    target_speed: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, target_speed, |faults, gpu| {
            if faults.fans_not_supported || gpu.spec.fan_count == 0 {
                return Err(NOT_SUPPORTED);
            }
            match gpu.settings.fan_manual_pct.get(fan as usize) {
                Some(Some(speed_pct)) => Ok(*speed_pct),
                Some(None) => gpu
                    .fan_speed_pct(fan)
                    .map_err(|error| sim_error_code(&error)),
                None => Err(INVALID_ARGUMENT),
            }
        })
    }
}
