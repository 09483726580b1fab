//! Command-line subcommands, one file each.

pub mod apply;
pub mod log;
pub mod plan;
pub mod status;
