//! Prints the simulator's calibration tables for docs/simulator.md:
//! `cargo run --example sim_calibration`.

use gputune_core::clock::ManualClock;
use gputune_core::device::Backend;
use gputune_core::device::gate::validate;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_formats::card::Setting;

/// Averages over one simulated minute after 30 minutes at the setting (power W, clock MHz, °C, fan %).
fn settle(load: LoadPattern, settings: &[Setting]) -> Result<(f64, f64, f64, f64), String> {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let options = SimOptions {
        scenario: SimScenario::Rtx4090,
        load,
    };
    let mut backend = SimBackend::with_clock(&options, Box::new(clock.clone()));
    let constraints = backend.constraints(0).map_err(|error| error.to_string())?;
    for setting in settings {
        let validated = validate(&constraints, *setting).map_err(|error| error.to_string())?;
        backend
            .apply(0, &validated)
            .map_err(|error| error.to_string())?;
    }
    clock.advance_ms(30 * 60 * 1000);
    let (mut power, mut gpu_clock, mut temperature, mut fan) = (0.0, 0.0, 0.0, 0.0);
    for _ in 0..60 {
        clock.advance_ms(1000);
        let reading = backend.telemetry(0).map_err(|error| error.to_string())?;
        power += f64::from(reading.power_draw_mw.unwrap_or(0)) / 1000.0 / 60.0;
        gpu_clock += f64::from(reading.gpu_clock_mhz.unwrap_or(0)) / 60.0;
        temperature += f64::from(reading.temperature_c.unwrap_or(0)) / 60.0;
        let fan_pct = reading
            .fans
            .and_then(|fans| fans.first().and_then(|fan| fan.speed_pct));
        fan += f64::from(fan_pct.unwrap_or(0)) / 60.0;
    }
    Ok((power, gpu_clock, temperature, fan))
}

fn main() -> Result<(), String> {
    let published = [
        (100u32, 2720.0),
        (90, 2710.0),
        (80, 2690.0),
        (70, 2600.0),
        (60, 2440.0),
    ];
    println!("Game load vs QuasarZone (RTX 4090 FE, 4K games, average core clock)\n");
    println!("| limit | published MHz | simulated MHz | error | simulated W | °C |");
    println!("|---|---|---|---|---|---|");
    for (limit_pct, published_mhz) in published {
        let limit = Setting::PowerLimit {
            power_limit_mw: 450_000 * limit_pct / 100,
        };
        let (power, mhz, temperature, _) = settle(LoadPattern::Game, &[limit])?;
        let error_pct = (mhz - published_mhz) / published_mhz * 100.0;
        println!(
            "| {limit_pct} % | {published_mhz:.0} | {mhz:.0} | {error_pct:+.1} % | {power:.0} | {temperature:.0} |"
        );
    }

    println!("\nSteady training load at power limits\n");
    println!("| limit | W | MHz | clock vs 100 % | °C | fan % |");
    println!("|---|---|---|---|---|---|");
    let mut full_clock = None;
    for limit_pct in [100u32, 90, 80, 70, 60, 50] {
        let limit = Setting::PowerLimit {
            power_limit_mw: 450_000 * limit_pct / 100,
        };
        let (power, mhz, temperature, fan) = settle(LoadPattern::Training, &[limit])?;
        let reference = *full_clock.get_or_insert(mhz);
        println!(
            "| {limit_pct} % | {power:.0} | {mhz:.0} | {:.1} % | {temperature:.0} | {fan:.0} |",
            mhz / reference * 100.0
        );
    }

    println!("\nUndervolt-style: GPU clock locked at 210-2400 MHz, 600 W limit, training\n");
    println!("| GPU offset | W | MHz |");
    println!("|---|---|---|");
    for offset_mhz in [0, 75, 150, 225] {
        let settings = [
            Setting::PowerLimit {
                power_limit_mw: 600_000,
            },
            Setting::LockGpuClocks {
                min_mhz: 210,
                max_mhz: 2_400,
            },
            Setting::GpuClockOffset { offset_mhz },
        ];
        let (power, mhz, _, _) = settle(LoadPattern::Training, &settings)?;
        println!("| +{offset_mhz} MHz | {power:.0} | {mhz:.0} |");
    }

    let (idle_power, idle_clock, idle_temperature, idle_fan) = settle(LoadPattern::Idle, &[])?;
    println!(
        "\nIdle: {idle_power:.1} W, {idle_clock:.0} MHz, {idle_temperature:.0} °C, fans {idle_fan:.0} %"
    );
    Ok(())
}
