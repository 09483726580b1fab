//! Readings over time: the device-owner thread that samples the GPUs.

pub mod csv;
pub mod decimate;
pub mod health;
pub mod history;
pub mod sampler;
