//! The temperature hold against a hostile world: a driver that refuses the hold's write (said
//! once, tried again a minute later, never in a loop), a clear the driver refuses (it waits in
//! the journal and goes back at the retry), a daemon killed while it holds (its journal puts the
//! limit back at the next start), and a boot default with an absurd hold (said, not kept). On
//! the fake library where a card must outlive its engine. And a profile made the boot default
//! keeps the card's stored hold.

use super::temperature_hold::{HOLD_64, keep, state};
use super::*;
use gputune_core::tuning::engine::HOLD_REFUSED_WAIT;
use gputune_core::tuning::state_folder::StateFolder;
use gputune_formats::card::Telemetry;
use gputune_formats::temperature_hold::TemperatureHoldState;

/// A reading of the hot card at `at_ms`: what the hold acts on.
fn hot_reading(at_ms: u64) -> Telemetry {
    Telemetry {
        sampled_at_ms: at_ms,
        temperature_c: Some(80),
        power_draw_mw: Some(440_000),
        power_limit_mw: Some(450_000),
        ..Telemetry::default()
    }
}

/// An engine (the daemon's) on the fake library's card, on `clock`.
fn fake_engine(machine: &FakeMachine, folder: &tempfile::TempDir, clock: &ManualClock) -> Engine {
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    Engine::open(Box::new(backend), &options(folder), Arc::new(clock.clone()))
        .unwrap_or_else(|error| panic!("{error}"))
        .0
}

/// `seconds` of readings at 80 °C, one a second.
fn feed_hot_readings(engine: &mut Engine, clock: &ManualClock, seconds: u64) {
    for _ in 0..seconds {
        clock.advance_ms(1_000);
        engine.on_samples(&[Ok(hot_reading(clock.now_ms()))]);
        engine.tick();
    }
}

#[test]
fn a_write_the_driver_refuses_is_said_once_and_tried_again_only_after_a_wait() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let clock = ManualClock::starting_at(gputune_core::clock::wall_clock_ms());
    let mut engine = fake_engine(&machine, &folder, &clock);
    keep(&mut engine, HOLD_64);
    machine.set_shared_faults("no_permission");
    let writes_before = machine.write_log().len();
    let _ = engine.take_events();
    feed_hot_readings(&mut engine, &clock, 600);
    let tries = machine.write_log().len() - writes_before;
    let most = (600 / HOLD_REFUSED_WAIT.as_secs() + 1) as usize;
    assert!((1..=most).contains(&tries), "{tries} tries in 10 minutes");
    let said = notices(&mut engine)
        .into_iter()
        .filter(|notice| notice.text().contains("temperature hold could not set"))
        .count();
    assert_eq!(said, 1, "said once");
    assert!(matches!(
        state(&engine),
        TemperatureHoldState::Refused { .. }
    ));
    assert_eq!(machine.power_limit_mw(0), 450_000);
    let journal = folder
        .path()
        .join("state")
        .join(format!("journal-{}.json", machine.uuid(0)));
    assert!(
        !journal.exists(),
        "nothing was written, so nothing waits to go back"
    );
}

#[test]
fn a_killed_daemon_s_hold_is_put_back_from_its_journal_at_the_next_start() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let clock = ManualClock::starting_at(gputune_core::clock::wall_clock_ms());
    let mut engine = fake_engine(&machine, &folder, &clock);
    keep(&mut engine, HOLD_64);
    feed_hot_readings(&mut engine, &clock, 120);
    let held_mw = machine.power_limit_mw(0);
    assert!(held_mw < 450_000, "{held_mw}");
    for write in machine.write_log() {
        if let Setting::PowerLimit { power_limit_mw } = write.setting {
            assert!(
                (HOLD_64.min_power_limit_mw..=HOLD_64.max_power_limit_mw).contains(&power_limit_mw),
                "{power_limit_mw} mW written"
            );
        }
    }
    // kill -9: the engine goes without a word; the card stays at the hold's limit.
    drop(engine);
    assert_eq!(machine.power_limit_mw(0), held_mw);
    let (_engine, notices) = Engine::open(
        Box::new(
            NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}")),
        ),
        &options(&folder),
        Arc::new(clock.clone()),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(machine.power_limit_mw(0), 450_000, "{notices:?}");
}

#[test]
fn a_clear_the_driver_refuses_waits_in_the_journal_and_goes_back_at_the_retry() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let clock = ManualClock::starting_at(gputune_core::clock::wall_clock_ms());
    let mut engine = fake_engine(&machine, &folder, &clock);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    keep(&mut engine, HOLD_64);
    feed_hot_readings(&mut engine, &clock, 60);
    assert!(machine.power_limit_mw(0) < 450_000);
    machine.set_shared_faults("no_permission");
    engine
        .keep_temperature_hold(&client(1, "gputune hold-temp clear"), &uuid, None)
        .unwrap_or_else(|error| panic!("{error}"));
    let journal = folder
        .path()
        .join("state")
        .join(format!("journal-{uuid}.json"));
    assert!(
        journal.exists(),
        "what could not go back waits in the journal"
    );
    machine.set_shared_faults("");
    clock.advance_ms(UNRESTORED_RETRY.as_millis() as u64);
    engine.tick();
    assert_eq!(machine.power_limit_mw(0), 450_000);
    assert!(!journal.exists());
}

#[test]
fn a_boot_default_with_an_absurd_hold_is_said_and_not_kept() {
    let (mut engine, _sampler, _clock, folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let dir = folder.path().join("defaults");
    std::fs::create_dir_all(&dir).expect("the defaults folder");
    // Written by hand (the daemon checks what it stores): a hold at 500 °C.
    let file = format!(
        r#"{{"format_version":2,"gpu_uuid":"{uuid}","profile_name":"hot","settings":[],"temperature_hold":{{"max_temperature_c":500,"min_power_limit_mw":270000,"max_power_limit_mw":450000}}}}"#
    );
    std::fs::write(dir.join(format!("boot-{uuid}.json")), file).expect("the file");
    let notices =
        gputune_core::tuning::boot_defaults::BootDefaultStore::new(dir).apply_all(&mut engine);
    assert!(
        notices
            .iter()
            .any(|notice| matches!(notice, Notice::Error(text)
            if text.contains("could not be kept") && text.contains("outside 40-"))),
        "{notices:?}"
    );
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.temperature_hold.is_none())
    );
}

#[test]
fn a_profile_made_the_boot_default_keeps_the_cards_stored_hold() {
    use gputune_core::tuning::boot_defaults::BootDefaultStore;
    use gputune_formats::protocol::BootDefault;
    let (engine, _sampler, _clock, folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let store = BootDefaultStore::new(folder.path().join("defaults"));
    store
        .store_temperature_hold(&engine, &uuid, Some(HOLD_64))
        .unwrap_or_else(|error| panic!("{error}"));
    let from_profile = BootDefault {
        gpu_uuid: uuid.clone(),
        profile_name: "quiet".to_string(),
        settings: vec![Setting::PowerLimit {
            power_limit_mw: 400_000,
        }],
        fan_curve: None,
        temperature_hold: None,
    };
    let kept = store
        .keeping_hold(&engine, &uuid, from_profile)
        .unwrap_or_else(|error| panic!("{error}"));
    store
        .store(&engine, &uuid, Some(kept))
        .unwrap_or_else(|error| panic!("{error}"));
    let stored = store.read_all().0;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].temperature_hold, Some(HOLD_64));
    assert_eq!(stored[0].settings.len(), 1);
    // Cleared, the profile's settings stay; cleared of both, the file goes.
    store
        .store_temperature_hold(&engine, &uuid, None)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(store.read_all().0[0].temperature_hold, None);
    store
        .store(&engine, &uuid, None)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(store.read_all().0.is_empty());
}

/// `seconds` of readings at `temperature_c`, one a second.
fn feed_readings(engine: &mut Engine, clock: &ManualClock, seconds: u64, temperature_c: u32) {
    for _ in 0..seconds {
        clock.advance_ms(1_000);
        engine.on_samples(&[Ok(Telemetry {
            temperature_c: Some(temperature_c),
            ..hot_reading(clock.now_ms())
        })]);
        engine.tick();
    }
}

/// The power limit the card's journal says goes back, if it has one.
fn journaled_limit_mw(folder: &tempfile::TempDir, uuid: &str) -> Option<u32> {
    let journal = StateFolder::open(&folder.path().join("state"))
        .ok()?
        .read_journal(uuid)
        .ok()??;
    journal.restore.iter().find_map(|setting| match setting {
        Setting::PowerLimit { power_limit_mw } => Some(*power_limit_mw),
        _ => None,
    })
}

#[test]
fn a_hold_never_writes_over_a_put_back_the_driver_refused_and_never_keeps_a_run_s_limit() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let clock = ManualClock::starting_at(gputune_core::clock::wall_clock_ms());
    let mut engine = fake_engine(&machine, &folder, &clock);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let before_mw = machine.power_limit_mw(0);
    // A hold on a cool card: it writes nothing, so it has recorded nothing to put back.
    keep(&mut engine, HOLD_64);
    feed_readings(&mut engine, &clock, 30, 40);
    assert_eq!(machine.power_limit_mw(0), before_mw);

    // `gputune run` holds the limit; its put-back at the end is refused once.
    let run = client(5, "gputune run");
    let started = engine
        .start_session(
            &run,
            &SessionRequest {
                purpose: SessionPurpose::Run,
                changes: vec![GpuChange {
                    gpu_uuid: uuid.clone(),
                    settings: vec![Setting::PowerLimit {
                        power_limit_mw: 380_000,
                    }],
                }],
                fan_curves: Vec::new(),
                job_pid: None,
                job: None,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    feed_readings(&mut engine, &clock, 10, 80);
    machine.set_shared_faults("no_permission");
    let _ = engine.end_session(&run, started.session, false);
    assert_eq!(machine.power_limit_mw(0), 380_000);
    assert_eq!(journaled_limit_mw(&folder, &uuid), Some(before_mw));

    // The driver goes on refusing for a second (the engine's first retry), then takes
    // writes again: the hold's next step comes before the engine's next retry. It puts the
    // run's put-back first, and the journal keeps the limit from before the run.
    feed_readings(&mut engine, &clock, 1, 80);
    machine.set_shared_faults("");
    feed_readings(&mut engine, &clock, 7, 80);
    assert_eq!(machine.power_limit_mw(0), before_mw, "put back first");
    assert_eq!(
        journaled_limit_mw(&folder, &uuid).unwrap_or(before_mw),
        before_mw
    );
    feed_readings(&mut engine, &clock, 120, 80);
    assert!(machine.power_limit_mw(0) < before_mw);
    assert_eq!(journaled_limit_mw(&folder, &uuid), Some(before_mw));

    // Cleared, the card gets the limit it had before the run and the hold.
    engine
        .keep_temperature_hold(&client(1, "gputune hold-temp clear"), &uuid, None)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(machine.power_limit_mw(0), before_mw);
}
