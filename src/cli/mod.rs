//! Command-line subcommands, one file each.

pub mod log;
pub mod plan;
pub mod status;
