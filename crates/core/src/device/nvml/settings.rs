//! What a card runs and writing one setting (`Backend::current_settings`, `Backend::apply`):
//! the power limit, clock offsets per P-state, fan modes (a manual fan's target speed, not its
//! lagging reading); a write takes only a `ValidatedSetting`, so it has passed `device::gate`.

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::{FanControlPolicy, GpuLockedClocksSetting};
use nvml_wrapper::error::NvmlError;

use super::errors::{NVML_SUCCESS, map_error, optional};
use super::{NvmlBackend, offsets};
use crate::device::gate::ValidatedSetting;
use crate::device::{CurrentSettings, compute_offset_mhz};
use gputune_formats::card::{DeviceError, FanMode, Setting};

impl NvmlBackend {
    /// What GPU `index` runs now (what would put it back).
    pub(super) fn read_settings(&mut self, index: u32) -> Result<CurrentSettings, DeviceError> {
        let handle = self.handle(index)?;
        let pstates = self.offset_pstates(index, handle)?;
        let device = self.device_at(handle);
        let offsets_of = |clock: Clock, what: &str| {
            optional(offsets::read(&device, clock, &pstates), what, index).map(|readings| {
                readings
                    .unwrap_or_default()
                    .iter()
                    .map(offsets::PstateReading::offset)
                    .collect::<Vec<_>>()
            })
        };
        let gpu_clock_offsets = offsets_of(Clock::Graphics, "GPU clock offset")?;
        let memory_clock_offsets = offsets_of(Clock::Memory, "memory clock offset")?;
        let fan_count = optional(device.num_fans(), "fan count", index)?.unwrap_or(0);
        let mut fans = Vec::new();
        for fan in 0..fan_count {
            let Some(policy) =
                optional(device.fan_control_policy(fan), "fan control policy", index)?
            else {
                break;
            };
            fans.push(match policy {
                FanControlPolicy::TemperatureContinousSw => FanMode::Automatic,
                FanControlPolicy::Manual => {
                    let target = optional(
                        target_fan_speed(&self.nvml, &device, fan),
                        "fan target speed",
                        index,
                    )?;
                    let speed = match target {
                        Some(speed) => Some(speed),
                        None => optional(device.fan_speed(fan), "fan speed", index)?,
                    };
                    match speed {
                        Some(speed_pct) => FanMode::Manual { speed_pct },
                        // Manual, at a speed nobody can read: not something to restore.
                        None => break,
                    }
                }
            });
        }
        Ok(CurrentSettings {
            power_limit_mw: optional(device.power_management_limit(), "power limit", index)?,
            gpu_clock_offset_mhz: compute_offset_mhz(&gpu_clock_offsets),
            memory_clock_offset_mhz: compute_offset_mhz(&memory_clock_offsets),
            fans: (fan_count > 0 && fans.len() == fan_count as usize).then_some(fans),
            gpu_clock_offsets,
            memory_clock_offsets,
        })
    }

    /// Writes one setting that passed the gate to GPU `index`.
    pub(super) fn write_setting(
        &mut self,
        index: u32,
        setting: &ValidatedSetting,
    ) -> Result<(), DeviceError> {
        let setting = *setting.setting();
        let handle = self.handle(index)?;
        let pstates = match setting {
            Setting::GpuClockOffset { .. } | Setting::MemoryClockOffset { .. } => {
                self.offset_pstates(index, handle)?
            }
            _ => Vec::new(),
        };
        let mut device = self.device_at(handle);
        let result = match setting {
            Setting::PowerLimit { power_limit_mw } => {
                device.set_power_management_limit(power_limit_mw)
            }
            Setting::LockGpuClocks { min_mhz, max_mhz } => {
                device.set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric {
                    min_clock_mhz: min_mhz,
                    max_clock_mhz: max_mhz,
                })
            }
            Setting::ResetGpuClocks => device.reset_gpu_locked_clocks(),
            Setting::LockMemoryClocks { min_mhz, max_mhz } => {
                device.set_mem_locked_clocks(min_mhz, max_mhz)
            }
            Setting::ResetMemoryClocks => device.reset_mem_locked_clocks(),
            Setting::GpuClockOffset { offset_mhz } => {
                offsets::set_for_compute(&mut device, Clock::Graphics, &pstates, offset_mhz)
            }
            Setting::MemoryClockOffset { offset_mhz } => {
                offsets::set_for_compute(&mut device, Clock::Memory, &pstates, offset_mhz)
            }
            Setting::GpuClockOffsetAt { pstate, offset_mhz } => {
                offsets::set_at(&mut device, Clock::Graphics, pstate, offset_mhz)
            }
            Setting::MemoryClockOffsetAt { pstate, offset_mhz } => {
                offsets::set_at(&mut device, Clock::Memory, pstate, offset_mhz)
            }
            Setting::FanSpeed {
                fan_index,
                speed_pct,
            } => device.set_fan_speed(fan_index, speed_pct),
            Setting::FanAutomatic { fan_index } => device.set_default_fan_speed(fan_index),
        };
        result.map_err(|error| map_error(error, &setting.describe(), index))
    }
}

/// The speed a manual fan was set to (`nvmlDeviceGetTargetFanSpeed`, which nvml-wrapper 0.13
/// does not wrap): the fan's own reading lags behind while it spins up or down.
fn target_fan_speed(
    nvml: &Nvml,
    device: &nvml_wrapper::Device<'_>,
    fan: u32,
) -> Result<u32, NvmlError> {
    let function = nvml
        .lib()
        .nvmlDeviceGetTargetFanSpeed
        .as_ref()
        .map_err(|error| NvmlError::FailedToLoadSymbol(error.to_string()))?;
    let mut speed = 0u32;
    // SAFETY: the handle comes from a live `Device` of this `Nvml`; `speed` is valid for a write.
    let code = unsafe { function(device.handle(), fan, &mut speed) };
    match code {
        NVML_SUCCESS => Ok(speed),
        code => Err(NvmlError::from(code)),
    }
}
