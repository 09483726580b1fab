//! Command-line subcommands, one file each.

pub mod status;
