//! What a simulated card lets a driver read and change, with the driver's own refusals.

use super::card::OffsetClock;
use super::physics::{SimError, SimGpu};
use gputune_formats::card::{ClockRangeMhz, OffsetRangeMhz};

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

    /// Sets the graphics clock offset of every P-state compute runs in that takes one.
    pub fn set_gpu_clock_offset_mhz(&mut self, offset_mhz: i32) -> Result<(), SimError> {
        self.set_compute_offset(OffsetClock::Gpu, offset_mhz)
    }

    /// Sets the memory clock offset of every P-state compute runs in that takes one.
    pub fn set_memory_clock_offset_mhz(&mut self, offset_mhz: i32) -> Result<(), SimError> {
        self.set_compute_offset(OffsetClock::Memory, offset_mhz)
    }

    /// Sets P-state `pstate`'s graphics clock offset; on a card with linked P-states, every
    /// adjustable one moves with it.
    pub fn set_gpu_clock_offset_at(
        &mut self,
        pstate: u32,
        offset_mhz: i32,
    ) -> Result<(), SimError> {
        self.set_offset_at(OffsetClock::Gpu, pstate, offset_mhz)
    }

    /// Sets P-state `pstate`'s memory clock offset (linked P-states move together).
    pub fn set_memory_clock_offset_at(
        &mut self,
        pstate: u32,
        offset_mhz: i32,
    ) -> Result<(), SimError> {
        self.set_offset_at(OffsetClock::Memory, pstate, offset_mhz)
    }

    /// P-state `pstate`'s offset for `clock`; `None` where the card reports none.
    pub fn offset_at(&self, clock: OffsetClock, pstate: u32) -> Option<i32> {
        self.spec.offset_range_at(clock, pstate)?;
        Some(match clock {
            OffsetClock::Gpu => self.settings.gpu_clock_offset_in(pstate),
            OffsetClock::Memory => self.settings.memory_clock_offset_in(pstate),
        })
    }

    fn set_compute_offset(&mut self, clock: OffsetClock, offset_mhz: i32) -> Result<(), SimError> {
        let targets: Vec<u32> = crate::device::COMPUTE_PSTATES
            .into_iter()
            .filter(|pstate| {
                self.spec
                    .offset_range_at(clock, *pstate)
                    .is_some_and(|range| range.has_room())
            })
            .collect();
        let Some(first) = targets.first() else {
            // No adjustable compute P-state: P0's refusal (unsupported, or out of its range).
            return self.set_offset_at(clock, 0, offset_mhz);
        };
        for pstate in &targets {
            offset_within(self.spec.offset_range_at(clock, *pstate), offset_mhz)?;
        }
        self.set_offset_at(clock, *first, offset_mhz)?;
        for pstate in &targets[1..] {
            self.set_offset_at(clock, *pstate, offset_mhz)?;
        }
        Ok(())
    }

    fn set_offset_at(
        &mut self,
        clock: OffsetClock,
        pstate: u32,
        offset_mhz: i32,
    ) -> Result<(), SimError> {
        let offset_mhz = offset_within(self.spec.offset_range_at(clock, pstate), offset_mhz)?;
        let adjustable = self
            .spec
            .offset_range_at(clock, pstate)
            .is_some_and(|range| range.has_room());
        let moved: Vec<u32> = if adjustable && self.spec.offset_pstates_linked {
            self.spec
                .offset_pstates()
                .into_iter()
                .filter(|(_, adjustable)| *adjustable)
                .map(|(listed, _)| listed)
                .collect()
        } else {
            vec![pstate]
        };
        for pstate in moved {
            let settings = &mut self.settings;
            let (p0, others) = match clock {
                OffsetClock::Gpu => (
                    &mut settings.gpu_clock_offset_mhz,
                    &mut settings.pstate_gpu_clock_offsets_mhz,
                ),
                OffsetClock::Memory => (
                    &mut settings.memory_clock_offset_mhz,
                    &mut settings.pstate_memory_clock_offsets_mhz,
                ),
            };
            // A P-state at 0 is not listed, so a card put back compares equal to a fresh one.
            if pstate == 0 {
                *p0 = offset_mhz;
            } else if offset_mhz == 0 {
                others.remove(&pstate);
            } else {
                others.insert(pstate, offset_mhz);
            }
        }
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
