//! GPU errors (Xids) as NVML reports them: an event set every GPU is registered with, and a
//! wait on it with a deadline. The set is freed with its backend, before NVML shuts down.

use nvml_wrapper::error::NvmlError;

use super::NvmlBackend;
use super::errors::{NVML_SUCCESS, map_error};
use crate::device::Backend;
use gputune_formats::card::{CriticalEvent, DeviceError};

/// An NVML event set, freed with its backend.
pub(super) struct EventSet(nvml_wrapper_sys::bindings::nvmlEventSet_t);

// SAFETY: as for `DeviceHandle`: an opaque NVML token, usable from any thread, freed (in
// `NvmlBackend::drop`) before the `Nvml` that made it shuts down.
unsafe impl Send for EventSet {}

impl Drop for NvmlBackend {
    fn drop(&mut self) {
        if let Some(set) = self.events.take()
            && let Ok(free) = self.nvml.lib().nvmlEventSetFree.as_ref()
        {
            // SAFETY: the set came from nvmlEventSetCreate of this library and is freed once.
            unsafe { free(set.0) };
        }
    }
}

const NVML_EVENT_XID_CRITICAL: u64 = 8;
const NVML_ERROR_TIMEOUT: u32 = 10;

impl NvmlBackend {
    /// Registers every GPU for critical errors (once); an error when no GPU reports them.
    pub(super) fn watch_xids(&mut self) -> Result<(), DeviceError> {
        if self.events.is_some() {
            return Ok(());
        }
        let count = self.gpu_count()?;
        let handles = (0..count)
            .map(|index| self.handle(index))
            .collect::<Result<Vec<_>, _>>()?;
        let library = self.nvml.lib();
        let missing = |name: &str| DeviceError::NotSupported {
            what: format!("GPU error events ({name} is missing)"),
        };
        let create = library
            .nvmlEventSetCreate
            .as_ref()
            .map_err(|_| missing("nvmlEventSetCreate"))?;
        let register = library
            .nvmlDeviceRegisterEvents
            .as_ref()
            .map_err(|_| missing("nvmlDeviceRegisterEvents"))?;
        let mut set: nvml_wrapper_sys::bindings::nvmlEventSet_t = std::ptr::null_mut();
        // SAFETY: `set` is valid for a write.
        let code = unsafe { create(&mut set) };
        if code != NVML_SUCCESS {
            return Err(map_error(NvmlError::from(code), "watching GPU errors", 0));
        }
        self.events = Some(EventSet(set));
        let mut registered = 0;
        for (index, handle) in handles.iter().enumerate() {
            // SAFETY: a live device handle and event set of this library.
            let code = unsafe { register(handle.0, NVML_EVENT_XID_CRITICAL, set) };
            match code {
                NVML_SUCCESS => registered += 1,
                // Some GPUs (and vGPUs) do not report Xids as events: they are not watched.
                code => tracing::info!(
                    "GPU {index}: GPU error events are not reported ({})",
                    NvmlError::from(code)
                ),
            }
        }
        if registered == 0 {
            return Err(DeviceError::NotSupported {
                what: "GPU error events on any GPU".to_string(),
            });
        }
        Ok(())
    }

    /// The next critical error within `timeout_ms`, or `None`.
    pub(super) fn next_xid(
        &mut self,
        timeout_ms: u32,
    ) -> Result<Option<CriticalEvent>, DeviceError> {
        let Some(set) = self.events.as_ref().map(|set| set.0) else {
            return Err(DeviceError::Other {
                what: "Waiting for GPU errors".to_string(),
                detail: "they are not watched".to_string(),
            });
        };
        let wait = self.nvml.lib().nvmlEventSetWait_v2.as_ref().map_err(|_| {
            DeviceError::NotSupported {
                what: "GPU error events (nvmlEventSetWait_v2 is missing)".to_string(),
            }
        })?;
        // SAFETY: an all-zero struct of integers and a null pointer is a valid value to fill.
        let mut data: nvml_wrapper_sys::bindings::nvmlEventData_t = unsafe { std::mem::zeroed() };
        // SAFETY: a live event set of this library; `data` is valid for a write.
        let code = unsafe { wait(set, &mut data, timeout_ms) };
        match code {
            NVML_SUCCESS => {
                let gpu_index = self
                    .handles
                    .iter()
                    .position(|handle| handle.is_some_and(|handle| handle.0 == data.device))
                    .map_or(0, |index| index as u32);
                Ok(Some(CriticalEvent {
                    gpu_index,
                    xid: data.eventData,
                }))
            }
            NVML_ERROR_TIMEOUT => Ok(None),
            code => Err(map_error(
                NvmlError::from(code),
                "waiting for GPU errors",
                0,
            )),
        }
    }
}
