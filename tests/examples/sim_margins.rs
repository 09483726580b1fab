//! Prints each simulated card's silicon margin, and what the simulated compute device reports
//! and costs, for docs/simulator.md: `cargo run --example sim_margins`.

use std::time::Instant;

use gputune_core::device::Backend;
use gputune_core::device::sim::{
    LoadPattern, SiliconMargin, SimBackend, SimMachine, SimOptions, SimScenario,
};
use gputune_core::stability::reference::fma_chain_reference;
use gputune_core::stability::simulated::SimulatedDevice;
use gputune_core::stability::{CardConditions, ComputeDevice, ComputeSetup, VramPattern};
use gputune_formats::reports::stability::Checked;

fn main() -> Result<(), String> {
    margins();
    println!();
    device_figures()
}

fn margins() {
    println!(
        "| scenario | GPU | UUID | stable offset at each clock, ≤ 60 °C | at the reference clock, 75 °C | Xid past the margin + | memory offset margin |"
    );
    println!("|---|---|---|---|---|---|---|");
    for scenario in [
        SimScenario::Rtx4090,
        SimScenario::EightRtx4090,
        SimScenario::DatacenterFanless,
    ] {
        let machine = SimMachine::new(scenario, LoadPattern::Idle, 0);
        for (index, gpu) in machine.gpus.iter().enumerate() {
            let margin = SiliconMargin::for_card(&gpu.spec, &gpu.uuid);
            let clocks: Vec<u32> = if gpu.spec.architecture == "Hopper" {
                vec![1200, 1410, 1755, 1980]
            } else {
                vec![1800, 2100, 2400, 2520, 2700]
            };
            let at: Vec<String> = clocks
                .iter()
                .map(|&clock| format!("{clock}: +{:.0}", margin.stable_offset_mhz(clock, 60.0)))
                .collect();
            let reference = margin.reference_clock_mhz;
            println!(
                "| `{}` | {index} | {}… | {} | {reference}: +{:.0} | +{:.0} MHz | +{:.0} MHz |",
                scenario_name(scenario),
                &gpu.uuid[..12],
                at.join(", "),
                margin.stable_offset_mhz(reference, 75.0),
                margin.hard_extra_mhz,
                margin.memory_offset_mhz,
            );
        }
    }
}

fn scenario_name(scenario: SimScenario) -> &'static str {
    match scenario {
        SimScenario::Rtx4090 => "rtx4090",
        SimScenario::EightRtx4090 => "8x-rtx4090",
        SimScenario::DatacenterFanless => "datacenter-fanless",
    }
}

/// This thread's CPU time so far, nanoseconds (the scheduler's own count).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Runs `batch` `count` times: the last result and the CPU milliseconds one took.
fn measure(
    count: u32,
    mut batch: impl FnMut() -> Result<Checked, String>,
) -> Result<(Checked, f64), String> {
    let cpu_before = thread_cpu_ns();
    let mut last = Checked::default();
    for _ in 0..count {
        last = batch()?;
    }
    let cpu_ms = (thread_cpu_ns() - cpu_before) as f64 / 1e6 / f64::from(count);
    Ok((last, cpu_ms))
}

fn device_figures() -> Result<(), String> {
    println!(
        "| card | GEMM TFLOP/s | FMA TFLOP/s | VRAM GiB/s | CPU per batch: GEMM / FMA / VRAM |"
    );
    println!("|---|---|---|---|---|");
    for scenario in [SimScenario::Rtx4090, SimScenario::DatacenterFanless] {
        let mut backend = SimBackend::new(&SimOptions {
            scenario,
            load: LoadPattern::Idle,
        });
        let identity = backend.identity(0).map_err(|error| error.to_string())?;
        let mut device = SimulatedDevice::for_gpu(&identity).ok_or("not a simulated card")?;
        let setup = ComputeSetup {
            vram_max_bytes: Some(1 << 30),
            ..ComputeSetup::standard()
        };
        let reference = fma_chain_reference(setup.fma_seeds, setup.fma_steps);
        device
            .prepare(&setup, &reference)
            .map_err(|error| error.to_string())?;
        let clock_mhz = device.margin().reference_clock_mhz;
        device.observe(CardConditions {
            graphics_clock_mhz: Some(clock_mhz),
            temperature_c: Some(60),
            ..CardConditions::default()
        });
        let started = Instant::now();
        let (gemm, gemm_cpu_ms) = measure(50, || device.gemm(1).map_err(|e| e.to_string()))?;
        let (fma, fma_cpu_ms) = measure(50, || device.fma().map_err(|e| e.to_string()))?;
        let (vram, vram_cpu_ms) = measure(20, || {
            device
                .vram(VramPattern::OwnAddress { seed: 7 })
                .map_err(|e| e.to_string())
        })?;
        println!(
            "| {} at {clock_mhz} MHz | {:.0} | {:.0} | {:.0} | {gemm_cpu_ms:.2} / {fma_cpu_ms:.2} / {vram_cpu_ms:.2} ms |",
            identity.name,
            gemm.flop / gemm.elapsed_s / 1e12,
            fma.flop / fma.elapsed_s / 1e12,
            vram.bytes as f64 / vram.elapsed_s / f64::from(1u32 << 30),
        );
        eprintln!(
            "({} took {:.1} s of wall time)",
            identity.name,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
