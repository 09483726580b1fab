//! The process a simulated load runs, as NVML would list it: one per card (a training job with
//! a worker per GPU on a multi-GPU box, or a game), holding the VRAM the load uses above the
//! idle card's. An idle card lists none. docs/simulator.md, Processes.

use super::load::LoadPattern;
use super::physics::SimGpu;
use gputune_formats::card::{GpuProcess, ProcessKind};

/// The first simulated pid; GPU `i`'s process is this plus `i` (the workers a launcher such as
/// torchrun starts one after the other).
pub const SIM_FIRST_PID: u32 = 4242;
/// The simulated processes' owner.
pub const SIM_USER: &str = "alice";

/// What GPU `index` of a machine of `gpu_count` runs under its load.
pub(super) fn sim_processes(gpu: &SimGpu, index: u32, gpu_count: u32) -> Vec<GpuProcess> {
    let (kind, command) = match gpu.load {
        LoadPattern::Idle => return Vec::new(),
        LoadPattern::Game => (ProcessKind::Graphics, "./game.x86_64 -fullscreen"),
        LoadPattern::Training | LoadPattern::StopAndGo if gpu_count > 1 => (
            ProcessKind::Compute,
            "/usr/bin/python3 -u train.py --config configs/llama-3.1-8b-lora.yaml",
        ),
        LoadPattern::Training | LoadPattern::StopAndGo => (
            ProcessKind::Compute,
            "python train.py --config configs/llama-3.1-8b-lora.yaml",
        ),
    };
    let used_memory_bytes = gpu
        .reading
        .memory_used_bytes
        .saturating_sub(gpu.spec.memory_used_idle_bytes);
    vec![GpuProcess {
        pid: SIM_FIRST_PID.saturating_add(index),
        kind,
        used_memory_bytes: Some(used_memory_bytes),
        user: Some(SIM_USER.to_string()),
        command: Some(command.to_string()),
        exited: false,
        ancestor_pids: Vec::new(),
    }]
}
