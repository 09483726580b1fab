//! Prints each simulated card's silicon margin for docs/simulator.md:
//! `cargo run --example sim_margins`.

use gputune::device::sim::{LoadPattern, SiliconMargin, SimMachine, SimScenario};

fn main() {
    println!(
        "| scenario | GPU | UUID | margin at 1800 / 2100 / 2400 / 2520 / 2700 MHz (≤ 60 °C) | at 2520 MHz, 75 °C | Xid past margin + | memory offset margin |"
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
                .map(|&clock| format!("+{:.0}", margin.stable_offset_mhz(clock, 60.0)))
                .collect();
            let reference = margin.reference_clock_mhz;
            println!(
                "| `{}` | {index} | {}… | {} | +{:.0} | +{:.0} MHz | +{:.0} MHz |",
                scenario_name(scenario),
                &gpu.uuid[..12],
                at.join(" / "),
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
