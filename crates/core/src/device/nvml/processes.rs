//! The processes NVML lists on a GPU: `nvmlDeviceGetComputeRunningProcesses_v3` and
//! `nvmlDeviceGetGraphicsRunningProcesses_v3` (what nvml-wrapper 0.13 calls, with
//! `nvmlProcessInfo_v2_t`), merged into one list.

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use super::errors::optional;
use crate::device::process::{ListedProcess, merge_lists};
use gputune_formats::card::DeviceError;
use gputune_formats::card::ProcessKind;

/// Both lists of GPU `index`, merged; `None` when the card lists neither (NOT_SUPPORTED, or a
/// library without the calls). A list one kind does not support counts as empty.
pub(super) fn listed_processes(
    device: &Device<'_>,
    index: u32,
) -> Result<Option<Vec<ListedProcess>>, DeviceError> {
    let compute = optional(
        read_list(|| device.running_compute_processes()),
        "compute processes",
        index,
    )?;
    let graphics = optional(
        read_list(|| device.running_graphics_processes()),
        "graphics processes",
        index,
    )?;
    if compute.is_none() && graphics.is_none() {
        return Ok(None);
    }
    let listed = |list: Option<Vec<ProcessInfo>>, kind: ProcessKind| {
        list.unwrap_or_default()
            .into_iter()
            .map(move |info| ListedProcess {
                pid: info.pid,
                kind,
                used_memory_bytes: match info.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
            })
    };
    Ok(Some(merge_lists(
        listed(compute, ProcessKind::Compute).chain(listed(graphics, ProcessKind::Graphics)),
    )))
}

/// One list. nvml-wrapper asks NVML for the count, then for that many plus 5: when more
/// processes start in between, the second call is too small (INSUFFICIENT_SIZE), so ask once
/// more before giving up.
fn read_list(
    read: impl Fn() -> Result<Vec<ProcessInfo>, NvmlError>,
) -> Result<Vec<ProcessInfo>, NvmlError> {
    match read() {
        Err(NvmlError::InsufficientSize(_)) => read(),
        other => other,
    }
}
