//! The simulated device: a [`ComputeDevice`] for the simulator's and the fake libnvidia-ml's
//! cards, whose results go wrong as the simulated card's state says (its silicon margin,
//! `device::sim::silicon`), so the same check runs, and is tested, without a GPU.
//!
//! It does real, small work on the CPU (`simulated/sample.rs`: a 64³ GEMM, 64 FMA chains, 64 Ki
//! VRAM words) and compares it as the real device does, so every wrong value it reports is a real
//! mismatch it counted. Past the margin it corrupts as many of those values as the model draws
//! (Poisson, mean = wrong-result rate × the results of the full-size work), capped at the
//! sample's size, plus any a test injected ([`SimFaults`]). It reports the results, FLOP and
//! bytes of the full-size work ([`ComputeSetup`]) and sleeps the time the card would take.
//! docs/simulator.md has the throughput it models and what a batch costs.

mod faults;
mod sample;

use std::sync::Arc;
use std::time::{Duration, Instant};

use faults::Part;
pub use faults::{INJECTED_FAULT, SimFaults};
use sample::{Draws, FMA_SAMPLE_CHAINS, GEMM_SAMPLE_N};

use super::compute::{CardConditions, ComputeDevice, ComputeError, ComputeSetup, VramPattern};
use super::reference;
use crate::device::sim::silicon::applied_offset_mhz;
use crate::device::sim::supply::SupplyWatch;
use crate::device::sim::{CardSpec, SiliconMargin, known_card};
use gputune_formats::card::GpuIdentity;
use gputune_formats::reports::stability::{Checked, Prepared};

/// What a card's checked work runs at, at the margin's reference clock (its boost clock) and
/// its stock memory clock; it scales with the clocks the card runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModeledThroughput {
    /// Tensor-core GEMM, bf16 in, fp32 accumulated, TFLOP/s achieved.
    pub gemm_tflops: f64,
    /// The FMA chain (fp32), TFLOP/s achieved.
    pub fma_tflops: f64,
    /// VRAM written and read back, GB/s (10⁹ bytes) achieved.
    pub vram_gb_per_s: f64,
}

impl ModeledThroughput {
    /// RTX 4090: 165 TFLOP/s is its dense bf16 rate with fp32 accumulate (GeForce cards run
    /// that at half the fp16-accumulate rate); fp32 peaks at 82.6; GDDR6X at 1008 GB/s.
    /// H100 SXM: about 700 of its 989 dense TFLOP/s are reached by large GEMMs; fp32 peaks at
    /// 67; HBM3 at 3350 GB/s.
    pub fn of(spec: &CardSpec) -> ModeledThroughput {
        if spec.architecture == "Hopper" {
            ModeledThroughput {
                gemm_tflops: 700.0,
                fma_tflops: 50.0,
                vram_gb_per_s: 3000.0,
            }
        } else {
            ModeledThroughput {
                gemm_tflops: 165.0,
                fma_tflops: 60.0,
                vram_gb_per_s: 1000.0,
            }
        }
    }
}

/// The work as set up by `prepare`, with the sample's exact results.
struct Ready {
    setup: ComputeSetup,
    gemm_inputs: (Vec<f32>, Vec<f32>),
    gemm_reference: Vec<f32>,
    fma_reference: Vec<u32>,
    vram_tested_bytes: u64,
}

/// A simulated card's compute device. See the module's documentation.
pub struct SimulatedDevice {
    name: String,
    memory_total_bytes: u64,
    spec: CardSpec,
    margin: SiliconMargin,
    throughput: ModeledThroughput,
    conditions: CardConditions,
    faults: SimFaults,
    draws: Draws,
    ready: Option<Ready>,
    /// In a box check of the 8-GPU box: the box's supply, which bursts begun together can trip
    /// (`device::sim::supply`), and this card's place among its cards.
    supply: Option<(Arc<SupplyWatch>, usize)>,
    /// When its last batch ended: a batch after a gap begins a burst.
    last_end: Option<Instant>,
}

impl SimulatedDevice {
    /// The device of the simulated card `uuid`, of model `spec`.
    pub fn new(uuid: &str, name: &str, memory_total_bytes: u64, spec: CardSpec) -> SimulatedDevice {
        SimulatedDevice {
            name: name.to_string(),
            memory_total_bytes,
            margin: SiliconMargin::for_card(&spec, uuid),
            throughput: ModeledThroughput::of(&spec),
            spec,
            conditions: CardConditions::default(),
            faults: SimFaults::default(),
            draws: Draws::seeded(uuid),
            ready: None,
            supply: None,
            last_end: None,
        }
    }

    /// This card draws from `supply`, as card `card` of its box (a box check's devices share
    /// one): bursts begun together at high clocks trip it, and then every call fails as a GPU
    /// fallen off the bus.
    pub fn with_supply(mut self, supply: Arc<SupplyWatch>, card: usize) -> SimulatedDevice {
        self.supply = Some((supply, card));
        self
    }

    /// A burst beginning `at` (after a gap) is shown to the supply; once it has tripped, the
    /// card is gone.
    fn draw_from_supply(&mut self, at: Instant) -> Result<(), ComputeError> {
        let Some((supply, card)) = &self.supply else {
            return Ok(());
        };
        let begins_burst = self
            .last_end
            .is_none_or(|end| at.saturating_duration_since(end) > Duration::from_millis(1));
        let tripped = if begins_burst {
            supply.burst_began(*card, at, self.clock_mhz())
        } else {
            supply.tripped()
        };
        match tripped {
            Some(trip) => Err(ComputeError::Fault(format!(
                "the GPU has fallen off the bus (Xid 79): {}",
                trip.describe()
            ))),
            None => Ok(()),
        }
    }

    /// The device for `identity` when it is one of the simulator's (or the fake library's)
    /// cards, known by its UUID; `None` for any other card, a real one included.
    pub fn for_gpu(identity: &GpuIdentity) -> Option<SimulatedDevice> {
        let spec = known_card(&identity.uuid)?;
        Some(SimulatedDevice::new(
            &identity.uuid,
            &identity.name,
            identity.memory_total_bytes,
            spec,
        ))
    }

    /// A handle to inject faults with (clones share them).
    pub fn faults(&self) -> SimFaults {
        self.faults.clone()
    }

    /// The card's silicon margin.
    pub fn margin(&self) -> SiliconMargin {
        self.margin
    }

    /// The throughput modeled at the reference clock.
    pub fn throughput(&self) -> ModeledThroughput {
        self.throughput
    }

    /// The graphics clock the card runs: as read, else its lock, else its reference clock.
    fn clock_mhz(&self) -> u32 {
        let conditions = &self.conditions;
        conditions
            .graphics_clock_mhz
            .or(conditions.locked_max_mhz)
            .unwrap_or(self.margin.reference_clock_mhz)
    }

    fn temperature_c(&self) -> f64 {
        f64::from(self.conditions.temperature_c.unwrap_or(60))
    }

    /// Wrong results per result for the compute parts, at the card's state now.
    pub fn wrong_rate(&self) -> f64 {
        let offset_mhz = applied_offset_mhz(
            &self.spec,
            self.conditions.gpu_clock_offset_mhz.unwrap_or(0),
        );
        self.margin
            .wrong_rate(offset_mhz, self.clock_mhz(), self.temperature_c())
    }

    /// How much faster than at the reference clock the compute runs.
    fn clock_scale(&self) -> f64 {
        f64::from(self.clock_mhz()) / f64::from(self.margin.reference_clock_mhz.max(1))
    }

    /// How much faster than at the stock memory clock the VRAM runs.
    fn memory_scale(&self) -> f64 {
        let stock = f64::from(self.spec.memory_clock_load_mhz.max(1));
        let offset = f64::from(self.conditions.memory_clock_offset_mhz.unwrap_or(0));
        ((stock + offset * self.spec.memory_offset_effect_ratio) / stock).max(0.1)
    }

    fn ready(&self) -> Result<&Ready, ComputeError> {
        self.ready.as_ref().ok_or_else(|| {
            ComputeError::Unavailable(
                "The simulated device was not prepared: call prepare first.".to_string(),
            )
        })
    }

    /// Sleeps until `modeled_s` has passed since `started` (the CPU work counts against it).
    /// Where a batch's wrong results fall among `sample_len` sampled values: as many as the
    /// card's margin makes at its clock over `results`, and any a test injected.
    fn wrong_positions(&mut self, part: Part, results: u64, sample_len: usize) -> Vec<usize> {
        let corrupt =
            self.draws.poisson(self.wrong_rate() * results as f64) + self.faults.take_wrong(part);
        self.draws.positions(corrupt, sample_len)
    }

    /// A batch of arithmetic checked, taking the time `flop` take at `tflops` and this clock.
    fn arithmetic_checked(
        &self,
        started: Instant,
        results: u64,
        wrong: u64,
        flop: f64,
        tflops: f64,
    ) -> Checked {
        let elapsed_s = Self::take_time(started, flop / (tflops * 1e12 * self.clock_scale()));
        Checked {
            results,
            wrong,
            flop,
            bytes: 0,
            elapsed_s,
        }
    }

    fn take_time(started: Instant, modeled_s: f64) -> f64 {
        let modeled = Duration::from_secs_f64(modeled_s.clamp(0.0, 3600.0));
        if let Some(left) = modeled.checked_sub(started.elapsed()) {
            std::thread::sleep(left);
        }
        modeled_s
    }
}

impl ComputeDevice for SimulatedDevice {
    fn prepare(
        &mut self,
        setup: &ComputeSetup,
        fma_reference: &[u32],
    ) -> Result<Prepared, ComputeError> {
        let started = Instant::now();
        self.faults.on_call()?;
        if setup.gemm_n == 0 || !setup.gemm_n.is_multiple_of(128) || setup.fma_threads == 0 {
            return Err(ComputeError::Unavailable(format!(
                "The check's setup is not one the device can run (GEMM {} wide, {} FMA threads): \
                 the GEMM must be a multiple of 128 wide.",
                setup.gemm_n, setup.fma_threads
            )));
        }
        if fma_reference.len() != setup.fma_seeds as usize || fma_reference.is_empty() {
            return Err(ComputeError::Unavailable(format!(
                "The FMA chain's reference has {} values for {} seeds: compute one per seed.",
                fma_reference.len(),
                setup.fma_seeds
            )));
        }
        let free_bytes = self
            .memory_total_bytes
            .saturating_sub(self.spec.memory_used_idle_bytes)
            .saturating_sub(setup.vram_headroom_bytes);
        let vram_tested_bytes = setup
            .vram_max_bytes
            .map_or(free_bytes, |most| most.min(free_bytes))
            / 4
            * 4;
        if vram_tested_bytes == 0 {
            return Err(ComputeError::OutOfMemory(format!(
                "{} has no VRAM left to test after the {} MiB of headroom: free some memory.",
                self.name,
                setup.vram_headroom_bytes >> 20
            )));
        }
        let gemm_inputs = sample::gemm_sample_inputs();
        let gemm_reference = sample::gemm_sample(&gemm_inputs.0, &gemm_inputs.1);
        let chains = FMA_SAMPLE_CHAINS.min(fma_reference.len());
        self.ready = Some(Ready {
            setup: *setup,
            gemm_inputs,
            gemm_reference,
            fma_reference: fma_reference[..chains].to_vec(),
            vram_tested_bytes,
        });
        // The first (reference) GEMM pass.
        let pass_s = setup.gemm_flop() / (self.throughput.gemm_tflops * 1e12 * self.clock_scale());
        Self::take_time(started, pass_s);
        Ok(Prepared {
            device_name: self.name.clone(),
            runtime: "simulated".to_string(),
            vram_tested_bytes,
        })
    }

    fn gemm(&mut self, passes: u32) -> Result<Checked, ComputeError> {
        let started = Instant::now();
        self.faults.on_call()?;
        self.draw_from_supply(started)?;
        let ready = self.ready()?;
        let results = ready.setup.gemm_results() * u64::from(passes);
        let flop = ready.setup.gemm_flop() * f64::from(passes);
        let mut values = sample::gemm_sample(&ready.gemm_inputs.0, &ready.gemm_inputs.1);
        let expected = ready.gemm_reference.clone();
        let positions = self.wrong_positions(Part::Gemm, results, GEMM_SAMPLE_N * GEMM_SAMPLE_N);
        sample::corrupt_floats(&mut values, &positions, &mut self.draws);
        let wrong = reference::count_wrong(&expected, &values);
        let checked =
            self.arithmetic_checked(started, results, wrong, flop, self.throughput.gemm_tflops);
        self.last_end = Some(Instant::now());
        Ok(checked)
    }

    fn fma(&mut self) -> Result<Checked, ComputeError> {
        let started = Instant::now();
        self.faults.on_call()?;
        let ready = self.ready()?;
        let results = u64::from(ready.setup.fma_threads);
        let flop = ready.setup.fma_flop();
        let expected = ready.fma_reference.clone();
        let mut values = sample::fma_sample(expected.len(), ready.setup.fma_steps);
        let positions = self.wrong_positions(Part::Fma, results, values.len());
        sample::corrupt_words(&mut values, &positions, &mut self.draws);
        let wrong = reference::count_wrong_words(&expected, &values);
        Ok(self.arithmetic_checked(started, results, wrong, flop, self.throughput.fma_tflops))
    }

    fn vram(&mut self, pattern: VramPattern) -> Result<Checked, ComputeError> {
        let started = Instant::now();
        self.faults.on_call()?;
        let rate = self
            .margin
            .memory_wrong_rate(self.conditions.memory_clock_offset_mhz.unwrap_or(0));
        let scale = self.memory_scale();
        let tested_bytes = self.ready()?.vram_tested_bytes;
        let words = tested_bytes / 4;
        let corrupt = self.draws.poisson(rate * words as f64) + self.faults.take_wrong(Part::Vram);
        let wrong = sample::vram_sample(pattern, words, corrupt, &mut self.draws);
        // Written once, read back once.
        let bytes = tested_bytes * 2;
        let elapsed_s = Self::take_time(
            started,
            bytes as f64 / (self.throughput.vram_gb_per_s * 1e9 * scale),
        );
        Ok(Checked {
            results: words,
            wrong,
            flop: 0.0,
            bytes,
            elapsed_s,
        })
    }

    fn observe(&mut self, conditions: CardConditions) {
        self.conditions = conditions;
    }
}
