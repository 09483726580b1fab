//! The NVML functions gputune calls, and those nvtop and nvitop need besides, by topic, with NVML's exact names and C signatures.
//!
//! Every function is `unsafe extern "C"`, with NVML's safety contract: each pointer argument is
//! null or valid for what the function reads and writes through it. Handles are opaque values
//! from `nvmlDeviceGetHandleByIndex_v2` and are never dereferenced.

mod clocks;
mod events;
mod fans;
mod identity;
mod modes;
mod power;
mod processes;
mod sensors;
mod system;
mod throughput;
mod topology;
mod writes;
