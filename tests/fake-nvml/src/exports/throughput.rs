//! Traffic monitors show: PCIe throughput and the video encoder / decoder. The simulated job
//! feeds the card over PCIe in proportion to how busy it is; nothing encodes or decodes video.
//! The H100 has decoders but no encoder (NOT_SUPPORTED).

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlPcieUtilCounter_t, nvmlReturn_t};

use super::modes::is_geforce;
use crate::call::{Ptr, api_call, get_from_gpu, on_gpu};
use crate::codes::{INVALID_ARGUMENT, NOT_SUPPORTED};
use crate::enums::{PCIE_UTIL_RX_BYTES, PCIE_UTIL_TX_BYTES};

/// The period NVML's encoder and decoder utilization is measured over, microseconds.
const CODEC_SAMPLING_PERIOD_US: c_uint = 167_000;

/// NVML: PCIe traffic over the last 20 ms, KB/s: host to card (RX) 4 MB/s idle, up to about
/// 0.9 GB/s when busy (batches), card to host (TX) a sixth of that.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    value: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, value, |_, gpu| {
            let busy_pct = gpu.reading.utilization_gpu_pct.min(100);
            let rx_kb_per_s = 4_000 + busy_pct * 9_000;
            match counter {
                PCIE_UTIL_RX_BYTES => Ok(rx_kb_per_s),
                PCIE_UTIL_TX_BYTES => Ok(rx_kb_per_s / 6),
                _ => Err(INVALID_ARGUMENT),
            }
        })
    }
}

/// NVML: how busy the video encoder is (idle), and the period measured, µs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let (utilization, period) = (Ptr::new(utilization)?, Ptr::new(sampling_period_us)?);
        on_gpu(faults, device, |gpu| {
            if is_geforce(gpu) {
                Ok(())
            } else {
                Err(NOT_SUPPORTED)
            }
        })?;
        // SAFETY: NVML's contract: both pointers are valid for a write.
        unsafe {
            utilization.write(0);
            period.write(CODEC_SAMPLING_PERIOD_US);
        }
        Ok(())
    })
}

/// NVML: how busy the video decoder is (idle), and the period measured, µs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let (utilization, period) = (Ptr::new(utilization)?, Ptr::new(sampling_period_us)?);
        on_gpu(faults, device, |_| Ok(()))?;
        // SAFETY: NVML's contract: both pointers are valid for a write.
        unsafe {
            utilization.write(0);
            period.write(CODEC_SAMPLING_PERIOD_US);
        }
        Ok(())
    })
}
