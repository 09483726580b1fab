//! A card's readings at each sample (`Backend::telemetry`): the fast ones at every call, the
//! slow ones (`slow.rs`) and the energy counter (`energy.rs`) at most once a second.

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};

use super::errors::optional;
use super::{NvmlBackend, device_in, energy, slow};
use crate::clock::wall_clock_ms;
use gputune_formats::{
    card::{DeviceError, FanReading, Telemetry},
    throttle::ThrottleReasons,
};

impl NvmlBackend {
    /// GPU `index`'s readings now.
    pub(super) fn read_telemetry(&mut self, index: u32) -> Result<Telemetry, DeviceError> {
        let handle = self.handle(index)?;
        let device = device_in(&self.nvml, handle);
        let now_ms = u64::try_from(self.opened_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        if self.slow.len() <= index as usize {
            self.slow.resize(index as usize + 1, None);
        }
        let slow = match self.slow[index as usize].filter(|slow| slow.fresh_at(now_ms)) {
            Some(slow) => slow,
            None => {
                let slow = slow::SlowReadings {
                    read_at_ms: now_ms,
                    fan_count: optional(device.num_fans(), "fan count", index)?.unwrap_or(0),
                    pcie_link_gen: optional(
                        device.current_pcie_link_gen(),
                        "PCIe generation",
                        index,
                    )?,
                    pcie_link_width: optional(
                        device.current_pcie_link_width(),
                        "PCIe width",
                        index,
                    )?,
                    pcie_link_gen_max: optional(
                        device.max_pcie_link_gen(),
                        "maximum PCIe generation",
                        index,
                    )?,
                    pcie_link_width_max: optional(
                        device.max_pcie_link_width(),
                        "maximum PCIe width",
                        index,
                    )?,
                    ecc: slow::ecc_counts(&device, index)?,
                };
                self.slow[index as usize] = Some(slow);
                slow
            }
        };
        let fan_count = slow.fan_count;
        let mut fans = Vec::new();
        for fan in 0..fan_count {
            fans.push(FanReading {
                speed_pct: optional(device.fan_speed(fan), "fan speed", index)?,
                speed_rpm: optional(device.fan_speed_rpm(fan), "fan RPM", index)?,
            });
        }
        let fans_reported = fans
            .iter()
            .any(|fan| fan.speed_pct.is_some() || fan.speed_rpm.is_some());
        let utilization = optional(device.utilization_rates(), "utilization", index)?;
        let performance_state = optional(device.performance_state(), "performance state", index)?
            .and_then(|state| {
                let number = state.as_c();
                (number <= 15).then_some(number)
            });
        let power_draw_mw = optional(device.power_usage(), "power draw", index)?;
        if self.energy.len() <= index as usize {
            self.energy
                .resize(index as usize + 1, energy::EnergyCounter::default());
        }
        let counter = &mut self.energy[index as usize];
        let energy_total_mj = match power_draw_mw {
            Some(power_mw) if !counter.due(now_ms, power_draw_mw) => {
                counter.carry(now_ms, power_mw)
            }
            _ => counter.read(
                now_ms,
                optional(device.total_energy_consumption(), "energy counter", index)?,
            ),
        };
        Ok(Telemetry {
            sampled_at_ms: wall_clock_ms(),
            power_draw_mw,
            // Read at every sample: a limit another handle (the engine's) writes shows at once.
            power_limit_mw: optional(device.enforced_power_limit(), "enforced power limit", index)?,
            temperature_c: optional(
                device.temperature(TemperatureSensor::Gpu),
                "temperature",
                index,
            )?,
            fans: fans_reported.then_some(fans),
            gpu_clock_mhz: optional(device.clock_info(Clock::Graphics), "graphics clock", index)?,
            sm_clock_mhz: optional(device.clock_info(Clock::SM), "SM clock", index)?,
            memory_clock_mhz: optional(device.clock_info(Clock::Memory), "memory clock", index)?,
            utilization_gpu_pct: utilization.as_ref().map(|rates| rates.gpu),
            utilization_memory_pct: utilization.as_ref().map(|rates| rates.memory),
            memory_used_bytes: optional(device.memory_info(), "memory use", index)?
                .map(|info| info.used),
            performance_state,
            throttle_reasons: optional(
                device.current_throttle_reasons(),
                "throttle reasons",
                index,
            )?
            .map(|reasons| ThrottleReasons::from_bits(reasons.bits())),
            pcie_link_gen: slow.pcie_link_gen,
            pcie_link_width: slow.pcie_link_width,
            pcie_link_gen_max: slow.pcie_link_gen_max,
            pcie_link_width_max: slow.pcie_link_width_max,
            energy_total_mj,
            processes: None,
            ecc: slow.ecc,
        })
    }
}
