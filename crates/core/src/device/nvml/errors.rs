//! What NVML's errors become: a `DeviceError` naming what was being done, and for readings a
//! card may not support, `None` (only a lost GPU or a dead driver ends a snapshot).

use std::path::Path;

use nvml_wrapper::error::NvmlError;

use gputune_formats::card::DeviceError;

/// NVML's return code for success.
pub(super) const NVML_SUCCESS: u32 = 0;

/// What a failure to load NVML becomes.
pub(super) fn map_load_error(error: NvmlError, library_path: Option<&Path>) -> DeviceError {
    match error {
        NvmlError::LibloadingError(load_error) => DeviceError::LibraryNotLoaded {
            detail: match library_path {
                Some(path) => format!("{}: {load_error}", path.display()),
                None => load_error.to_string(),
            },
        },
        NvmlError::DriverNotLoaded => DeviceError::DriverNotLoaded {
            detail: "NVML says the driver is not loaded".to_string(),
        },
        NvmlError::FailedToLoadSymbol(symbol) => DeviceError::LibraryNotLoaded {
            detail: format!("the library lacks {symbol}; is it really libnvidia-ml?"),
        },
        other => DeviceError::Other {
            what: "Starting NVML".to_string(),
            detail: other.to_string(),
        },
    }
}

/// Maps an NVML error on GPU `index` while doing `what` to a `DeviceError`.
pub(super) fn map_error(error: NvmlError, what: &str, index: u32) -> DeviceError {
    match error {
        NvmlError::GpuLost | NvmlError::ResetRequired => DeviceError::GpuLost { index },
        NvmlError::NoPermission => DeviceError::NoPermission {
            action: what.to_string(),
        },
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => DeviceError::NotSupported {
            what: what.to_string(),
        },
        NvmlError::InvalidArg => DeviceError::InvalidArgument {
            what: what.to_string(),
        },
        NvmlError::DriverNotLoaded | NvmlError::Uninitialized => DeviceError::DriverNotLoaded {
            detail: error.to_string(),
        },
        other => DeviceError::Other {
            what: what.to_string(),
            detail: other.to_string(),
        },
    }
}

/// A reading the card may not support: unsupported or refused becomes `None`; a lost GPU or a
/// dead driver is an error that ends the whole snapshot.
pub(super) fn optional<T>(
    result: Result<T, NvmlError>,
    what: &str,
    index: u32,
) -> Result<Option<T>, DeviceError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) => match map_error(error, what, index) {
            fatal @ (DeviceError::GpuLost { .. } | DeviceError::DriverNotLoaded { .. }) => {
                Err(fatal)
            }
            other => {
                tracing::debug!("GPU {index}: no {what}: {other}");
                Ok(None)
            }
        },
    }
}
