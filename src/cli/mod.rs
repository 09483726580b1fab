//! Command-line subcommands, one file each.

pub mod apply;
pub mod boot_service;
pub mod log;
pub mod plan;
pub mod profile;
pub mod run;
pub mod status;
