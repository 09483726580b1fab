//! The calls that change a card. Each goes through the simulated card's own checks, as the
//! driver's would, and is logged in the state whatever the outcome.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{nvmlClockOffset_t, nvmlDevice_t, nvmlReturn_t};

use super::clocks::check_offset_request;
use crate::call::{Ptr, api_call, write_setting};
use crate::enums::CLOCK_GRAPHICS;
use gputune_formats::card::Setting;

/// NVML: sets the power limit, milliwatts.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetPowerManagementLimit(
    device: nvmlDevice_t,
    limit: c_uint,
) -> nvmlReturn_t {
    let setting = Setting::PowerLimit {
        power_limit_mw: limit,
    };
    api_call(|faults| write_setting(faults, device, "nvmlDeviceSetPowerManagementLimit", setting))
}

/// NVML: locks the graphics clock into a range, MHz.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetGpuLockedClocks(
    device: nvmlDevice_t,
    min_gpu_clock_mhz: c_uint,
    max_gpu_clock_mhz: c_uint,
) -> nvmlReturn_t {
    let setting = Setting::LockGpuClocks {
        min_mhz: min_gpu_clock_mhz,
        max_mhz: max_gpu_clock_mhz,
    };
    api_call(|faults| write_setting(faults, device, "nvmlDeviceSetGpuLockedClocks", setting))
}

/// NVML: releases the graphics clock lock.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceResetGpuLockedClocks(device: nvmlDevice_t) -> nvmlReturn_t {
    api_call(|faults| {
        write_setting(
            faults,
            device,
            "nvmlDeviceResetGpuLockedClocks",
            Setting::ResetGpuClocks,
        )
    })
}

/// NVML: locks the memory clock into a range, MHz.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetMemoryLockedClocks(
    device: nvmlDevice_t,
    min_mem_clock_mhz: c_uint,
    max_mem_clock_mhz: c_uint,
) -> nvmlReturn_t {
    let setting = Setting::LockMemoryClocks {
        min_mhz: min_mem_clock_mhz,
        max_mhz: max_mem_clock_mhz,
    };
    api_call(|faults| write_setting(faults, device, "nvmlDeviceSetMemoryLockedClocks", setting))
}

/// NVML: releases the memory clock lock.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceResetMemoryLockedClocks(device: nvmlDevice_t) -> nvmlReturn_t {
    api_call(|faults| {
        write_setting(
            faults,
            device,
            "nvmlDeviceResetMemoryLockedClocks",
            Setting::ResetMemoryClocks,
        )
    })
}

/// NVML: sets the graphics or memory clock offset of one P-state, MHz (on a card with linked
/// P-states, every adjustable one moves with it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetClockOffsets(
    device: nvmlDevice_t,
    info: *mut nvmlClockOffset_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let info = Ptr::new(info)?;
        // SAFETY: NVML's contract: the pointer is valid for reads.
        let request = unsafe { info.read() };
        check_offset_request(&request)?;
        let offset_mhz = request.clockOffsetMHz;
        let pstate = request.pstate;
        let setting = if request.type_ == CLOCK_GRAPHICS {
            Setting::GpuClockOffsetAt { pstate, offset_mhz }
        } else {
            Setting::MemoryClockOffsetAt { pstate, offset_mhz }
        };
        write_setting(faults, device, "nvmlDeviceSetClockOffsets", setting)
    })
}

/// NVML: puts a fan under manual control at a speed, percent.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetFanSpeed_v2(
    device: nvmlDevice_t,
    fan: c_uint,
    speed: c_uint,
) -> nvmlReturn_t {
    let setting = Setting::FanSpeed {
        fan_index: fan,
        speed_pct: speed,
    };
    api_call(|faults| write_setting(faults, device, "nvmlDeviceSetFanSpeed_v2", setting))
}

/// NVML: hands a fan back to the driver's automatic curve.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetDefaultFanSpeed_v2(
    device: nvmlDevice_t,
    fan: c_uint,
) -> nvmlReturn_t {
    let setting = Setting::FanAutomatic { fan_index: fan };
    api_call(|faults| write_setting(faults, device, "nvmlDeviceSetDefaultFanSpeed_v2", setting))
}
