//! gputune: monitor, tune and plan NVIDIA GPUs for model training. This crate is the window
//! (`ui`) and the binary; everything else is `gputune-core` (crates/core), which the window
//! and the tests name by its own name (`gputune_core::device::…`): nothing of it is re-exported
//! here, so every import shows which crate it comes from.
//! docs/architecture.md describes the rooms, the threads, the daemon's protocol and the
//! safety rules.

pub mod ui;
