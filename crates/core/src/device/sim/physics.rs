//! One simulated GPU: its settings, its physical state, and the step that moves it through
//! time. The equations are written out in docs/simulator.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::card::CardSpec;
use super::load::LoadPattern;
use super::seed::{splitmix64, text_seed};
use super::silicon::applied_offset_mhz;
use gputune_formats::{
    card::ClockRangeMhz,
    throttle::{ThrottleReason, ThrottleReasons},
};

/// Integration step. Small next to the thermal time constant (~90 s) and the load pattern.
const STEP_MS: u64 = 100;
/// Longer gaps are not integrated step by step: only their last hour matters for the state.
const MAX_INTEGRATED_GAP_MS: u64 = 3_600_000;
/// How long clocks stay up after the last kernel before the card drops to its idle P-state.
const IDLE_AFTER_MS: u64 = 5_000;

/// What a simulated card refuses, mirroring the driver's answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("value outside the card's range")]
    InvalidArgument,
    #[error("not supported by this card")]
    NotSupported,
}

/// Settings a user can change, as the card holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimSettings {
    pub power_limit_mw: u32,
    pub gpu_locked_clocks: Option<ClockRangeMhz>,
    pub memory_locked_clocks: Option<ClockRangeMhz>,
    /// P0's graphics clock offset.
    pub gpu_clock_offset_mhz: i32,
    /// P0's memory clock offset.
    pub memory_clock_offset_mhz: i32,
    /// Per fan: `Some(pct)` under manual control, `None` on the automatic curve.
    pub fan_manual_pct: Vec<Option<u32>>,
    /// The graphics clock offsets of the P-states other than P0, by P-state (absent: 0).
    #[serde(default)]
    pub pstate_gpu_clock_offsets_mhz: BTreeMap<u32, i32>,
    /// The memory clock offsets of the P-states other than P0.
    #[serde(default)]
    pub pstate_memory_clock_offsets_mhz: BTreeMap<u32, i32>,
}

impl SimSettings {
    /// P-state `pstate`'s graphics clock offset.
    pub fn gpu_clock_offset_in(&self, pstate: u32) -> i32 {
        match pstate {
            0 => self.gpu_clock_offset_mhz,
            _ => self
                .pstate_gpu_clock_offsets_mhz
                .get(&pstate)
                .copied()
                .unwrap_or(0),
        }
    }

    /// P-state `pstate`'s memory clock offset.
    pub fn memory_clock_offset_in(&self, pstate: u32) -> i32 {
        match pstate {
            0 => self.memory_clock_offset_mhz,
            _ => self
                .pstate_memory_clock_offsets_mhz
                .get(&pstate)
                .copied()
                .unwrap_or(0),
        }
    }
}

/// The readings of the last step: what NVML would report now.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SimReading {
    pub power_draw_mw: u32,
    pub gpu_clock_mhz: u32,
    pub memory_clock_mhz: u32,
    pub voltage_mv: u32,
    pub utilization_gpu_pct: u32,
    pub utilization_memory_pct: u32,
    pub memory_used_bytes: u64,
    pub performance_state: u32,
    pub throttle_reasons_bits: u64,
    pub pcie_link_gen: u32,
}

/// One simulated GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimGpu {
    pub spec: CardSpec,
    pub uuid: String,
    pub pci_bus_id: String,
    /// This slot's air: cards in the middle of a crowded box breathe warmer air.
    pub ambient_c: f64,
    pub load: LoadPattern,
    pub settings: SimSettings,
    /// Simulated time of the state below, milliseconds (the clock's epoch).
    pub time_ms: u64,
    pub temperature_c: f64,
    pub fan_speed_pct: Vec<f64>,
    pub energy_mj: f64,
    pub last_busy_ms: Option<u64>,
    pub reading: SimReading,
    /// Critical errors (Xid 13) the card raised so far: one each time it went busy past its
    /// silicon's hard limit (`silicon.rs`). Watchers report the ones they have not seen.
    #[serde(default)]
    pub xid_count: u64,
    /// Whether the last step was busy past the hard limit (an Xid is raised on entering).
    #[serde(default)]
    pub past_hard_limit: bool,
    /// ECC errors since the driver loaded (volatile), as expected counts: corrected, then
    /// uncorrected. Only a card that reports ECC (`CardSpec::ecc_reported`) counts them.
    #[serde(default)]
    pub ecc_errors: (f64, f64),
    /// The share of its fans' cooling this slot lets through: 1 in the open, less for a card
    /// sandwiched against its neighbour's backplate (its intake breathes through a gap).
    #[serde(default = "full_airflow")]
    pub airflow_share: f64,
    /// The lanes the link trained to when fewer than card and slot allow (a riser or a slot
    /// whose contacts carry only 8 of 16: NVML's maximum still says x16); `None`: the full
    /// width.
    #[serde(default)]
    pub trained_link_width: Option<u32>,
}

fn full_airflow() -> f64 {
    1.0
}

impl SimGpu {
    /// A card at rest at `ambient_c`, at time `time_ms`, with stock settings.
    pub fn new(
        spec: CardSpec,
        uuid: String,
        pci_bus_id: String,
        ambient_c: f64,
        load: LoadPattern,
        time_ms: u64,
    ) -> SimGpu {
        let fan_count = spec.fan_count as usize;
        let settings = SimSettings {
            power_limit_mw: spec.power_limit_default_mw,
            gpu_locked_clocks: None,
            memory_locked_clocks: None,
            gpu_clock_offset_mhz: 0,
            memory_clock_offset_mhz: 0,
            fan_manual_pct: vec![None; fan_count],
            pstate_gpu_clock_offsets_mhz: BTreeMap::new(),
            pstate_memory_clock_offsets_mhz: BTreeMap::new(),
        };
        let mut gpu = SimGpu {
            spec,
            uuid,
            pci_bus_id,
            ambient_c,
            load,
            settings,
            time_ms,
            temperature_c: ambient_c,
            fan_speed_pct: vec![0.0; fan_count],
            energy_mj: 0.0,
            last_busy_ms: None,
            reading: SimReading::default(),
            xid_count: 0,
            past_hard_limit: false,
            ecc_errors: (0.0, 0.0),
            airflow_share: full_airflow(),
            trained_link_width: None,
        };
        gpu.step(0);
        gpu
    }

    /// Moves the simulation forward to `time_ms` (no-op if that is not in the future).
    pub fn advance_to(&mut self, time_ms: u64) {
        if time_ms <= self.time_ms {
            return;
        }
        let gap_ms = time_ms - self.time_ms;
        if gap_ms > MAX_INTEGRATED_GAP_MS {
            // The state forgets what happened more than an hour ago; only the energy counter
            // must still count that time, at the power of the moment.
            let skipped_ms = gap_ms - MAX_INTEGRATED_GAP_MS;
            self.energy_mj += f64::from(self.reading.power_draw_mw) * skipped_ms as f64 / 1000.0;
            self.time_ms += skipped_ms;
        }
        while self.time_ms < time_ms {
            let step_ms = STEP_MS.min(time_ms - self.time_ms);
            self.time_ms += step_ms;
            self.step(step_ms);
        }
    }

    /// Voltage the card uses at `clock_mhz` with the current offset: a positive offset shifts
    /// the curve up, so each clock needs the voltage of a lower stock clock.
    fn voltage_mv_at(&self, clock_mhz: u32) -> f64 {
        let offset_mhz = self.effective_gpu_offset_mhz();
        self.spec
            .curve_voltage_mv(f64::from(clock_mhz) - f64::from(offset_mhz))
    }

    /// The offset as the card applies it where it computes (the P-state it runs work in: P2
    /// on an RTX card, so P0's offset alone changes nothing under training): whole boost bins.
    pub fn effective_gpu_offset_mhz(&self) -> i32 {
        let pstate = self.spec.performance_state_load;
        applied_offset_mhz(&self.spec, self.settings.gpu_clock_offset_in(pstate))
    }

    /// The memory clock offset where the card computes.
    pub fn effective_memory_offset_mhz(&self) -> i32 {
        self.settings
            .memory_clock_offset_in(self.spec.performance_state_load)
    }

    /// Board power in watts at a clock, activity, memory load and temperature.
    fn power_w(
        &self,
        clock_mhz: u32,
        activity: f64,
        memory_utilization: f64,
        memory_clock_mhz: u32,
        temperature_c: f64,
    ) -> f64 {
        let spec = &self.spec;
        let voltage_v = self.voltage_mv_at(clock_mhz) / 1000.0;
        let fans = if self.fan_speed_pct.is_empty() {
            0.0
        } else {
            let mean = self.fan_speed_pct.iter().sum::<f64>() / self.fan_speed_pct.len() as f64;
            spec.fan_power_w_at_full * (mean / 100.0).powi(3)
        };
        let memory_clock_ratio =
            f64::from(memory_clock_mhz) / f64::from(spec.memory_clock_load_mhz.max(1));
        let memory = if memory_clock_mhz <= spec.memory_clock_idle_mhz
            && spec.memory_clock_idle_mhz < spec.memory_clock_load_mhz
        {
            spec.memory_power_idle_w
        } else {
            (spec.memory_power_load_w + spec.memory_power_per_utilization_w * memory_utilization)
                * memory_clock_ratio
        };
        let leakage = spec.leakage_power_w_at_1v
            * voltage_v
            * voltage_v
            * (1.0 + spec.leakage_increase_per_c * (temperature_c - 25.0)).max(0.5);
        let dynamic = spec.dynamic_power_w_per_v2_ghz
            * activity
            * voltage_v
            * voltage_v
            * f64::from(clock_mhz)
            / 1000.0;
        spec.static_power_w + fans + memory + leakage + dynamic
    }

    /// One integration step of `step_ms` ending at `self.time_ms`.
    fn step(&mut self, step_ms: u64) {
        let step_index = self.time_ms / STEP_MS;
        let load = self
            .load
            .at(self.time_ms, jitter(step_index ^ text_seed(&self.uuid)));
        if load.busy {
            self.last_busy_ms = Some(self.time_ms);
        }
        let active = self.load != LoadPattern::Idle
            && self
                .last_busy_ms
                .is_some_and(|busy_ms| self.time_ms.saturating_sub(busy_ms) < IDLE_AFTER_MS);
        let temperature_c = self.temperature_c;
        let mut reasons = ThrottleReasons::default();
        if !load.busy {
            reasons.insert(ThrottleReason::GpuIdle);
        }

        let memory_clock_mhz = self.memory_clock_mhz(active);
        let gpu_clock_mhz = if active {
            self.boost_clock_mhz(
                load.activity,
                load.memory_utilization,
                memory_clock_mhz,
                &mut reasons,
            )
        } else {
            let idle = self.spec.gpu_clock_idle_mhz;
            match self.settings.gpu_locked_clocks {
                Some(lock) => idle.clamp(lock.min_mhz, lock.max_mhz),
                None => idle,
            }
        };
        let power_w = self.power_w(
            gpu_clock_mhz,
            load.activity,
            load.memory_utilization,
            memory_clock_mhz,
            temperature_c,
        );

        let step_s = step_ms as f64 / 1000.0;
        self.check_silicon(load.busy && active, gpu_clock_mhz, step_s);
        self.update_fans(step_s);
        let conductance = self.conductance_w_per_c();
        let heat_flow_w = power_w - conductance * (temperature_c - self.ambient_c);
        self.temperature_c += heat_flow_w * step_s / self.spec.heat_capacity_j_per_c;
        self.energy_mj += power_w * step_ms as f64;

        let memory_used_bytes = if self.load == LoadPattern::Idle {
            self.spec.memory_used_idle_bytes
        } else {
            self.spec.memory_used_training_bytes
        };
        self.reading = SimReading {
            power_draw_mw: (power_w * 1000.0).round() as u32,
            gpu_clock_mhz,
            memory_clock_mhz,
            voltage_mv: self.voltage_mv_at(gpu_clock_mhz).round() as u32,
            utilization_gpu_pct: (load.gpu_utilization * 100.0).round().clamp(0.0, 100.0) as u32,
            utilization_memory_pct: (load.memory_utilization * 100.0).round().clamp(0.0, 100.0)
                as u32,
            memory_used_bytes,
            performance_state: if active {
                self.spec.performance_state_load
            } else {
                self.spec.performance_state_idle
            },
            throttle_reasons_bits: reasons.bits(),
            pcie_link_gen: if active {
                self.spec.pcie_link_gen_max
            } else {
                self.spec.pcie_link_gen_idle
            },
        };
    }

    fn memory_clock_mhz(&self, active: bool) -> u32 {
        let spec = &self.spec;
        let base = if active {
            let shifted = f64::from(spec.memory_clock_load_mhz)
                + f64::from(self.effective_memory_offset_mhz()) * spec.memory_offset_effect_ratio;
            shifted.max(f64::from(spec.memory_clock_idle_mhz)) as u32
        } else {
            spec.memory_clock_idle_mhz
        };
        match self.settings.memory_locked_clocks {
            Some(lock) => base.clamp(lock.min_mhz, lock.max_mhz),
            None => base,
        }
    }

    /// GPU Boost: the highest clock bin that every limit allows, noting which limit binds.
    fn boost_clock_mhz(
        &self,
        activity: f64,
        memory_utilization: f64,
        memory_clock_mhz: u32,
        reasons: &mut ThrottleReasons,
    ) -> u32 {
        let spec = &self.spec;
        let bin = spec.clock_bin_mhz.max(1);
        let floor_mhz = spec.gpu_clock_supported.min_mhz;
        let temperature_c = self.temperature_c;
        let offset_mhz = self.effective_gpu_offset_mhz();
        let curve_top = (i64::from(spec.curve_top_mhz()) + i64::from(offset_mhz)).clamp(
            i64::from(floor_mhz),
            i64::from(spec.gpu_clock_supported.max_mhz),
        ) as u32;

        // Warmer silicon boosts a few bins lower; that is normal, not a throttle.
        let bins_lost = ((temperature_c - spec.boost_bin_start_c) / spec.boost_bin_every_c)
            .floor()
            .max(0.0) as u32;
        let mut allowed = curve_top.saturating_sub(bins_lost * bin).max(floor_mhz);

        if temperature_c > spec.thermal_target_c {
            let thermal_cap = allowed
                .saturating_sub(((temperature_c - spec.thermal_target_c) * 60.0) as u32)
                .max(floor_mhz);
            if thermal_cap < allowed {
                allowed = thermal_cap;
                reasons.insert(ThrottleReason::SwThermalSlowdown);
            }
        }
        if temperature_c >= spec.hardware_slowdown_c {
            allowed = (allowed / 2).max(floor_mhz);
            reasons.insert(ThrottleReason::HwSlowdown);
            reasons.insert(ThrottleReason::HwThermalSlowdown);
        }
        if let Some(lock) = self.settings.gpu_locked_clocks
            && lock.max_mhz < allowed
        {
            allowed = lock.max_mhz.max(floor_mhz);
            reasons.insert(ThrottleReason::ApplicationsClocksSetting);
        }

        let limit_w = f64::from(self.settings.power_limit_mw) / 1000.0;
        let fits = |clock_mhz: u32| {
            self.power_w(
                clock_mhz,
                activity,
                memory_utilization,
                memory_clock_mhz,
                temperature_c,
            ) <= limit_w
        };
        if fits(allowed) {
            return allowed;
        }
        reasons.insert(ThrottleReason::SwPowerCap);
        // Power grows with clock, so the highest fitting bin is found by bisection.
        let (mut low, mut high) = (floor_mhz, allowed);
        if !fits(low) {
            return low;
        }
        while high - low > bin {
            let middle = low + (high - low) / 2 / bin * bin;
            let middle = middle.max(low + bin);
            if fits(middle) {
                low = middle;
            } else {
                high = middle;
            }
        }
        low
    }

    fn update_fans(&mut self, step_s: f64) {
        let temperature_c = self.temperature_c;
        for fan_index in 0..self.fan_speed_pct.len() {
            let current = self.fan_speed_pct[fan_index];
            let manual = self
                .settings
                .fan_manual_pct
                .get(fan_index)
                .copied()
                .flatten();
            let target = match manual {
                Some(pct) => f64::from(pct),
                None => self.spec.fan_auto_target_pct(temperature_c, current > 0.0),
            };
            let max_change = self.spec.fan_slew_pct_per_s * step_s;
            let next = if target == 0.0
                && current
                    <= self
                        .spec
                        .fan_speed_range
                        .map_or(0.0, |range| f64::from(range.min_pct))
            {
                // A fan below its minimum speed stops rather than creeping down.
                0.0
            } else if target == 0.0 {
                (current - max_change).max(0.0)
            } else if current == 0.0 {
                // Spinning up starts at the minimum speed.
                self.spec
                    .fan_speed_range
                    .map_or(target, |range| f64::from(range.min_pct).min(target))
            } else {
                current + (target - current).clamp(-max_change, max_change)
            };
            self.fan_speed_pct[fan_index] = next;
        }
    }

    fn conductance_w_per_c(&self) -> f64 {
        let spec = &self.spec;
        if self.fan_speed_pct.is_empty() {
            return spec.conductance_passive_w_per_c;
        }
        let mean = self.fan_speed_pct.iter().sum::<f64>() / self.fan_speed_pct.len() as f64;
        spec.conductance_passive_w_per_c
            + spec.conductance_fans_w_per_c * self.airflow_share * (mean / 100.0).powf(0.8)
    }

    /// The PCIe width the link runs at: the card's, or fewer where it trained narrower.
    pub fn link_width_reached(&self) -> u32 {
        let card = self.spec.pcie_link_width_max;
        self.trained_link_width
            .map_or(card, |lanes| lanes.min(card))
    }
}

/// Deterministic noise in [-1, 1], so runs repeat exactly.
fn jitter(value: u64) -> f64 {
    (splitmix64(value) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}
