//! Starting and stopping the library, versions, and finding devices.

use std::ffi::{c_char, c_int, c_uint};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use crate::call::{self, Ptr, api_call, handle_for, write_c_string};
use crate::codes::{GPU_IS_LOST, INVALID_ARGUMENT, error_text};
use crate::store::with_state;
use crate::{CUDA_DRIVER_VERSION, DRIVER_VERSION, NVML_VERSION};

/// NVML: starts the library (reference-counted).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    call::init()
}

/// NVML: starts the library; the flags are accepted and ignored.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    call::init()
}

/// NVML: undoes one `nvmlInit`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    call::shutdown()
}

/// NVML: a static, human-readable text for a return code.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    std::panic::catch_unwind(|| error_text(result))
        .unwrap_or(c"Unknown Error")
        .as_ptr()
}

/// NVML: the driver version as text.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `version` holds `length` bytes.
    api_call(|_| unsafe { write_c_string(version, length, DRIVER_VERSION) })
}

/// NVML: the NVML library version as text.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `version` holds `length` bytes.
    api_call(|_| unsafe { write_c_string(version, length, NVML_VERSION) })
}

/// NVML: the CUDA version the driver supports, as 1000 * major + 10 * minor (the older name).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(
    cuda_driver_version: *mut c_int,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract, passed on.
    unsafe { nvmlSystemGetCudaDriverVersion_v2(cuda_driver_version) }
}

/// NVML: the CUDA version the driver supports, as 1000 * major + 10 * minor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(
    cuda_driver_version: *mut c_int,
) -> nvmlReturn_t {
    api_call(|_| {
        let out = Ptr::new(cuda_driver_version)?;
        // SAFETY: NVML's contract: the pointer is valid for a write.
        unsafe { out.write(CUDA_DRIVER_VERSION) };
        Ok(())
    })
}

/// NVML: how many GPUs the driver sees.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> nvmlReturn_t {
    api_call(|faults| {
        let out = Ptr::new(device_count)?;
        let count = if faults.no_gpus {
            0
        } else {
            with_state(|state| c_uint::try_from(state.machine.gpus.len()).unwrap_or(c_uint::MAX))?
        };
        // SAFETY: NVML's contract: the pointer is valid for a write.
        unsafe { out.write(count) };
        Ok(())
    })
}

/// NVML: the handle of the GPU at `index`. Once the GPU is lost, handles cannot be had either.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let out = Ptr::new(device)?;
        with_state(|state| {
            if faults.no_gpus || index as usize >= state.machine.gpus.len() {
                return Err(INVALID_ARGUMENT);
            }
            if faults.gpu_lost(state.device_calls) {
                return Err(GPU_IS_LOST);
            }
            Ok(())
        })??;
        // SAFETY: NVML's contract: the pointer is valid for a write.
        unsafe { out.write(handle_for(index)) };
        Ok(())
    })
}
