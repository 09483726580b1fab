//! gputune without its window: the hardware, the tuning engine and its daemon, the planner,
//! the stability check and the command line. No egui here (the crate does not depend on it).
//! The types that cross the socket or land on disk are the crate `gputune_formats`, imported
//! by its name (nothing here re-exports them). docs/architecture.md describes the rooms, the
//! threads, the daemon's protocol and the safety rules.

pub mod cli;
pub mod clock;
pub mod daemon;
pub mod device;
pub mod folders;
pub mod fsafe;
pub mod job;
pub mod job_energy;
pub mod join;
pub mod link;
pub mod measure_job;
pub mod metrics;
pub mod pcie;
pub mod plan;
pub mod profiles;
pub mod service;
pub mod stability;
pub mod sweep;
pub mod telemetry;
pub mod text;
pub mod tuning;
