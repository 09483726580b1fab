//! What the engine does as time passes, driven by a manual clock instead of sleeps: a trial
//! measures its baseline, applies, counts down and puts back when its time is up; a put-back
//! the driver refused is tried again at the next tick, then every `UNRESTORED_RETRY` and not
//! before.

use super::*;

/// The trial statuses the engine told since the last call, newest last.
fn trial_statuses(engine: &mut Engine) -> Vec<TrialStatus> {
    engine
        .take_events()
        .into_iter()
        .filter_map(|event| match event {
            EngineEvent::Trial { status, .. } => Some(status),
            _ => None,
        })
        .collect()
}

fn power_limit_mw(sampler: &mut SimBackend) -> Option<u32> {
    sampler
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"))
        .power_limit_mw
}

#[test]
fn a_trial_measures_its_baseline_then_applies_and_is_put_back_when_its_time_is_up() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let before_mw = power_limit_mw(&mut sampler);
    let window = client(1, "the gputune window");
    let started = engine
        .start_trial(
            &window,
            &TrialRequest {
                gpu_uuid: uuid,
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 400_000,
                }],
                duration_s: 30,
                baseline_s: 10,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    // No readings yet: the whole baseline is measured before anything is written.
    assert_eq!(started.phase, TrialPhase::Measuring { left_s: 10 });
    let _ = engine.take_events();

    run_for(&mut engine, &mut sampler, &clock, 9);
    let last = trial_statuses(&mut engine).pop();
    assert_eq!(
        last.map(|status| status.phase),
        Some(TrialPhase::Measuring { left_s: 1 })
    );
    assert_eq!(
        power_limit_mw(&mut sampler),
        before_mw,
        "nothing written yet"
    );

    run_for(&mut engine, &mut sampler, &clock, 1);
    let applied = trial_statuses(&mut engine)
        .pop()
        .unwrap_or_else(|| panic!("the trial said it applied"));
    assert_eq!(applied.phase, TrialPhase::Running { left_s: 30 });
    assert_eq!(applied.baseline.samples, 10, "{:?}", applied.baseline);
    assert_eq!(power_limit_mw(&mut sampler), Some(400_000));
    let holder = engine
        .tuning(0)
        .and_then(|tuning| tuning.holders.first().cloned())
        .unwrap_or_else(|| panic!("the trial holds the card"));
    assert_eq!(holder.trial_ends_at_ms, Some(clock.now_ms() + 30_000));

    run_for(&mut engine, &mut sampler, &clock, 29);
    let last = trial_statuses(&mut engine).pop();
    assert_eq!(
        last.map(|status| status.phase),
        Some(TrialPhase::Running { left_s: 1 })
    );
    assert_eq!(power_limit_mw(&mut sampler), Some(400_000));

    run_for(&mut engine, &mut sampler, &clock, 1);
    let ended = trial_statuses(&mut engine)
        .pop()
        .unwrap_or_else(|| panic!("the trial said it ended"));
    assert_eq!(ended.phase, TrialPhase::Ended);
    assert!(
        ended
            .message
            .as_deref()
            .is_some_and(|message| message.starts_with("Time is up: put back power limit")),
        "{ended:?}"
    );
    assert_eq!(ended.during.samples, 30, "{:?}", ended.during);
    assert_eq!(power_limit_mw(&mut sampler), before_mw);
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.holders.is_empty())
    );
    assert_eq!(engine.next_wakeup(), None, "nothing left to wait for");
}

#[test]
fn a_refused_put_back_is_tried_again_after_the_retry_interval_and_not_before() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let clock = ManualClock::starting_at(gputune_core::clock::wall_clock_ms());
    let (mut engine, _) = Engine::open(
        Box::new(backend),
        &options(&folder),
        Arc::new(clock.clone()),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let journal = super::trial_put_back_refused(
        &mut engine,
        &machine,
        &folder,
        &TrialRequest {
            gpu_uuid: uuid.clone(),
            settings: vec![Setting::PowerLimit {
                power_limit_mw: 315_000,
            }],
            duration_s: 60,
            baseline_s: 0,
        },
    );
    // The next tick tries once more at once (refused again); from then on, once a retry
    // interval has passed since the last try.
    let writes_before = machine.write_log().len();
    engine.tick();
    assert_eq!(machine.write_log().len(), writes_before + 1, "tried again");
    machine.set_shared_faults("");
    let writes_before = machine.write_log().len();

    let retry_ms = UNRESTORED_RETRY.as_millis() as u64;
    clock.advance_ms(retry_ms - 1);
    engine.tick();
    assert_eq!(machine.write_log().len(), writes_before, "not tried yet");
    assert_eq!(machine.power_limit_mw(0), 315_000);

    clock.advance_ms(1);
    engine.tick();
    let writes: Vec<Setting> = machine.write_log()[writes_before..]
        .iter()
        .map(|write| write.setting)
        .collect();
    assert_eq!(
        writes,
        vec![Setting::PowerLimit {
            power_limit_mw: 450_000
        }]
    );
    assert_eq!(machine.power_limit_mw(0), 450_000);
    assert!(!journal.exists(), "nothing is left to put back");
}
