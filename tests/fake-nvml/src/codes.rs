//! NVML return codes under short names, and how simulator refusals map onto them.

use gputune_core::device::sim::SimError;
use nvml_wrapper_sys::bindings as nvml;

/// What every NVML call returns.
pub(crate) type Code = nvml::nvmlReturn_t;

pub(crate) const SUCCESS: Code = nvml::nvmlReturn_enum_NVML_SUCCESS;
pub(crate) const UNINITIALIZED: Code = nvml::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub(crate) const INVALID_ARGUMENT: Code = nvml::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub(crate) const NOT_SUPPORTED: Code = nvml::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub(crate) const NO_PERMISSION: Code = nvml::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
pub(crate) const NOT_FOUND: Code = nvml::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub(crate) const INSUFFICIENT_SIZE: Code = nvml::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub(crate) const DRIVER_NOT_LOADED: Code = nvml::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
pub(crate) const GPU_IS_LOST: Code = nvml::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub(crate) const ARGUMENT_VERSION_MISMATCH: Code =
    nvml::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub(crate) const UNKNOWN: Code = nvml::nvmlReturn_enum_NVML_ERROR_UNKNOWN;
pub(crate) const TIMEOUT: Code = nvml::nvmlReturn_enum_NVML_ERROR_TIMEOUT;

/// The driver's answer for what the simulated card refused.
pub(crate) fn sim_error_code(error: &SimError) -> Code {
    match error {
        SimError::InvalidArgument => INVALID_ARGUMENT,
        SimError::NotSupported => NOT_SUPPORTED,
    }
}

/// `Ok` as `SUCCESS`, an error as itself: the code a call ends with.
pub(crate) fn code_of<T>(result: &Result<T, Code>) -> Code {
    match result {
        Ok(_) => SUCCESS,
        Err(code) => *code,
    }
}

/// The text `nvmlErrorString` gives for a code, NVML's own wording.
pub(crate) fn error_text(code: Code) -> &'static std::ffi::CStr {
    match code {
        SUCCESS => c"Success",
        UNINITIALIZED => c"Uninitialized",
        INVALID_ARGUMENT => c"Invalid Argument",
        NOT_SUPPORTED => c"Not Supported",
        NO_PERMISSION => c"Insufficient Permissions",
        NOT_FOUND => c"Not Found",
        INSUFFICIENT_SIZE => c"Insufficient Size",
        DRIVER_NOT_LOADED => c"Driver Not Loaded",
        GPU_IS_LOST => c"GPU is lost",
        ARGUMENT_VERSION_MISMATCH => c"Argument version mismatch",
        _ => c"Unknown Error",
    }
}

/// The `version` field NVML expects in a versioned struct: its size, and the version in the
/// top byte (`NVML_STRUCT_VERSION` in nvml.h).
pub(crate) const fn struct_version<T>(version: u32) -> u32 {
    size_of::<T>() as u32 | (version << 24)
}
