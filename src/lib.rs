//! gputune: monitor, tune and plan NVIDIA GPUs for model training. See DESIGN.md in shared/ and
//! the README for the architecture.

pub mod cli;
pub mod device;
pub mod fsafe;
pub mod plan;
pub mod profiles;
pub mod telemetry;
pub mod text;
pub mod tuning;
pub mod ui;
pub mod units;
