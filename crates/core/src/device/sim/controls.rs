//! What a simulated card lets a driver read and change, with the driver's own refusals.

use super::physics::{SimError, SimGpu};
use crate::device::{ClockRangeMhz, OffsetRangeMhz};

impl SimGpu {
    /// Fan speed as NVML reports it: whole percent.
    pub fn fan_speed_pct(&self, fan_index: u32) -> Result<u32, SimError> {
        self.fan_speed_pct
            .get(fan_index as usize)
            .map(|pct| pct.round() as u32)
            .ok_or(if self.spec.fan_count == 0 {
                SimError::NotSupported
            } else {
                SimError::InvalidArgument
            })
    }

    pub fn fan_speed_rpm(&self, fan_index: u32) -> Result<u32, SimError> {
        let pct = self.fan_speed_pct(fan_index)?;
        Ok(self.spec.fan_max_rpm * pct / 100)
    }

    pub fn temperature_c(&self) -> u32 {
        self.temperature_c.round().max(0.0) as u32
    }

    /// What the card enforces: the set limit (no board limit below it on these models).
    pub fn enforced_power_limit_mw(&self) -> u32 {
        self.settings.power_limit_mw
    }

    pub fn energy_total_mj(&self) -> u64 {
        self.energy_mj.max(0.0) as u64
    }

    pub fn set_power_limit_mw(&mut self, power_limit_mw: u32) -> Result<(), SimError> {
        let spec = &self.spec;
        if !(spec.power_limit_min_mw..=spec.power_limit_max_mw).contains(&power_limit_mw) {
            return Err(SimError::InvalidArgument);
        }
        self.settings.power_limit_mw = power_limit_mw;
        Ok(())
    }

    pub fn lock_gpu_clocks(&mut self, min_mhz: u32, max_mhz: u32) -> Result<(), SimError> {
        let supported = self.spec.gpu_clock_supported;
        if min_mhz > max_mhz || min_mhz < supported.min_mhz || max_mhz > supported.max_mhz {
            return Err(SimError::InvalidArgument);
        }
        self.settings.gpu_locked_clocks = Some(ClockRangeMhz { min_mhz, max_mhz });
        Ok(())
    }

    pub fn reset_gpu_clocks(&mut self) {
        self.settings.gpu_locked_clocks = None;
    }

    pub fn lock_memory_clocks(&mut self, min_mhz: u32, max_mhz: u32) -> Result<(), SimError> {
        let supported = &self.spec.memory_clocks_supported_mhz;
        let lowest = supported.iter().copied().min().unwrap_or(0);
        let highest = supported.iter().copied().max().unwrap_or(0);
        if min_mhz > max_mhz || min_mhz < lowest || max_mhz > highest {
            return Err(SimError::InvalidArgument);
        }
        self.settings.memory_locked_clocks = Some(ClockRangeMhz { min_mhz, max_mhz });
        Ok(())
    }

    pub fn reset_memory_clocks(&mut self) {
        self.settings.memory_locked_clocks = None;
    }

    pub fn set_gpu_clock_offset_mhz(&mut self, offset_mhz: i32) -> Result<(), SimError> {
        self.settings.gpu_clock_offset_mhz =
            offset_within(self.spec.gpu_clock_offset_range, offset_mhz)?;
        Ok(())
    }

    pub fn set_memory_clock_offset_mhz(&mut self, offset_mhz: i32) -> Result<(), SimError> {
        self.settings.memory_clock_offset_mhz =
            offset_within(self.spec.memory_clock_offset_range, offset_mhz)?;
        Ok(())
    }

    pub fn set_fan_speed_pct(&mut self, fan_index: u32, speed_pct: u32) -> Result<(), SimError> {
        let range = self.spec.fan_speed_range.ok_or(SimError::NotSupported)?;
        if !(range.min_pct..=range.max_pct).contains(&speed_pct) {
            return Err(SimError::InvalidArgument);
        }
        let slot = self
            .settings
            .fan_manual_pct
            .get_mut(fan_index as usize)
            .ok_or(SimError::InvalidArgument)?;
        *slot = Some(speed_pct);
        Ok(())
    }

    pub fn set_fan_automatic(&mut self, fan_index: u32) -> Result<(), SimError> {
        if self.spec.fan_count == 0 {
            return Err(SimError::NotSupported);
        }
        let slot = self
            .settings
            .fan_manual_pct
            .get_mut(fan_index as usize)
            .ok_or(SimError::InvalidArgument)?;
        *slot = None;
        Ok(())
    }
}

/// The offset if the card supports offsets and it lies in the card's range.
fn offset_within(range: Option<OffsetRangeMhz>, offset_mhz: i32) -> Result<i32, SimError> {
    let range = range.ok_or(SimError::NotSupported)?;
    if (range.min_mhz..=range.max_mhz).contains(&offset_mhz) {
        Ok(offset_mhz)
    } else {
        Err(SimError::InvalidArgument)
    }
}
