//! The daemon and what it serves, as real processes on the fake libnvidia-ml and temporary
//! sockets: clients that misbehave, journals, kept fan curves, group trials, exact put-backs,
//! the installer and the Debian package, the Prometheus exporter, Xid and ECC events. One test
//! binary (`cargo test --test service fan_curves::` runs one module).

#[path = "../common/mod.rs"]
mod common;

mod boot_profile;
mod daemon_bounds;
mod daemon_clients;
mod daemon_journals;
mod fan_curves;
mod group_trial;
mod install;
mod job_records;
mod kubernetes;
mod metrics_exporter;
mod metrics_prometheus;
mod package_deb;
mod restore_exactness;
mod sim_xid_ecc;
mod slurm;
mod system_folders;
mod temperature_hold;
