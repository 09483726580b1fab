//! Readings: utilization, P-state, temperature and its thresholds, throttle reasons, PCIe link.

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlPstates_t, nvmlReturn_t, nvmlTemperatureSensors_t,
    nvmlTemperatureThresholds_t, nvmlUtilization_t,
};

use crate::call::get_from_gpu;
use crate::codes::{INVALID_ARGUMENT, NOT_SUPPORTED};
use crate::enums::{
    TEMPERATURE_GPU, THRESHOLD_ACOUSTIC_CURRENT, THRESHOLD_COUNT, THRESHOLD_GPU_MAX,
    THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN,
};

/// NVML: how busy the GPU and its memory were, percent.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, utilization, |_, gpu| {
            Ok(nvmlUtilization_t {
                gpu: gpu.reading.utilization_gpu_pct,
                memory: gpu.reading.utilization_memory_pct,
            })
        })
    }
}

/// NVML: the performance state now (0 = P0, fastest).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(
    device: nvmlDevice_t,
    p_state: *mut nvmlPstates_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, p_state, |_, gpu| Ok(gpu.reading.performance_state)) }
}

/// NVML: the GPU's temperature, °C (the only sensor NVML has).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor_type: nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, temp, |_, gpu| {
            if sensor_type != TEMPERATURE_GPU {
                return Err(INVALID_ARGUMENT);
            }
            Ok(gpu.temperature_c())
        })
    }
}

/// NVML: a temperature threshold, °C: shutdown, hardware slowdown, and the thermal target for
/// GPU max and the current acoustic target.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: nvmlDevice_t,
    threshold_type: nvmlTemperatureThresholds_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, temp, |_, gpu| {
            let spec = &gpu.spec;
            let threshold_c = match threshold_type {
                THRESHOLD_SHUTDOWN => spec.shutdown_c,
                THRESHOLD_SLOWDOWN => spec.hardware_slowdown_c,
                THRESHOLD_GPU_MAX | THRESHOLD_ACOUSTIC_CURRENT => spec.thermal_target_c,
                other if other < THRESHOLD_COUNT => {
                    return Err(NOT_SUPPORTED);
                }
                _ => return Err(INVALID_ARGUMENT),
            };
            Ok(threshold_c.round().max(0.0) as u32)
        })
    }
}

/// NVML: why the clocks are held down now (NVML's bitmask).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, reasons, |_, gpu| {
            Ok(gpu.reading.throttle_reasons_bits)
        })
    }
}

/// NVML: the PCIe generation the link runs at now (it trains down when idle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: nvmlDevice_t,
    generation: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, generation, |_, gpu| Ok(gpu.reading.pcie_link_gen)) }
}

/// NVML: the PCIe lanes in use now (fewer than the maximum where the link trained narrower).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    device: nvmlDevice_t,
    width: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, width, |_, gpu| Ok(gpu.link_width_reached())) }
}

/// NVML: the highest PCIe generation the link can run at.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    device: nvmlDevice_t,
    generation: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, generation, |_, gpu| Ok(gpu.spec.pcie_link_gen_max)) }
}

/// NVML: the most PCIe lanes the link can use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    device: nvmlDevice_t,
    width: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe { get_from_gpu(device, width, |_, gpu| Ok(gpu.spec.pcie_link_width_max)) }
}
