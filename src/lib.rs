//! gputune: monitor, tune and plan NVIDIA GPUs for model training. This crate is the window
//! (`ui`) and the binary; everything else is `gputune-core` (crates/core), re-exported here
//! so that `gputune::device::…` and the window's `crate::device::…` name the same items.
//! docs/architecture.md describes the rooms, the threads, the daemon's protocol and the
//! safety rules.

pub use gputune_core::*;

pub mod ui;
