//! The command line as a user runs it: each module is one command (or one topic) against the
//! fake libnvidia-ml, mostly as real `gputune` processes. One test binary for all of them (one
//! link instead of nine); `cargo test --test cli cli_apply::` runs one module.

#[path = "../common/mod.rs"]
mod common;

mod checked_cards;
mod cli_apply;
mod cli_log;
mod cli_plan;
mod cli_profile;
mod cli_run;
mod cli_status;
mod crash;
mod job_tree;
mod links;
mod processes;
mod rank;
mod stability;
mod stability_box;
mod sweep;
mod sweep_box;
mod system_folders;
