//! The fixed facts of a simulated card model: limits, curves and physical constants.
//! Sources and calibration are in docs/simulator.md.

use serde::{Deserialize, Serialize};

use gputune_formats::card::{ClockRangeMhz, FanRangePct, OffsetRangeMhz};

/// Which clock an offset shifts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetClock {
    Gpu,
    Memory,
}

/// One point of the voltage/frequency curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VfPoint {
    pub clock_mhz: u32,
    pub voltage_mv: u32,
}

/// Everything about a card model that does not change while it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardSpec {
    pub name: String,
    pub architecture: String,
    pub memory_total_bytes: u64,
    pub memory_used_idle_bytes: u64,
    pub memory_used_training_bytes: u64,

    pub power_limit_min_mw: u32,
    pub power_limit_max_mw: u32,
    pub power_limit_default_mw: u32,

    /// Stock voltage/frequency curve, ascending. Below the first point the voltage stays at the
    /// first point's (the voltage floor); the last point is the top boost bin.
    pub vf_curve: Vec<VfPoint>,
    /// The range NVML lists as supported graphics clocks (locks must fall inside it).
    pub gpu_clock_supported: ClockRangeMhz,
    /// The rated boost clock (NVML's customer boost maximum): the scanner's default lock.
    pub boost_clock_mhz: u32,
    pub gpu_clock_idle_mhz: u32,
    /// GPU Boost moves in bins of this size.
    pub clock_bin_mhz: u32,
    /// Supported memory clocks, as NVML lists them (descending).
    pub memory_clocks_supported_mhz: Vec<u32>,
    pub memory_clock_load_mhz: u32,
    pub memory_clock_idle_mhz: u32,
    /// How much of a memory offset shows up in the memory clock (GDDR6X counts double data
    /// rate: +1000 offset raises the reported clock by 500 MHz).
    pub memory_offset_effect_ratio: f64,
    pub gpu_clock_offset_range: Option<OffsetRangeMhz>,
    pub memory_clock_offset_range: Option<OffsetRangeMhz>,
    /// The P-states the driver reports clock offsets for, ascending. Those in
    /// `offset_adjustable_pstates` take the ranges above; the others report 0 to 0 (an RTX
    /// card's idle P8). Empty with a range: P0 alone.
    #[serde(default)]
    pub offset_pstates: Vec<u32>,
    #[serde(default)]
    pub offset_adjustable_pstates: Vec<u32>,
    /// Whether the adjustable P-states share one offset (a write to one moves them all), as
    /// LACT found on Maxwell; on later cards each has its own.
    #[serde(default)]
    pub offset_pstates_linked: bool,

    /// The P-state the card computes in (CUDA on GeForce cards: P2), whose offsets count.
    pub performance_state_load: u32,
    pub performance_state_idle: u32,

    pub fan_count: u32,
    pub fan_speed_range: Option<FanRangePct>,
    pub fan_max_rpm: u32,
    /// Default fan curve (temperature °C, speed %), ascending; the driver's automatic mode.
    pub fan_auto_curve: Vec<(f64, f64)>,
    /// Zero-RPM mode: fans stop below the first curve temperature minus this hysteresis.
    pub fan_stop_hysteresis_c: Option<f64>,
    /// How fast a fan reaches its target, percent per second.
    pub fan_slew_pct_per_s: f64,

    pub pcie_link_gen_max: u32,
    pub pcie_link_width_max: u32,
    /// Link generation while idle (the link trains down to save power).
    pub pcie_link_gen_idle: u32,

    // Power model: P = static + fans + memory + leakage + dynamic (docs/simulator.md).
    pub static_power_w: f64,
    pub fan_power_w_at_full: f64,
    pub memory_power_idle_w: f64,
    pub memory_power_load_w: f64,
    pub memory_power_per_utilization_w: f64,
    pub leakage_power_w_at_1v: f64,
    pub leakage_increase_per_c: f64,
    pub dynamic_power_w_per_v2_ghz: f64,

    // Thermal model: C dT/dt = P - G (T - ambient), G = passive + fan * (speed)^0.8.
    pub ambient_c: f64,
    pub heat_capacity_j_per_c: f64,
    pub conductance_passive_w_per_c: f64,
    pub conductance_fans_w_per_c: f64,
    /// GPU Boost drops one clock bin for every this many °C above `boost_bin_start_c`.
    pub boost_bin_start_c: f64,
    pub boost_bin_every_c: f64,
    /// Above this the driver lowers clocks to cool down (SW thermal slowdown).
    pub thermal_target_c: f64,
    /// Above this the hardware halves clocks (HW thermal slowdown).
    pub hardware_slowdown_c: f64,
    pub shutdown_c: f64,
    /// Whether the card has ECC on and reports its error counters (datacenter cards).
    #[serde(default)]
    pub ecc_reported: bool,
}

impl CardSpec {
    /// GeForce RTX 4090 (Founders Edition figures).
    pub fn rtx4090() -> CardSpec {
        let vf = [
            (1395, 700),
            (1800, 760),
            (2100, 820),
            (2250, 860),
            (2400, 900),
            (2520, 950),
            (2610, 1000),
            (2700, 1050),
            (2745, 1075),
            (2790, 1100),
        ];
        CardSpec {
            name: "NVIDIA GeForce RTX 4090".to_string(),
            architecture: "Ada".to_string(),
            memory_total_bytes: 24_564 * MIB,
            memory_used_idle_bytes: 420 * MIB,
            memory_used_training_bytes: 21_870 * MIB,
            power_limit_min_mw: 150_000,
            power_limit_max_mw: 600_000,
            power_limit_default_mw: 450_000,
            vf_curve: curve(&vf),
            gpu_clock_supported: ClockRangeMhz {
                min_mhz: 210,
                max_mhz: 3105,
            },
            boost_clock_mhz: 2520,
            gpu_clock_idle_mhz: 210,
            clock_bin_mhz: 15,
            memory_clocks_supported_mhz: vec![10_501, 10_251, 5_001, 810, 405],
            memory_clock_load_mhz: 10_251,
            memory_clock_idle_mhz: 405,
            memory_offset_effect_ratio: 0.5,
            gpu_clock_offset_range: Some(OffsetRangeMhz {
                min_mhz: -1000,
                max_mhz: 1000,
            }),
            memory_clock_offset_range: Some(OffsetRangeMhz {
                min_mhz: -2000,
                max_mhz: 6000,
            }),
            offset_pstates: vec![0, 2, 8],
            offset_adjustable_pstates: vec![0, 2],
            offset_pstates_linked: false,
            performance_state_load: 2,
            performance_state_idle: 8,
            fan_count: 2,
            fan_speed_range: Some(FanRangePct {
                min_pct: 30,
                max_pct: 100,
            }),
            fan_max_rpm: 3_000,
            fan_auto_curve: vec![
                (50.0, 30.0),
                (60.0, 40.0),
                (70.0, 58.0),
                (80.0, 80.0),
                (88.0, 100.0),
            ],
            fan_stop_hysteresis_c: Some(6.0),
            fan_slew_pct_per_s: 10.0,
            pcie_link_gen_max: 4,
            pcie_link_width_max: 16,
            pcie_link_gen_idle: 1,
            static_power_w: 8.0,
            fan_power_w_at_full: 8.0,
            memory_power_idle_w: 6.0,
            memory_power_load_w: 25.0,
            memory_power_per_utilization_w: 35.0,
            leakage_power_w_at_1v: 30.0,
            leakage_increase_per_c: 0.012,
            dynamic_power_w_per_v2_ghz: 84.0,
            ambient_c: 25.0,
            heat_capacity_j_per_c: 900.0,
            conductance_passive_w_per_c: 0.75,
            conductance_fans_w_per_c: 13.8,
            boost_bin_start_c: 40.0,
            boost_bin_every_c: 5.5,
            thermal_target_c: 83.0,
            hardware_slowdown_c: 90.0,
            shutdown_c: 95.0,
            // GeForce: ECC available but off, so its counters are not supported.
            ecc_reported: false,
        }
    }

    /// NVIDIA H100 SXM 80 GB: a fanless datacenter card cooled by the chassis.
    pub fn h100_sxm() -> CardSpec {
        let vf = [
            (345, 670),
            (1000, 700),
            (1410, 760),
            (1755, 880),
            (1980, 1000),
        ];
        CardSpec {
            name: "NVIDIA H100 80GB HBM3".to_string(),
            architecture: "Hopper".to_string(),
            memory_total_bytes: 81_559 * MIB,
            memory_used_idle_bytes: 4 * MIB,
            memory_used_training_bytes: 74_200 * MIB,
            power_limit_min_mw: 200_000,
            power_limit_max_mw: 700_000,
            power_limit_default_mw: 700_000,
            vf_curve: curve(&vf),
            gpu_clock_supported: ClockRangeMhz {
                min_mhz: 345,
                max_mhz: 1980,
            },
            boost_clock_mhz: 1980,
            gpu_clock_idle_mhz: 345,
            clock_bin_mhz: 15,
            memory_clocks_supported_mhz: vec![2_619],
            memory_clock_load_mhz: 2_619,
            memory_clock_idle_mhz: 2_619,
            memory_offset_effect_ratio: 1.0,
            gpu_clock_offset_range: None,
            memory_clock_offset_range: None,
            offset_pstates: Vec::new(),
            offset_adjustable_pstates: Vec::new(),
            offset_pstates_linked: false,
            performance_state_load: 0,
            performance_state_idle: 0,
            fan_count: 0,
            fan_speed_range: None,
            fan_max_rpm: 0,
            fan_auto_curve: Vec::new(),
            fan_stop_hysteresis_c: None,
            fan_slew_pct_per_s: 0.0,
            pcie_link_gen_max: 5,
            pcie_link_width_max: 16,
            pcie_link_gen_idle: 5,
            static_power_w: 30.0,
            fan_power_w_at_full: 0.0,
            memory_power_idle_w: 35.0,
            memory_power_load_w: 60.0,
            memory_power_per_utilization_w: 50.0,
            leakage_power_w_at_1v: 60.0,
            leakage_increase_per_c: 0.012,
            dynamic_power_w_per_v2_ghz: 195.0,
            ambient_c: 30.0,
            heat_capacity_j_per_c: 1_500.0,
            conductance_passive_w_per_c: 16.0,
            conductance_fans_w_per_c: 0.0,
            boost_bin_start_c: 200.0,
            boost_bin_every_c: 1.0,
            thermal_target_c: 85.0,
            hardware_slowdown_c: 90.0,
            shutdown_c: 92.0,
            ecc_reported: true,
        }
    }

    /// Voltage the stock curve needs for `clock_mhz` (interpolated, floor below the first point).
    pub fn curve_voltage_mv(&self, clock_mhz: f64) -> f64 {
        let Some(first) = self.vf_curve.first() else {
            return 1000.0;
        };
        if clock_mhz <= f64::from(first.clock_mhz) {
            return f64::from(first.voltage_mv);
        }
        for pair in self.vf_curve.windows(2) {
            let (low, high) = (pair[0], pair[1]);
            if clock_mhz <= f64::from(high.clock_mhz) {
                let span = f64::from(high.clock_mhz - low.clock_mhz).max(1.0);
                let fraction = (clock_mhz - f64::from(low.clock_mhz)) / span;
                return f64::from(low.voltage_mv)
                    + fraction * (f64::from(high.voltage_mv) - f64::from(low.voltage_mv));
            }
        }
        // Past the top of the curve the voltage is pinned at the top point's: the card cannot
        // boost higher, so callers never ask for more than the top clock.
        self.vf_curve
            .last()
            .map_or(1000.0, |last| f64::from(last.voltage_mv))
    }

    /// The P-states the card reports offsets for, each with whether it can be changed.
    pub fn offset_pstates(&self) -> Vec<(u32, bool)> {
        if self.offset_pstates.is_empty() {
            let any =
                self.gpu_clock_offset_range.is_some() || self.memory_clock_offset_range.is_some();
            return if any { vec![(0, true)] } else { Vec::new() };
        }
        self.offset_pstates
            .iter()
            .map(|pstate| (*pstate, self.offset_adjustable_pstates.contains(pstate)))
            .collect()
    }

    /// P-state `pstate`'s offset range for `clock`, as the driver reports it (0 to 0 where it
    /// cannot be changed); `None` where the card reports no offset for it.
    pub fn offset_range_at(&self, clock: OffsetClock, pstate: u32) -> Option<OffsetRangeMhz> {
        let range = match clock {
            OffsetClock::Gpu => self.gpu_clock_offset_range,
            OffsetClock::Memory => self.memory_clock_offset_range,
        }?;
        let (_, adjustable) = self
            .offset_pstates()
            .into_iter()
            .find(|(listed, _)| *listed == pstate)?;
        Some(if adjustable {
            range
        } else {
            OffsetRangeMhz {
                min_mhz: 0,
                max_mhz: 0,
            }
        })
    }

    /// Highest clock of the stock curve.
    pub fn curve_top_mhz(&self) -> u32 {
        self.vf_curve
            .last()
            .map_or(self.gpu_clock_supported.max_mhz, |point| point.clock_mhz)
    }

    /// Fan speed the driver's automatic curve wants at `temperature_c`.
    pub fn fan_auto_target_pct(&self, temperature_c: f64, fans_spinning: bool) -> f64 {
        let Some(&(first_c, first_pct)) = self.fan_auto_curve.first() else {
            return 0.0;
        };
        if let Some(hysteresis_c) = self.fan_stop_hysteresis_c {
            let stop_below_c = if fans_spinning {
                first_c - hysteresis_c
            } else {
                first_c
            };
            if temperature_c < stop_below_c {
                return 0.0;
            }
        }
        if temperature_c <= first_c {
            return first_pct;
        }
        for pair in self.fan_auto_curve.windows(2) {
            let ((low_c, low_pct), (high_c, high_pct)) = (pair[0], pair[1]);
            if temperature_c <= high_c {
                return low_pct + (temperature_c - low_c) / (high_c - low_c) * (high_pct - low_pct);
            }
        }
        self.fan_auto_curve.last().map_or(100.0, |point| point.1)
    }
}

const MIB: u64 = 1024 * 1024;

/// A V/F curve from (MHz, mV) pairs.
fn curve(points: &[(u32, u32)]) -> Vec<VfPoint> {
    points
        .iter()
        .map(|&(clock_mhz, voltage_mv)| VfPoint {
            clock_mhz,
            voltage_mv,
        })
        .collect()
}
