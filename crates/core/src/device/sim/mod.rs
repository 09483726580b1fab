//! The simulated GPUs: an RTX 4090 (or eight, or a fanless datacenter card) that behave like
//! the real ones, for users without an NVIDIA driver and for tests. See docs/simulator.md.

mod card;
mod controls;
mod events;
mod load;
mod machine;
mod physics;
mod processes;
pub(crate) mod seed;
pub mod silicon;
pub mod supply;
mod topology;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

pub use card::{CardSpec, OffsetClock, VfPoint};
pub use load::{LoadPattern, LoadPoint};
pub use machine::{SimMachine, known_card};
pub use physics::{SimError, SimGpu, SimReading, SimSettings};
pub use processes::{SIM_FIRST_PID, SIM_USER};
pub use silicon::SiliconMargin;
pub use topology::{P2pDriver, sim_p2p_access, sim_topology};

use super::gate::ValidatedSetting;
use super::{Backend, CurrentSettings, Reopener, compute_offset_mhz, compute_offset_range};
use crate::clock::{Clock, WallClock};
use gputune_formats::reports::links::{P2pAccess, Topology};
use gputune_formats::{
    card::{
        BackendKind, ClockRangeMhz, Constraints, CriticalEvent, DeviceError, FanMode, FanReading,
        GpuIdentity, GpuProcess, PstateOffset, PstateOffsetRange, Setting, Telemetry,
    },
    throttle::ThrottleReasons,
};

/// Which machine to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum SimScenario {
    /// One GeForce RTX 4090.
    #[default]
    #[value(name = "rtx4090")]
    #[serde(rename = "rtx4090")]
    Rtx4090,
    /// Eight RTX 4090s in one box.
    #[value(name = "8x-rtx4090")]
    #[serde(rename = "8x-rtx4090")]
    EightRtx4090,
    /// One H100 SXM: no fans, no clock offsets.
    #[value(name = "datacenter-fanless")]
    #[serde(rename = "datacenter-fanless")]
    DatacenterFanless,
}

impl SimScenario {
    /// Parses the names used on the command line and in `FAKE_NVML_SCENARIO`.
    pub fn from_name(name: &str) -> Option<SimScenario> {
        match name.trim() {
            "rtx4090" => Some(SimScenario::Rtx4090),
            "8x-rtx4090" => Some(SimScenario::EightRtx4090),
            "datacenter-fanless" => Some(SimScenario::DatacenterFanless),
            _ => None,
        }
    }
}

/// How the simulator is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimOptions {
    pub scenario: SimScenario,
    pub load: LoadPattern,
}

/// The simulator as a `Backend`. Handles made by [`Backend::reopener`] share one machine, as
/// two NVML handles share one card.
pub struct SimBackend {
    machine: Arc<Mutex<SimMachine>>,
    clock: Arc<dyn Clock>,
    /// Per GPU, the Xids this handle has reported (or found when it began watching).
    xids_seen: Option<Vec<u64>>,
    /// What the driver says of P2P (shared by handles made by `share`).
    p2p_driver: Arc<Mutex<P2pDriver>>,
    /// Per GPU, until when (the clock's ms) copies run on it: its link trains up meanwhile.
    copies_until_ms: Arc<Mutex<BTreeMap<u32, u64>>>,
}

impl SimBackend {
    /// A simulated machine on real time.
    pub fn new(options: &SimOptions) -> SimBackend {
        SimBackend::with_clock(options, Box::new(WallClock))
    }

    /// A simulated machine on the given clock.
    pub fn with_clock(options: &SimOptions, clock: Box<dyn Clock>) -> SimBackend {
        let machine = SimMachine::new(options.scenario, options.load, clock.now_ms());
        SimBackend {
            machine: Arc::new(Mutex::new(machine)),
            clock: Arc::from(clock),
            xids_seen: None,
            p2p_driver: Arc::default(),
            copies_until_ms: Arc::default(),
        }
    }

    /// Another handle on the same simulated machine (what a second NVML handle is to a card).
    pub fn share(&self) -> SimBackend {
        SimBackend {
            machine: Arc::clone(&self.machine),
            clock: Arc::clone(&self.clock),
            xids_seen: None,
            p2p_driver: Arc::clone(&self.p2p_driver),
            copies_until_ms: Arc::clone(&self.copies_until_ms),
        }
    }

    /// The machine goes down for `why` (a tripped supply): every card answers lost until a new
    /// machine is made (the reboot).
    pub fn go_down(&self, why: &str) {
        self.machine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .go_down(why);
    }

    /// Models the driver's P2P: stock (none on GeForce cards) or patched (`topology.rs`).
    pub fn set_p2p_driver(&self, driver: P2pDriver) {
        *self
            .p2p_driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = driver;
    }

    /// Whether copies run on GPU `index` now (its link then runs at its best).
    fn copies_running_now(&self, index: u32) -> bool {
        let until = self
            .copies_until_ms
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        until
            .get(&index)
            .is_some_and(|until_ms| self.clock.now_ms() < *until_ms)
    }

    /// The scenario and card count, for the topology.
    fn layout(&self) -> (SimScenario, u32) {
        let machine = self.machine.lock().unwrap_or_else(PoisonError::into_inner);
        (machine.scenario, machine.gpus.len() as u32)
    }

    /// A copy of the simulated cards, for tests that look beneath the backend.
    pub fn machine(&self) -> SimMachine {
        self.machine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Starts or stops card `index`'s work from now on (a harness loading one card at a time,
    /// as the ranking does; a simulated card's load is otherwise its scenario's all along).
    pub fn set_load(&self, index: u32, load: LoadPattern) -> Result<(), DeviceError> {
        self.with_gpu(index, |gpu| gpu.load = load)
    }

    /// Runs `body` on GPU `index`, advanced to the clock's time.
    fn with_gpu<T>(
        &self,
        index: u32,
        body: impl FnOnce(&mut SimGpu) -> T,
    ) -> Result<T, DeviceError> {
        let now_ms = self.clock.now_ms();
        let mut machine = self.machine.lock().unwrap_or_else(PoisonError::into_inner);
        // A machine that went down answers for no card (the driver's "GPU is lost").
        if machine.down.is_some() {
            return Err(DeviceError::GpuLost { index });
        }
        let gpu = machine
            .gpus
            .get_mut(index as usize)
            .ok_or_else(|| DeviceError::GpuNotFound {
                query: index.to_string(),
            })?;
        gpu.advance_to(now_ms);
        Ok(body(gpu))
    }
}

/// The constraints a simulated card reports, exactly as NVML would describe them.
pub fn sim_constraints(spec: &CardSpec) -> Constraints {
    let memory_clocks = &spec.memory_clocks_supported_mhz;
    let gpu_clock_offset_pstates = pstate_ranges(spec, OffsetClock::Gpu);
    let memory_clock_offset_pstates = pstate_ranges(spec, OffsetClock::Memory);
    Constraints {
        power_limit_min_mw: Some(spec.power_limit_min_mw),
        power_limit_max_mw: Some(spec.power_limit_max_mw),
        power_limit_default_mw: Some(spec.power_limit_default_mw),
        gpu_clock_range: Some(spec.gpu_clock_supported),
        memory_clock_range: match (memory_clocks.iter().min(), memory_clocks.iter().max()) {
            (Some(&min_mhz), Some(&max_mhz)) => Some(ClockRangeMhz { min_mhz, max_mhz }),
            _ => None,
        },
        fan_count: spec.fan_count,
        fan_speed_range: spec.fan_speed_range,
        gpu_clock_offset_range: compute_offset_range(&gpu_clock_offset_pstates),
        memory_clock_offset_range: compute_offset_range(&memory_clock_offset_pstates),
        gpu_clock_offset_pstates,
        memory_clock_offset_pstates,
        slowdown_temperature_c: Some(spec.hardware_slowdown_c.round().max(0.0) as u32),
        boost_clock_mhz: Some(spec.boost_clock_mhz),
    }
}

/// Each P-state's offset range for `clock`, as NVML lists them.
fn pstate_ranges(spec: &CardSpec, clock: OffsetClock) -> Vec<PstateOffsetRange> {
    spec.offset_pstates()
        .into_iter()
        .filter_map(|(pstate, _)| {
            let range = spec.offset_range_at(clock, pstate)?;
            Some(PstateOffsetRange {
                pstate,
                min_mhz: range.min_mhz,
                max_mhz: range.max_mhz,
            })
        })
        .collect()
}

/// Each P-state's offset for `clock` on a simulated card.
fn pstate_offsets(gpu: &SimGpu, clock: OffsetClock) -> Vec<PstateOffset> {
    gpu.spec
        .offset_pstates()
        .into_iter()
        .filter_map(|(pstate, _)| {
            Some(PstateOffset {
                pstate,
                offset_mhz: gpu.offset_at(clock, pstate)?,
            })
        })
        .collect()
}

/// Two cards that are not a pair of this machine's (one card twice, or one it lacks).
fn pair_not_found(a: u32, b: u32) -> DeviceError {
    DeviceError::GpuNotFound {
        query: format!("{a} and {b} as a pair"),
    }
}

fn sim_error(error: SimError, setting: &Setting) -> DeviceError {
    match error {
        SimError::InvalidArgument => DeviceError::InvalidArgument {
            what: setting.describe(),
        },
        SimError::NotSupported => DeviceError::NotSupported {
            what: setting.describe(),
        },
    }
}

impl Backend for SimBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Sim
    }

    fn gpu_count(&mut self) -> Result<u32, DeviceError> {
        let machine = self.machine.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(machine.gpus.len() as u32)
    }

    fn identity(&mut self, index: u32) -> Result<GpuIdentity, DeviceError> {
        self.with_gpu(index, |gpu| GpuIdentity {
            index,
            uuid: gpu.uuid.clone(),
            name: gpu.spec.name.clone(),
            pci_bus_id: gpu.pci_bus_id.clone(),
            memory_total_bytes: gpu.spec.memory_total_bytes,
            driver_version: Some("simulated".to_string()),
            nvml_version: Some("simulated".to_string()),
            architecture: Some(gpu.spec.architecture.clone()),
            // The simulator's device files follow its enumeration.
            minor_number: Some(index),
        })
    }

    fn constraints(&mut self, index: u32) -> Result<Constraints, DeviceError> {
        self.with_gpu(index, |gpu| sim_constraints(&gpu.spec))
    }

    fn telemetry(&mut self, index: u32) -> Result<Telemetry, DeviceError> {
        // The sim's own clock: wall time for users, simulated time in tests.
        let sampled_at_ms = self.clock.now_ms();
        let mut telemetry = self.with_gpu(index, |gpu| sim_telemetry(gpu, sampled_at_ms))?;
        if self.copies_running_now(index) {
            // A link trains up within microseconds of traffic, whatever the load.
            telemetry.pcie_link_gen = telemetry.pcie_link_gen_max;
        }
        Ok(telemetry)
    }

    fn topology(&mut self, a: u32, b: u32) -> Result<Option<Topology>, DeviceError> {
        let (scenario, gpu_count) = self.layout();
        sim_topology(scenario, gpu_count, a, b)
            .map(Some)
            .map_err(|_| pair_not_found(a, b))
    }

    fn p2p_access(&mut self, a: u32, b: u32) -> Result<Option<P2pAccess>, DeviceError> {
        let (scenario, gpu_count) = self.layout();
        let driver = *self
            .p2p_driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sim_p2p_access(scenario, gpu_count, a, b, driver)
            .map(Some)
            .map_err(|_| pair_not_found(a, b))
    }

    fn copies_running(&mut self, index: u32, duration_ms: u64) -> Result<(), DeviceError> {
        let until_ms = self.clock.now_ms().saturating_add(duration_ms);
        self.copies_until_ms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, until_ms);
        Ok(())
    }

    fn current_settings(&mut self, index: u32) -> Result<CurrentSettings, DeviceError> {
        self.with_gpu(index, |gpu| {
            let settings = &gpu.settings;
            let gpu_clock_offsets = pstate_offsets(gpu, OffsetClock::Gpu);
            let memory_clock_offsets = pstate_offsets(gpu, OffsetClock::Memory);
            CurrentSettings {
                power_limit_mw: Some(settings.power_limit_mw),
                gpu_clock_offset_mhz: compute_offset_mhz(&gpu_clock_offsets),
                memory_clock_offset_mhz: compute_offset_mhz(&memory_clock_offsets),
                gpu_clock_offsets,
                memory_clock_offsets,
                fans: (gpu.spec.fan_count > 0).then(|| {
                    settings
                        .fan_manual_pct
                        .iter()
                        .map(|manual| match manual {
                            Some(speed_pct) => FanMode::Manual {
                                speed_pct: *speed_pct,
                            },
                            None => FanMode::Automatic,
                        })
                        .collect()
                }),
            }
        })
    }

    fn processes(&mut self, index: u32) -> Result<Option<Vec<GpuProcess>>, DeviceError> {
        let gpu_count = self.gpu_count()?;
        self.with_gpu(index, |gpu| {
            Some(processes::sim_processes(gpu, index, gpu_count))
        })
    }

    fn apply(&mut self, index: u32, setting: &ValidatedSetting) -> Result<(), DeviceError> {
        let setting = *setting.setting();
        self.with_gpu(index, |gpu| apply_to_sim(gpu, &setting))?
            .map_err(|error| sim_error(error, &setting))
    }

    fn reopener(&self) -> Reopener {
        let handle = self.share();
        Arc::new(move || Ok(Box::new(handle.share()) as Box<dyn Backend>))
    }

    fn watch_critical_events(&mut self) -> Result<(), DeviceError> {
        self.start_watching();
        Ok(())
    }

    /// Each Xid a card raised since this handle began watching, once (`events.rs`).
    fn next_critical_event(
        &mut self,
        timeout_ms: u32,
    ) -> Result<Option<CriticalEvent>, DeviceError> {
        Ok(self.wait_for_xid(timeout_ms))
    }
}

/// One snapshot of a simulated card, as NVML would report it.
fn sim_telemetry(gpu: &SimGpu, sampled_at_ms: u64) -> Telemetry {
    let reading = &gpu.reading;
    let fans = (gpu.spec.fan_count > 0).then(|| {
        (0..gpu.spec.fan_count)
            .map(|fan| FanReading {
                speed_pct: gpu.fan_speed_pct(fan).ok(),
                speed_rpm: gpu.fan_speed_rpm(fan).ok(),
            })
            .collect()
    });
    Telemetry {
        sampled_at_ms,
        power_draw_mw: Some(reading.power_draw_mw),
        power_limit_mw: Some(gpu.enforced_power_limit_mw()),
        temperature_c: Some(gpu.temperature_c()),
        fans,
        gpu_clock_mhz: Some(reading.gpu_clock_mhz),
        sm_clock_mhz: Some(reading.gpu_clock_mhz),
        memory_clock_mhz: Some(reading.memory_clock_mhz),
        utilization_gpu_pct: Some(reading.utilization_gpu_pct),
        utilization_memory_pct: Some(reading.utilization_memory_pct),
        memory_used_bytes: Some(reading.memory_used_bytes),
        performance_state: Some(reading.performance_state),
        throttle_reasons: Some(ThrottleReasons::from_bits(reading.throttle_reasons_bits)),
        pcie_link_gen: Some(reading.pcie_link_gen),
        pcie_link_width: Some(gpu.link_width_reached()),
        pcie_link_gen_max: Some(gpu.spec.pcie_link_gen_max),
        pcie_link_width_max: Some(gpu.spec.pcie_link_width_max),
        energy_total_mj: Some(gpu.energy_total_mj()),
        processes: None,
        ecc: gpu.ecc_counts(),
    }
}

/// Writes one setting to a simulated card (the card's own range checks still apply).
pub fn apply_to_sim(gpu: &mut SimGpu, setting: &Setting) -> Result<(), SimError> {
    match *setting {
        Setting::PowerLimit { power_limit_mw } => gpu.set_power_limit_mw(power_limit_mw),
        Setting::LockGpuClocks { min_mhz, max_mhz } => gpu.lock_gpu_clocks(min_mhz, max_mhz),
        Setting::ResetGpuClocks => {
            gpu.reset_gpu_clocks();
            Ok(())
        }
        Setting::LockMemoryClocks { min_mhz, max_mhz } => gpu.lock_memory_clocks(min_mhz, max_mhz),
        Setting::ResetMemoryClocks => {
            gpu.reset_memory_clocks();
            Ok(())
        }
        Setting::GpuClockOffset { offset_mhz } => gpu.set_gpu_clock_offset_mhz(offset_mhz),
        Setting::MemoryClockOffset { offset_mhz } => gpu.set_memory_clock_offset_mhz(offset_mhz),
        Setting::GpuClockOffsetAt { pstate, offset_mhz } => {
            gpu.set_gpu_clock_offset_at(pstate, offset_mhz)
        }
        Setting::MemoryClockOffsetAt { pstate, offset_mhz } => {
            gpu.set_memory_clock_offset_at(pstate, offset_mhz)
        }
        Setting::FanSpeed {
            fan_index,
            speed_pct,
        } => gpu.set_fan_speed_pct(fan_index, speed_pct),
        Setting::FanAutomatic { fan_index } => gpu.set_fan_automatic(fan_index),
    }
}
