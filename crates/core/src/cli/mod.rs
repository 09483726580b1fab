//! Command-line subcommands, one file each; they parse and print. Changes go through the
//! tuning engine (`connect`), reads through the device layer.

pub mod apply;
mod choices;
pub mod connect;
pub mod daemon;
mod drive;
pub mod exporter;
pub mod fan;
pub mod history;
pub mod hold_temp;
pub mod jobs;
pub mod jobs_show;
pub mod links;
pub mod log;
pub mod plan;
pub mod profile;
pub mod run;
pub mod scan;
mod signals;
pub mod stability;
pub mod status;
pub mod sweep;
