//! Readings over time: the device-owner thread that samples the GPUs.

pub mod sampler;
