//! The simulated RTX 4090 behaves like one: power limits, clock offsets, thermals, fans.
//! Time comes from a manual clock, so hours of simulated time run in milliseconds.

use gputune_core::clock::ManualClock;
use gputune_core::device::Backend;
use gputune_core::device::gate::validate;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_formats::{
    card::{Setting, Telemetry},
    throttle::ThrottleReason,
};

const START_MS: u64 = 1_700_000_000_000;

fn sim(scenario: SimScenario, load: LoadPattern) -> (SimBackend, ManualClock) {
    let clock = ManualClock::starting_at(START_MS);
    let backend = SimBackend::with_clock(&SimOptions { scenario, load }, Box::new(clock.clone()));
    (backend, clock)
}

fn apply(backend: &mut SimBackend, setting: Setting) {
    let constraints = backend.constraints(0).unwrap_or_default();
    let validated = validate(&constraints, setting);
    assert!(validated.is_ok(), "{setting:?} refused: {validated:?}");
    if let Ok(validated) = validated {
        assert_eq!(backend.apply(0, &validated), Ok(()));
    }
}

fn read(backend: &mut SimBackend) -> Telemetry {
    backend.telemetry(0).unwrap_or_default()
}

/// Averages of power, clock and temperature over `duration_ms`, sampled every second.
fn average_over(
    backend: &mut SimBackend,
    clock: &ManualClock,
    duration_ms: u64,
) -> (f64, f64, f64) {
    let samples = duration_ms / 1000;
    let (mut power, mut gpu_clock, mut temperature) = (0.0, 0.0, 0.0);
    for _ in 0..samples {
        clock.advance_ms(1000);
        let reading = read(backend);
        power += f64::from(reading.power_draw_mw.unwrap_or(0)) / 1000.0;
        gpu_clock += f64::from(reading.gpu_clock_mhz.unwrap_or(0));
        temperature += f64::from(reading.temperature_c.unwrap_or(0));
    }
    let count = samples.max(1) as f64;
    (power / count, gpu_clock / count, temperature / count)
}

#[test]
fn lower_power_limit_lowers_power_and_clocks_and_shows_the_power_cap() {
    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Training);
    clock.advance_ms(20 * 60 * 1000);
    let (power_full, clock_full, temp_full) = average_over(&mut backend, &clock, 60_000);
    let at_full = read(&mut backend);
    assert!(
        at_full
            .throttle_reasons
            .is_some_and(|reasons| reasons.contains(ThrottleReason::SwPowerCap)),
        "a training load sits at the 450 W limit: {at_full:?}"
    );
    assert!(
        (430.0..=452.0).contains(&power_full),
        "power at 100 %: {power_full} W"
    );

    apply(
        &mut backend,
        Setting::PowerLimit {
            power_limit_mw: 315_000,
        },
    );
    clock.advance_ms(20 * 60 * 1000);
    let (power_70, clock_70, temp_70) = average_over(&mut backend, &clock, 60_000);
    let at_70 = read(&mut backend);
    assert_eq!(at_70.power_limit_mw, Some(315_000));
    assert!(
        at_70
            .throttle_reasons
            .is_some_and(|reasons| reasons.contains(ThrottleReason::SwPowerCap))
    );
    assert!(
        power_70 <= 316.0 && power_70 < power_full - 100.0,
        "{power_70} W vs {power_full} W"
    );
    assert!(clock_70 < clock_full, "{clock_70} MHz vs {clock_full} MHz");
    // A small clock loss for a 30 % power cut: the top of the V/F curve is expensive.
    assert!(
        clock_70 > clock_full * 0.80,
        "{clock_70} MHz vs {clock_full} MHz"
    );
    assert!(temp_70 < temp_full - 3.0, "{temp_70} °C vs {temp_full} °C");
}

#[test]
fn positive_clock_offset_at_a_locked_clock_lowers_power() {
    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Training);
    apply(
        &mut backend,
        Setting::PowerLimit {
            power_limit_mw: 600_000,
        },
    );
    apply(
        &mut backend,
        Setting::LockGpuClocks {
            min_mhz: 210,
            max_mhz: 2_400,
        },
    );
    clock.advance_ms(15 * 60 * 1000);
    let (power_stock, clock_stock, _) = average_over(&mut backend, &clock, 30_000);
    let locked = read(&mut backend);
    assert!(
        locked
            .throttle_reasons
            .is_some_and(|reasons| reasons.contains(ThrottleReason::ApplicationsClocksSetting)),
        "the clock lock is what holds the clock: {locked:?}"
    );

    apply(&mut backend, Setting::GpuClockOffset { offset_mhz: 150 });
    clock.advance_ms(15 * 60 * 1000);
    let (power_offset, clock_offset, _) = average_over(&mut backend, &clock, 30_000);
    assert_eq!(clock_stock, clock_offset, "same locked clock");
    assert!(clock_stock <= 2_400.0);
    assert!(
        power_offset < power_stock - 20.0,
        "undervolt-style offset saves power: {power_offset} W vs {power_stock} W"
    );
}

#[test]
fn temperature_settles_and_fans_follow_it() {
    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Idle);
    clock.advance_ms(30 * 60 * 1000);
    let idle = read(&mut backend);
    let idle_temperature = idle.temperature_c.unwrap_or(0);
    assert!(
        (30..=50).contains(&idle_temperature),
        "idle at {idle_temperature} °C"
    );
    assert_eq!(idle.performance_state, Some(8));
    assert_eq!(idle.pcie_link_gen, Some(1), "the link trains down at idle");

    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Training);
    clock.advance_ms(60 * 60 * 1000);
    let first = read(&mut backend);
    clock.advance_ms(10 * 60 * 1000);
    let second = read(&mut backend);
    let (t1, t2) = (
        first.temperature_c.unwrap_or(0),
        second.temperature_c.unwrap_or(0),
    );
    assert!(t1.abs_diff(t2) <= 1, "settled: {t1} °C then {t2} °C");
    assert!(
        (60..=83).contains(&t2),
        "training settles below the thermal target: {t2} °C"
    );
    let fan_pct = second
        .fans
        .as_ref()
        .and_then(|fans| fans.first())
        .and_then(|fan| fan.speed_pct);
    assert!(
        fan_pct.is_some_and(|pct| (40..=90).contains(&pct)),
        "fans respond: {fan_pct:?}"
    );
    assert!(
        idle.fans
            .as_ref()
            .and_then(|fans| fans.first())
            .and_then(|fan| fan.speed_pct)
            < fan_pct
    );

    // Fans at full speed cool the card further.
    apply(
        &mut backend,
        Setting::FanSpeed {
            fan_index: 0,
            speed_pct: 100,
        },
    );
    apply(
        &mut backend,
        Setting::FanSpeed {
            fan_index: 1,
            speed_pct: 100,
        },
    );
    clock.advance_ms(20 * 60 * 1000);
    let cooled = read(&mut backend);
    assert!(cooled.temperature_c.unwrap_or(99) + 4 <= t2, "{cooled:?}");
    assert_eq!(
        cooled.fans.as_ref().map(|fans| fans[0].speed_pct),
        Some(Some(100))
    );
}

#[test]
fn fans_stopped_card_overheats_into_thermal_slowdown() {
    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Training);
    apply(
        &mut backend,
        Setting::FanSpeed {
            fan_index: 0,
            speed_pct: 30,
        },
    );
    apply(
        &mut backend,
        Setting::FanSpeed {
            fan_index: 1,
            speed_pct: 30,
        },
    );
    apply(
        &mut backend,
        Setting::PowerLimit {
            power_limit_mw: 600_000,
        },
    );
    clock.advance_ms(60 * 60 * 1000);
    let hot = read(&mut backend);
    assert!(
        hot.throttle_reasons
            .is_some_and(|reasons| reasons.contains(ThrottleReason::SwThermalSlowdown)),
        "{hot:?}"
    );
}

#[test]
fn fanless_datacenter_card_reports_no_fans_and_refuses_fan_settings() {
    let (mut backend, _clock) = sim(SimScenario::DatacenterFanless, LoadPattern::Training);
    let reading = read(&mut backend);
    assert_eq!(reading.fans, None);
    let constraints = backend.constraints(0).unwrap_or_default();
    assert_eq!(constraints.fan_count, 0);
    assert!(!constraints.clock_offsets_supported());
    assert!(
        validate(
            &constraints,
            Setting::FanSpeed {
                fan_index: 0,
                speed_pct: 50
            }
        )
        .is_err()
    );
    assert_eq!(
        backend.identity(0).map(|id| id.name).ok().as_deref(),
        Some("NVIDIA H100 80GB HBM3")
    );
}

#[test]
fn stop_and_go_load_drops_utilization_to_zero_regularly() {
    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::StopAndGo);
    let mut utilization = Vec::new();
    for _ in 0..80 {
        clock.advance_ms(250);
        utilization.push(read(&mut backend).utilization_gpu_pct.unwrap_or(0));
    }
    let zero = utilization.iter().filter(|&&pct| pct == 0).count();
    let busy = utilization.iter().filter(|&&pct| pct >= 95).count();
    assert!(
        (25..=35).contains(&zero),
        "idle about 1.5 s of every 4 s: {utilization:?}"
    );
    assert!(busy >= 45, "{utilization:?}");
}

#[test]
fn eight_gpu_box_has_eight_distinct_cards_and_hotter_middle_slots() {
    let (mut backend, _clock) = sim(SimScenario::EightRtx4090, LoadPattern::Idle);
    assert_eq!(backend.gpu_count(), Ok(8));
    let mut uuids: Vec<String> = (0..8)
        .filter_map(|index| backend.identity(index).ok())
        .map(|id| id.uuid)
        .collect();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 8);
    let edge = backend
        .telemetry(0)
        .ok()
        .and_then(|t| t.temperature_c)
        .unwrap_or(0);
    let middle = backend
        .telemetry(3)
        .ok()
        .and_then(|t| t.temperature_c)
        .unwrap_or(0);
    assert!(middle > edge, "middle slot {middle} °C vs edge {edge} °C");
}

/// The calibration in docs/simulator.md: a game-like load reproduces QuasarZone's average core
/// clocks of an RTX 4090 FE at reduced power limits within 2 %.
#[test]
fn game_load_matches_published_power_limit_clocks() {
    let published = [
        (100u32, 2720.0),
        (90, 2710.0),
        (80, 2690.0),
        (70, 2600.0),
        (60, 2440.0),
    ];
    for (limit_pct, published_mhz) in published {
        let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Game);
        apply(
            &mut backend,
            Setting::PowerLimit {
                power_limit_mw: 450_000 * limit_pct / 100,
            },
        );
        clock.advance_ms(30 * 60 * 1000);
        let (_, average_mhz, _) = average_over(&mut backend, &clock, 60_000);
        let error = (average_mhz - published_mhz).abs() / published_mhz;
        assert!(
            error <= 0.02,
            "{limit_pct} %: {average_mhz:.0} MHz vs published {published_mhz} MHz"
        );
    }
}

#[test]
fn under_training_the_p2_offset_is_the_one_that_counts() {
    let (mut backend, clock) = sim(SimScenario::Rtx4090, LoadPattern::Training);
    apply(
        &mut backend,
        Setting::PowerLimit {
            power_limit_mw: 600_000,
        },
    );
    apply(
        &mut backend,
        Setting::LockGpuClocks {
            min_mhz: 210,
            max_mhz: 2_400,
        },
    );
    clock.advance_ms(15 * 60 * 1000);
    assert_eq!(
        read(&mut backend).performance_state,
        Some(2),
        "CUDA runs in P2"
    );
    let (power_stock, _, _) = average_over(&mut backend, &clock, 30_000);

    // P0's offset alone leaves a card computing in P2 where it was.
    apply(
        &mut backend,
        Setting::GpuClockOffsetAt {
            pstate: 0,
            offset_mhz: 150,
        },
    );
    clock.advance_ms(15 * 60 * 1000);
    let (power_p0, _, _) = average_over(&mut backend, &clock, 30_000);
    assert!(
        (power_p0 - power_stock).abs() < 5.0,
        "P0's offset changes nothing under training: {power_p0} W vs {power_stock} W"
    );

    apply(
        &mut backend,
        Setting::GpuClockOffsetAt {
            pstate: 2,
            offset_mhz: 150,
        },
    );
    clock.advance_ms(15 * 60 * 1000);
    let (power_p2, _, _) = average_over(&mut backend, &clock, 30_000);
    assert!(
        power_p2 < power_stock - 20.0,
        "P2's offset undervolts: {power_p2} W vs {power_stock} W"
    );

    // Stability follows P2's offset too: far past the silicon's limit in P0 alone, no Xid.
    apply(&mut backend, Setting::ResetGpuClocks);
    apply(
        &mut backend,
        Setting::GpuClockOffsetAt {
            pstate: 2,
            offset_mhz: 0,
        },
    );
    apply(
        &mut backend,
        Setting::GpuClockOffsetAt {
            pstate: 0,
            offset_mhz: 600,
        },
    );
    let xids = |backend: &SimBackend| backend.machine().gpus[0].xid_count;
    let before = xids(&backend);
    clock.advance_ms(60_000);
    read(&mut backend);
    assert_eq!(
        xids(&backend),
        before,
        "P0's +600 MHz is not where it computes"
    );
    apply(
        &mut backend,
        Setting::GpuClockOffsetAt {
            pstate: 2,
            offset_mhz: 600,
        },
    );
    clock.advance_ms(60_000);
    read(&mut backend);
    assert!(xids(&backend) > before, "P2's +600 MHz crashes it");
}
