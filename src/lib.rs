//! gputune: monitor, tune and plan NVIDIA GPUs for model training. This crate is the window
//! (`ui`) and the binary; everything else is `gputune-core` (crates/core), re-exported here
//! so that `gputune_core::device::…` and the window's `gputune_core::device::…` name the same items.
//! docs/architecture.md describes the rooms, the threads, the daemon's protocol and the
//! safety rules.

pub mod ui;
