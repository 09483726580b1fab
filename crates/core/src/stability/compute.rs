//! What a stability check asks of a GPU: the [`ComputeDevice`] trait that the real CUDA device
//! (`cuda.rs`) and the simulated one (`simulated.rs`) both implement, so that one check (and
//! one scanner) runs on either.
//!
//! Every method blocks until its work is done. A kernel that never returns blocks for ever: the
//! check calls a device only from its own worker thread and gives up on it past a deadline.

use std::fmt;

use gputune_formats::reports::stability::{Checked, Prepared};

/// How big each part of the checked work is. The same setup gives the same work, and so the
/// same results, on every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeSetup {
    /// The GEMM is `gemm_n × gemm_n × gemm_n`, bf16 in and fp32 accumulated; a multiple of 128.
    pub gemm_n: u32,
    /// How many threads run the FMA chain at once.
    pub fma_threads: u32,
    /// Steps of each thread's chain.
    pub fma_steps: u32,
    /// How many different starting values the threads use (thread `t` starts from seed
    /// `t % fma_seeds`); the CPU computes one exact result per seed.
    pub fma_seeds: u32,
    /// VRAM left free for other processes when the memory test takes the rest.
    pub vram_headroom_bytes: u64,
    /// At most this much VRAM is tested (`None`: all that is free, less the headroom).
    pub vram_max_bytes: Option<u64>,
}

impl ComputeSetup {
    /// The check's usual work: a 4096³ GEMM (137 GFLOP a pass), 1 M FMA threads of 4096 steps,
    /// and the free VRAM less 1 GiB.
    pub fn standard() -> ComputeSetup {
        ComputeSetup {
            gemm_n: 4096,
            fma_threads: 1 << 20,
            fma_steps: 4096,
            fma_seeds: 4096,
            vram_headroom_bytes: 1 << 30,
            vram_max_bytes: None,
        }
    }

    /// Floating-point operations in one GEMM pass (a multiply and an add per term).
    pub fn gemm_flop(&self) -> f64 {
        2.0 * f64::from(self.gemm_n).powi(3)
    }

    /// Elements of one GEMM result, each compared with the first pass's.
    pub fn gemm_results(&self) -> u64 {
        u64::from(self.gemm_n) * u64::from(self.gemm_n)
    }

    /// Floating-point operations in one FMA-chain pass (each step: one FMA and one multiply).
    pub fn fma_flop(&self) -> f64 {
        3.0 * f64::from(self.fma_threads) * f64::from(self.fma_steps)
    }
}

/// What the card is doing, from the service's readings; only the simulated device uses it (its
/// results go wrong as the simulated card's state says).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CardConditions {
    pub graphics_clock_mhz: Option<u32>,
    pub gpu_clock_offset_mhz: Option<i32>,
    /// The clock lock's top, when one is in force.
    pub locked_max_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    /// The memory clock offset in force (NVML's units); the simulated VRAM errs past its margin.
    pub memory_clock_offset_mhz: Option<i32>,
}

/// Why a device could not do its work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComputeError {
    /// No driver, no CUDA, no such device, a kernel the driver would not load: nothing was
    /// checked, and it says what to do. Not a verdict on the card.
    Unavailable(String),
    /// Not enough free VRAM for the work.
    OutOfMemory(String),
    /// The work failed on the card (a launch failure, an illegal address, an ECC error): a
    /// sign of instability.
    Fault(String),
}

impl fmt::Display for ComputeError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComputeError::Unavailable(message)
            | ComputeError::OutOfMemory(message)
            | ComputeError::Fault(message) => formatter.write_str(message),
        }
    }
}

impl std::error::Error for ComputeError {}

/// The memory test's patterns, each word a function of its index so a read-back can be
/// checked without a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VramPattern {
    Zeros,
    Ones,
    /// 0xAAAAAAAA
    AltAa,
    /// 0x55555555
    Alt55,
    /// One bit set, moving with the word index and `shift` (each pass a new shift).
    WalkingOnes {
        shift: u32,
    },
    /// Every bit but one set, moving likewise.
    WalkingZeros {
        shift: u32,
    },
    /// Each word holds its own index (the low 32 bits of it), mixed with `seed`.
    OwnAddress {
        seed: u32,
    },
}

impl VramPattern {
    /// The value of word `index` (32-bit words from the start of the tested region). The
    /// kernel `vram_fill`/`vram_check` computes the same formula.
    pub fn word(self, index: u64) -> u32 {
        match self {
            VramPattern::Zeros => 0,
            VramPattern::Ones => u32::MAX,
            VramPattern::AltAa => 0xAAAA_AAAA,
            VramPattern::Alt55 => 0x5555_5555,
            VramPattern::WalkingOnes { shift } => 1u32 << ((index as u32).wrapping_add(shift) % 32),
            VramPattern::WalkingZeros { shift } => {
                !(1u32 << ((index as u32).wrapping_add(shift) % 32))
            }
            VramPattern::OwnAddress { seed } => (index as u32) ^ seed,
        }
    }

    /// The code the kernels take for this pattern: (kind, parameter).
    pub fn code(self) -> (u32, u32) {
        match self {
            VramPattern::Zeros => (0, 0),
            VramPattern::Ones => (1, 0),
            VramPattern::AltAa => (2, 0),
            VramPattern::Alt55 => (3, 0),
            VramPattern::WalkingOnes { shift } => (4, shift),
            VramPattern::WalkingZeros { shift } => (5, shift),
            VramPattern::OwnAddress { seed } => (6, seed),
        }
    }

    /// The patterns of pass `pass`: the fixed ones, then the moving ones with a new shift.
    pub fn for_pass(pass: u32) -> [VramPattern; 7] {
        [
            VramPattern::Zeros,
            VramPattern::Ones,
            VramPattern::AltAa,
            VramPattern::Alt55,
            VramPattern::WalkingOnes { shift: pass },
            VramPattern::WalkingZeros { shift: pass },
            VramPattern::OwnAddress {
                seed: pass.wrapping_mul(0x9E37_79B9),
            },
        ]
    }
}

/// A GPU that runs the checked work. See the module's documentation.
pub trait ComputeDevice: Send {
    /// Allocates and fills the buffers, runs the first (reference) GEMM pass, and uploads the
    /// CPU's exact FMA-chain checksums (`fma_reference`, one per seed).
    fn prepare(
        &mut self,
        setup: &ComputeSetup,
        fma_reference: &[u32],
    ) -> Result<Prepared, ComputeError>;

    /// Runs the GEMM `passes` times, each result compared element by element with the first
    /// pass's (bit for bit).
    fn gemm(&mut self, passes: u32) -> Result<Checked, ComputeError>;

    /// Runs the FMA chain once on every thread, each checksum compared with the CPU's.
    fn fma(&mut self) -> Result<Checked, ComputeError>;

    /// Writes `pattern` over the tested VRAM and reads it back.
    fn vram(&mut self, pattern: VramPattern) -> Result<Checked, ComputeError>;

    /// What the card is doing now (the simulated device's results depend on it).
    fn observe(&mut self, _conditions: CardConditions) {}
}
