//! Fans: how many, how fast (percent and RPM), and the range they may be set in.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlFanSpeedInfo_t, nvmlReturn_t};

use crate::call::{Ptr, api_call, get_from_gpu, on_gpu};
use crate::codes::{ARGUMENT_VERSION_MISMATCH, NOT_SUPPORTED, sim_error_code, struct_version};

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
