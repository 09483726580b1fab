//! The real NVML path in this process: the NVML backend through nvml-wrapper and a real
//! dlopen of the fake libnvidia-ml, the tuning engine on it, the write gate under random
//! requests, the window's link (no window), and nvitop on the same fake. One test binary
//! (`cargo test --test driver engine::` runs one module). Tests whose fake library runs in
//! this process take turns (`FakeMachine::new` holds the binary's environment lock).
//! The slow-driver link test is a binary of its own (tests/sampler_slow_driver.rs): the
//! thread it leaves behind would call the fake library under the next test's machine.

#[path = "../common/mod.rs"]
mod common;

mod engine;
mod nvitop;
mod nvml_backend;
mod pstates;
mod sampler;
mod system_folders;
mod topology;
mod tuning_properties;
