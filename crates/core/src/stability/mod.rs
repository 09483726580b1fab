//! Is this setting stable? A checked compute load on the GPU (`gputune stability`, the Tune
//! tab's "Check stability") and a scanner that finds the largest stable clock offset
//! (`gputune scan`, "Find my undervolt"). docs/stability.md says what is checked and why.
//!
//! compute.rs    the ComputeDevice trait: the checked work a GPU does (GEMM, FMA chain, VRAM)
//! reference.rs  the exact results the CPU computes for it
//! cuda.rs       the real device: CUDA's driver API through cudarc, kernels embedded as PTX
//!   cuda/errors.rs  what its CUDA errors mean (fault, memory, setup); finding the card by UUID
//!   cuda/work.rs    its buffers and each batch's launches
//! kernels/      the kernels' CUDA C source and the PTX built from it (tools/kernels/build-ptx.sh)
//! simulated.rs  the simulated device: results that go wrong as the simulated card's margin says
//! rounds.rs     a check's options and its rounds (full load, pulses, FMA chains, VRAM)
//! worker.rs     a device on its own thread: every piece of work with a deadline
//! run.rs        one span of checked work: the rounds handed out, results counted, findings
//! busy.rs       whether a card is free for a check: another check or scan, other programs
//! check.rs      one card's check: its settings held by an engine session, put back at the end
//! put_back.rs   where a card found unstable at its own settings goes back to
//! report.rs     a check's report made from its run (the report, its sentences and --json are
//!               formats::reports::stability; what the card did meanwhile, stability_watched)
//! record.rs     that record read back: where it counts (the card checked) and how it reads
//! scan.rs       the undervolt scanner: offsets stepped at a clock lock, each checked, confirmed
//! together.rs   the box check: every card at once, in phase (one schedule, one clock), a
//!               clock cap found when a step fails (together/: schedule, steps, recommend, report)
//! device.rs     which device checks a card: simulated for simulated cards, CUDA for real ones

pub mod busy;
pub mod check;
pub mod compute;
pub mod cuda;
pub mod device;
pub mod held;
pub mod put_back;
pub mod record;
pub mod reference;
pub mod report;
pub mod rounds;
pub mod run;
pub mod scan;
pub mod simulated;
pub mod together;
pub mod worker;

pub use compute::{CardConditions, ComputeDevice, ComputeError, ComputeSetup, VramPattern};
