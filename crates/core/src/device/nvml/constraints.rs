//! What a card allows (`Backend::constraints`): power-limit range, supported clocks, fans,
//! clock-offset ranges per P-state, slowdown temperature. The supported-clock lists are read
//! through NVML directly (nvml-wrapper 0.13 gets them wrong on cards with many clocks).

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, ClockId, TemperatureThreshold};
use nvml_wrapper::error::NvmlError;

use super::errors::{NVML_SUCCESS, optional};
use super::{NvmlBackend, offsets};
use crate::device::compute_offset_range;
use gputune_formats::card::{ClockRangeMhz, Constraints, DeviceError, FanRangePct};

impl NvmlBackend {
    /// GPU `index`'s ranges, as the driver reports them.
    pub(super) fn read_constraints(&mut self, index: u32) -> Result<Constraints, DeviceError> {
        let handle = self.handle(index)?;
        let pstates = self.offset_pstates(index, handle)?;
        let device = self.device_at(handle);
        let power = optional(
            device.power_management_limit_constraints(),
            "power limit range",
            index,
        )?;
        let power_limit_default_mw = optional(
            device.power_management_limit_default(),
            "default power limit",
            index,
        )?;
        let memory_clocks = optional(
            supported_clocks(&self.nvml, &device, ClockList::Memory),
            "supported memory clocks",
            index,
        )?
        .unwrap_or_default();
        let memory_clock_range = range_of(&memory_clocks);
        let gpu_clock_range = match memory_clocks.iter().max() {
            Some(&top_memory_clock) => {
                let clocks = optional(
                    supported_clocks(
                        &self.nvml,
                        &device,
                        ClockList::Graphics { top_memory_clock },
                    ),
                    "supported graphics clocks",
                    index,
                )?
                .unwrap_or_default();
                range_of(&clocks)
            }
            None => None,
        };
        let fan_count = optional(device.num_fans(), "fan count", index)?.unwrap_or(0);
        let fan_speed_range = if fan_count > 0 {
            optional(device.min_max_fan_speed(), "fan speed range", index)?
                .map(|(min_pct, max_pct)| FanRangePct { min_pct, max_pct })
        } else {
            None
        };
        let offset_ranges = |clock: Clock, what: &str| {
            optional(offsets::read(&device, clock, &pstates), what, index).map(|readings| {
                readings
                    .unwrap_or_default()
                    .iter()
                    .map(offsets::PstateReading::range)
                    .collect::<Vec<_>>()
            })
        };
        let gpu_clock_offset_pstates = offset_ranges(Clock::Graphics, "GPU clock offset")?;
        let memory_clock_offset_pstates = offset_ranges(Clock::Memory, "memory clock offset")?;
        Ok(Constraints {
            power_limit_min_mw: power.as_ref().map(|range| range.min_limit),
            power_limit_max_mw: power.as_ref().map(|range| range.max_limit),
            power_limit_default_mw,
            gpu_clock_range,
            memory_clock_range,
            fan_count,
            fan_speed_range,
            gpu_clock_offset_range: compute_offset_range(&gpu_clock_offset_pstates),
            memory_clock_offset_range: compute_offset_range(&memory_clock_offset_pstates),
            gpu_clock_offset_pstates,
            memory_clock_offset_pstates,
            slowdown_temperature_c: optional(
                device.temperature_threshold(TemperatureThreshold::Slowdown),
                "slowdown temperature",
                index,
            )?,
            // Only the scanner's default lock depends on it: a driver without it just has none.
            boost_clock_mhz: device
                .clock(Clock::Graphics, ClockId::CustomerMaxBoost)
                .ok()
                .filter(|clock_mhz| *clock_mhz > 0),
        })
    }
}

/// Which supported-clock list to read.
enum ClockList {
    Memory,
    Graphics { top_memory_clock: u32 },
}

const NVML_ERROR_INSUFFICIENT_SIZE: u32 = 7;

/// nvml-wrapper 0.13's `supported_graphics_clocks` / `supported_memory_clocks` treat
/// INSUFFICIENT_SIZE as success and return a buffer of zeros when a card lists more clocks than
/// their first guess (128 graphics clocks; an RTX 4090 lists about 190). So ask NVML for the
/// count first, then for exactly that many, as nvml.h describes.
fn supported_clocks(
    nvml: &Nvml,
    device: &nvml_wrapper::Device<'_>,
    list: ClockList,
) -> Result<Vec<u32>, NvmlError> {
    let library = nvml.lib();
    // SAFETY: the handle comes from a live `Device` of this `Nvml`, which outlives the calls.
    let handle = unsafe { device.handle() };
    let call = |count: &mut u32, clocks: *mut u32| -> Result<u32, NvmlError> {
        match list {
            ClockList::Memory => {
                let function = library
                    .nvmlDeviceGetSupportedMemoryClocks
                    .as_ref()
                    .map_err(|error| NvmlError::FailedToLoadSymbol(error.to_string()))?;
                // SAFETY: `count` is valid; `clocks` is null with a count of 0, or holds `count`
                // entries (nvml.h's contract for this call).
                Ok(unsafe { function(handle, count, clocks) })
            }
            ClockList::Graphics { top_memory_clock } => {
                let function = library
                    .nvmlDeviceGetSupportedGraphicsClocks
                    .as_ref()
                    .map_err(|error| NvmlError::FailedToLoadSymbol(error.to_string()))?;
                // SAFETY: as above.
                Ok(unsafe { function(handle, top_memory_clock, count, clocks) })
            }
        }
    };
    let mut count = 0;
    match call(&mut count, std::ptr::null_mut())? {
        NVML_SUCCESS => return Ok(Vec::new()),
        NVML_ERROR_INSUFFICIENT_SIZE => {}
        code => return Err(NvmlError::from(code)),
    }
    // A card lists a few hundred clocks at most; a larger count is a broken driver.
    let mut clocks = vec![0u32; count.min(4096) as usize];
    let mut filled = clocks.len() as u32;
    match call(&mut filled, clocks.as_mut_ptr())? {
        NVML_SUCCESS => {
            clocks.truncate(filled as usize);
            Ok(clocks)
        }
        code => Err(NvmlError::from(code)),
    }
}

fn range_of(clocks_mhz: &[u32]) -> Option<ClockRangeMhz> {
    match (clocks_mhz.iter().min(), clocks_mhz.iter().max()) {
        (Some(&min_mhz), Some(&max_mhz)) => Some(ClockRangeMhz { min_mhz, max_mhz }),
        _ => None,
    }
}
