//! The temperature hold the daemon keeps (`tuning::engine::temperature_hold`), on the
//! simulator and a manual clock (an hour of simulated time in milliseconds): it brings a hot
//! card under its target within a set time and stays there without hunting, never writes
//! outside the card's range or the user's bounds, yields to a session that holds the power
//! limit and goes on after it, puts the limit back when cleared (or hands it to the session
//! holding it), outlives its client, refuses absurd holds with a message, and holds the hot slot
//! of the 8-GPU box. A driver that refuses, a killed daemon: `temperature_hold_faults.rs`.

use super::*;
use gputune_formats::card::Telemetry;
use gputune_formats::temperature_hold::{TemperatureHold, TemperatureHoldState};

/// The simulated 4090 trains at 70 °C and 450 W: a hold at 64 °C needs about 310 W.
pub(super) const HOLD_64: TemperatureHold = TemperatureHold {
    max_temperature_c: 64,
    min_power_limit_mw: 270_000,
    max_power_limit_mw: 450_000,
};

/// How long the hold may take to bring the card under its target for good.
const SETTLE_S: u64 = 600;

pub(super) fn state(engine: &Engine) -> TemperatureHoldState {
    engine
        .tuning(0)
        .and_then(|tuning| tuning.temperature_hold)
        .map(|status| status.state)
        .unwrap_or_else(|| panic!("GPU 0 has a hold"))
}

pub(super) fn keep(engine: &mut Engine, hold: TemperatureHold) {
    let uuid = engine.gpus()[0].identity.uuid.clone();
    engine
        .keep_temperature_hold(&client(1, "gputune hold-temp set"), &uuid, Some(hold))
        .unwrap_or_else(|error| panic!("{error}"));
}

fn limit_mw(sampler: &mut SimBackend) -> u32 {
    sampler
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"))
        .power_limit_mw
        .unwrap_or_else(|| panic!("the simulator says its limit"))
}

/// Runs `seconds` of simulated time; each second's temperature and power limit.
fn trace(
    engine: &mut Engine,
    sampler: &mut SimBackend,
    clock: &ManualClock,
    seconds: u64,
) -> Vec<(u32, u32)> {
    (0..seconds)
        .map(|_| {
            run_for(engine, sampler, clock, 1);
            let reading = sampler
                .telemetry(0)
                .unwrap_or_else(|error| panic!("{error}"));
            (reading.temperature_c.unwrap_or(0), limit_mw(sampler))
        })
        .collect()
}

#[test]
fn the_hold_brings_a_hot_card_under_its_target_in_time_and_never_leaves_its_bounds() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    assert!(limit_mw(&mut sampler) == 450_000);
    keep(&mut engine, HOLD_64);
    let seconds = trace(&mut engine, &mut sampler, &clock, 1_800);
    for (temperature_c, limit_mw) in &seconds {
        assert!(
            (HOLD_64.min_power_limit_mw..=HOLD_64.max_power_limit_mw).contains(limit_mw),
            "{limit_mw} mW at {temperature_c} °C"
        );
    }
    let last_over = seconds
        .iter()
        .rposition(|(temperature_c, _)| *temperature_c > HOLD_64.max_temperature_c)
        .map_or(0, |second| second as u64 + 1);
    assert!(
        last_over <= SETTLE_S,
        "over 64 °C until {last_over} s: {:?}",
        &seconds[..last_over as usize]
    );
    // Settled, it does not hunt: the limit moves no more than a few times in 20 minutes.
    let settled = &seconds[600..];
    let moves = settled
        .windows(2)
        .filter(|pair| pair[0].1 != pair[1].1)
        .count();
    assert!(moves <= 3, "{moves} moves once settled");
    assert!(matches!(
        state(&engine),
        TemperatureHoldState::Holding { .. }
    ));
    let note = engine
        .tuning(0)
        .and_then(|tuning| tuning.last_change)
        .unwrap_or_else(|| panic!("the hold's changes are noted"));
    assert_eq!(note.by, "temperature hold");
    assert!(
        note.what.starts_with("temperature hold: ") && note.what.contains(" W to "),
        "{}",
        note.what
    );

    // A target the bounds cannot reach: at the floor, said once, never below it.
    keep(
        &mut engine,
        TemperatureHold {
            max_temperature_c: 50,
            ..HOLD_64
        },
    );
    let _ = engine.take_events();
    let seconds = trace(&mut engine, &mut sampler, &clock, 900);
    assert!(seconds.iter().all(|(_, limit_mw)| *limit_mw >= 270_000));
    assert_eq!(seconds.last().map(|(_, limit_mw)| *limit_mw), Some(270_000));
    assert!(matches!(
        state(&engine),
        TemperatureHoldState::AtFloor {
            power_limit_mw: 270_000,
            ..
        }
    ));
    let warnings = notices(&mut engine)
        .into_iter()
        .filter(|notice| notice.text().contains("at the hold's lowest power limit"))
        .count();
    assert_eq!(warnings, 1);
}

#[test]
fn the_hold_yields_to_a_session_on_the_power_limit_and_goes_on_after_it() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    keep(&mut engine, HOLD_64);
    trace(&mut engine, &mut sampler, &clock, 600);
    let held_mw = limit_mw(&mut sampler);
    assert!(held_mw < 400_000, "{held_mw}");

    // A plain apply of the power limit is refused, naming the hold.
    let bob = client(2, "gputune apply");
    let change = GpuChange {
        gpu_uuid: uuid.clone(),
        settings: vec![Setting::PowerLimit {
            power_limit_mw: 400_000,
        }],
    };
    let refused = engine
        .apply_changes(&bob, std::slice::from_ref(&change))
        .unwrap_err();
    assert!(
        refused.message.contains("gputune hold-temp clear --gpu 0"),
        "{refused}"
    );

    // A sweep takes the limit: the hold pauses and writes nothing while it holds it.
    let sweep = client(3, "gputune sweep");
    let started = engine
        .start_session(
            &sweep,
            &SessionRequest {
                purpose: SessionPurpose::Sweep,
                changes: vec![change],
                fan_curves: Vec::new(),
                job_pid: None,
                job: None,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let seconds = trace(&mut engine, &mut sampler, &clock, 300);
    assert!(seconds.iter().all(|(_, limit_mw)| *limit_mw == 400_000));
    match state(&engine) {
        TemperatureHoldState::Paused { by } => assert!(by.contains("a sweep of"), "{by}"),
        other => panic!("{other:?}"),
    }
    assert!(
        notices(&mut engine)
            .iter()
            .any(|notice| notice.text().contains("temperature hold is paused"))
    );

    // The sweep ends: its limit goes back (the hold's), and the hold goes on from there.
    engine
        .end_session(&sweep, started.session, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(limit_mw(&mut sampler), held_mw);
    let seconds = trace(&mut engine, &mut sampler, &clock, 600);
    assert!(matches!(
        state(&engine),
        TemperatureHoldState::Holding { .. }
    ));
    assert!(
        seconds[300..]
            .iter()
            .all(|(temperature_c, _)| *temperature_c <= 64)
    );
}

#[test]
fn cleared_the_limit_goes_back_now_or_when_the_session_holding_it_ends() {
    let (mut engine, mut sampler, clock, folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let journal = folder
        .path()
        .join("state")
        .join(format!("journal-{uuid}.json"));
    let alice = client(1, "gputune hold-temp set");
    keep(&mut engine, HOLD_64);
    // The hold outlives the client that set it.
    engine.client_gone(alice.id);
    trace(&mut engine, &mut sampler, &clock, 300);
    assert!(limit_mw(&mut sampler) < 450_000);
    assert!(journal.exists(), "the limit before the hold is journaled");
    engine
        .keep_temperature_hold(&alice, &uuid, None)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(limit_mw(&mut sampler), 450_000);
    assert!(!journal.exists());
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.temperature_hold.is_none())
    );
    let again = engine
        .keep_temperature_hold(&alice, &uuid, None)
        .unwrap_err();
    assert!(
        again.message.contains("keeps no temperature hold on GPU 0"),
        "{again}"
    );

    // Cleared while a trial holds the limit: the trial puts back what was there before both.
    keep(&mut engine, HOLD_64);
    trace(&mut engine, &mut sampler, &clock, 300);
    let window = client(4, "the gputune window");
    engine
        .start_trial(
            &window,
            &TrialRequest {
                gpu_uuid: uuid.clone(),
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 350_000,
                }],
                duration_s: 600,
                baseline_s: 0,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    run_for(&mut engine, &mut sampler, &clock, 2);
    engine
        .keep_temperature_hold(&alice, &uuid, None)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(limit_mw(&mut sampler), 350_000, "the trial's, meanwhile");
    engine
        .finish_trial(&window, &uuid, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(limit_mw(&mut sampler), 450_000);
    assert!(!journal.exists());
}

#[test]
fn absurd_holds_are_refused_with_a_message_and_change_nothing() {
    let (mut engine, mut sampler, _clock, folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let alice = client(1, "gputune hold-temp set");
    let refused = |engine: &mut Engine, hold: TemperatureHold| {
        engine
            .keep_temperature_hold(&alice, &uuid, Some(hold))
            .unwrap_err()
            .message
    };
    let hot = refused(
        &mut engine,
        TemperatureHold {
            max_temperature_c: 500,
            ..HOLD_64
        },
    );
    assert!(hot.contains("outside 40-"), "{hot}");
    let wide = refused(
        &mut engine,
        TemperatureHold {
            min_power_limit_mw: 10_000,
            ..HOLD_64
        },
    );
    assert!(wide.contains("outside the card's range"), "{wide}");
    let inverted = refused(
        &mut engine,
        TemperatureHold {
            min_power_limit_mw: 450_000,
            max_power_limit_mw: 270_000,
            ..HOLD_64
        },
    );
    assert!(inverted.contains("lower bound first"), "{inverted}");
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.temperature_hold.is_none())
    );
    assert_eq!(limit_mw(&mut sampler), 450_000);

    // Without the daemon there is nobody to keep it.
    let (mut in_process, _) = Engine::open(
        Box::new(sampler.share()),
        &EngineOptions {
            ownership: Ownership::InProcess,
            state_dir: folder.path().join("other"),
            ..options(&folder)
        },
        wall(),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let refused = in_process
        .keep_temperature_hold(&alice, &uuid, Some(HOLD_64))
        .unwrap_err();
    assert!(
        refused.message.contains("needs the gputune daemon"),
        "{refused}"
    );
}

/// The 8-GPU box on a manual clock, and the sampler's handle on it.
fn simulated_box() -> (Engine, SimBackend, ManualClock, tempfile::TempDir) {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let backend = SimBackend::with_clock(
        &SimOptions {
            scenario: SimScenario::EightRtx4090,
            load: LoadPattern::Training,
        },
        Box::new(clock.clone()),
    );
    let sampler = backend.share();
    let folder = tempfile::tempdir().expect("a state folder");
    let (engine, _) = Engine::open(
        Box::new(backend),
        &options(&folder),
        Arc::new(clock.clone()),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    (engine, sampler, clock, folder)
}

/// One second of the box: every card's reading to the engine; the hot slot's reading.
fn box_second(engine: &mut Engine, sampler: &mut SimBackend, clock: &ManualClock) -> Telemetry {
    clock.advance_ms(1_000);
    let readings: Vec<_> = (0..8).map(|index| sampler.telemetry(index)).collect();
    engine.on_samples(&readings);
    engine.tick();
    readings[HOT_SLOT]
        .clone()
        .unwrap_or_else(|error| panic!("{error}"))
}

/// The 8-GPU box's hot slot (`device::sim::machine::HOT_SLOT_GPU`).
const HOT_SLOT: usize = 3;

/// Mean SM clock (MHz), power (W) and temperature (°C) of `readings`.
fn means(readings: &[Telemetry]) -> (f64, f64, f64) {
    let mean = |value: fn(&Telemetry) -> Option<u32>| {
        readings
            .iter()
            .filter_map(value)
            .map(f64::from)
            .sum::<f64>()
            / readings.len() as f64
    };
    (
        mean(|reading| reading.sm_clock_mhz),
        mean(|reading| reading.power_draw_mw) / 1000.0,
        mean(|reading| reading.temperature_c),
    )
}

#[test]
fn the_hot_slot_of_the_8_gpu_box_is_held_under_80_c_and_its_neighbours_are_left_alone() {
    let (mut engine, mut sampler, clock, _folder) = simulated_box();
    // Unheld, the hot slot runs past its thermal target (83 °C) and slows itself down.
    let unheld: Vec<Telemetry> = (0..300)
        .map(|_| box_second(&mut engine, &mut sampler, &clock))
        .collect();
    let (unheld_mhz, unheld_w, unheld_c) = means(&unheld[100..]);
    assert!(unheld_c > 83.0, "{unheld_c} °C");

    let hold = TemperatureHold {
        max_temperature_c: 80,
        min_power_limit_mw: 270_000,
        max_power_limit_mw: 450_000,
    };
    let uuid = engine.gpus()[HOT_SLOT].identity.uuid.clone();
    engine
        .keep_temperature_hold(&client(1, "gputune hold-temp set"), &uuid, Some(hold))
        .unwrap_or_else(|error| panic!("{error}"));
    let held: Vec<Telemetry> = (0..1_500)
        .map(|_| box_second(&mut engine, &mut sampler, &clock))
        .collect();
    for reading in &held {
        let limit_mw = reading.power_limit_mw.unwrap_or(0);
        assert!((270_000..=450_000).contains(&limit_mw), "{limit_mw} mW");
    }
    let temperature = |reading: &Telemetry| reading.temperature_c.unwrap_or(0);
    let first_under = held.iter().position(|reading| temperature(reading) <= 80);
    let last_over = held
        .iter()
        .rposition(|reading| temperature(reading) > 80)
        .map_or(0, |second| second + 1);
    assert!(
        last_over as u64 <= SETTLE_S,
        "over 80 °C until {last_over} s"
    );
    let settled = &held[SETTLE_S as usize..];
    let peak_c = settled.iter().map(temperature).max().unwrap_or(0);
    let (held_mhz, held_w, held_c) = means(settled);
    eprintln!(
        "hot slot: unheld {unheld_c:.1} °C {unheld_w:.0} W {unheld_mhz:.0} MHz; held under 80 °C from {first_under:?} s, for good from {last_over} s; settled {held_c:.1} °C (peak {peak_c}) {held_w:.0} W {held_mhz:.0} MHz ({:+.1} % clock)",
        (held_mhz / unheld_mhz - 1.0) * 100.0
    );
    // Its neighbour has no hold: its limit is its own.
    assert_eq!(
        sampler
            .current_settings(2)
            .map(|current| current.power_limit_mw),
        Ok(Some(450_000))
    );
}
