//! The core crate's tests that need no fake library and set no environment variable, one
//! binary (each module is a former test file of the same name:
//! `cargo test -p gputune-core --test core formats`). Data in the repository's tests/data/.
//! `stability_cuda_driver` (runs itself as a child by test name) stays a binary of its own.

mod formats;
mod health;
mod history;
mod links;
mod profiles;
mod profiles_checked;
mod rank;
mod simulator;
mod stability_box;
mod stability_cuda;
mod stability_flow;
mod stability_kernels;
mod stability_run;
mod stability_sim;
