//! Is this setting stable? A checked compute load on the GPU (`gputune stability`, the Tune
//! tab's "Check stability") and a scanner that finds the largest stable clock offset
//! (`gputune scan`, "Find my undervolt"). docs/stability.md says what is checked and why.
//!
//! compute.rs    the ComputeDevice trait: the checked work a GPU does (GEMM, FMA chain, VRAM)
//! reference.rs  the exact results the CPU computes for it
//! cuda.rs       the real device: CUDA's driver API through cudarc, kernels embedded as PTX
//! simulated.rs  the simulated device: results that go wrong as the simulated card's margin says

pub mod compute;
pub mod reference;
pub mod simulated;

pub use compute::{
    CardConditions, Checked, ComputeDevice, ComputeError, ComputeSetup, Prepared, VramPattern,
};
