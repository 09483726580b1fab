//! The tuning engine itself, driven the way the service drives it: the fan safety net, a fan
//! write the driver refuses (said once, not retried in a loop), a plain apply rolled back when
//! a later write fails, the window's trial inside its fan-curve session, a plain apply by the
//! holder, holders named in refusals, and a client that goes away. What it does as time
//! passes (trials' countdowns, retries) is in `engine/by_the_clock.rs`, on a manual clock; what a
//! critical error (Xid) puts back and ends is in `engine/crash.rs`.

use gputune_core::tuning::state_folder::EngineJournal;
mod bounds;
mod box_check_lock;
mod box_journal;
mod by_the_clock;
mod crash;
mod jobs;
mod scheduler_jobs;
mod temperature_hold;
mod temperature_hold_faults;
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::FakeMachine;
use gputune_core::clock::{Clock, ManualClock, WallClock};
use gputune_core::device::Backend;
use gputune_core::device::nvml::NvmlBackend;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_core::tuning::engine::{
    ClientInfo, Engine, EngineOptions, Ownership, UNRESTORED_RETRY,
};
use gputune_formats::card::{FanMode, Setting};
use gputune_formats::fan_curve::{CurvePoint, FanCurve};
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{
    EngineEvent, GpuChange, SessionPurpose, SessionRequest, TrialPhase, TrialRequest, TrialStatus,
    TuneErrorKind,
};

fn client(id: u64, label: &str) -> ClientInfo {
    ClientInfo {
        id,
        pid: Some(1000 + id as u32),
        uid: Some(1000),
        user: Some("alice".to_string()),
        label: label.to_string(),
        may_write: true,
    }
}

fn options(folder: &tempfile::TempDir) -> EngineOptions {
    EngineOptions {
        state_dir: folder.path().join("state"),
        // An in-process engine (`..options(folder)`) as root: never /run/gputune's records.
        record_dir: Some(folder.path().join("state")),
        ownership: Ownership::Daemon,
        call_timeout: Duration::from_secs(30),
        owner_label: "the test's engine".to_string(),
        box_journal_dir: None,
    }
}

/// An engine on a simulated RTX 4090 whose clock the test moves, and the sampler's handle on
/// the same machine.
fn simulated(load: LoadPattern) -> (Engine, SimBackend, ManualClock, tempfile::TempDir) {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let backend = SimBackend::with_clock(
        &SimOptions {
            scenario: SimScenario::Rtx4090,
            load,
        },
        Box::new(clock.clone()),
    );
    let sampler = backend.share();
    let folder = tempfile::tempdir().expect("a state folder");
    let (engine, notices) = Engine::open(
        Box::new(backend),
        &options(&folder),
        Arc::new(clock.clone()),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert!(notices.is_empty());
    (engine, sampler, clock, folder)
}

/// Moves simulated time on by `seconds`, feeding the engine a reading every second.
fn run_for(engine: &mut Engine, sampler: &mut SimBackend, clock: &ManualClock, seconds: u64) {
    for _ in 0..seconds {
        clock.advance_ms(1_000);
        engine.on_samples(&[sampler.telemetry(0)]);
        engine.tick();
    }
}

/// Real time, for tests that do not wait for anything.
fn wall() -> Arc<dyn Clock> {
    Arc::new(WallClock)
}

/// Starts `trial` for the window (client 1), then ends it with the driver refusing every write:
/// the put-back fails and waits in the journal, whose path it returns.
fn trial_put_back_refused(
    engine: &mut Engine,
    machine: &FakeMachine,
    folder: &tempfile::TempDir,
    trial: &TrialRequest,
) -> std::path::PathBuf {
    let window = client(1, "the gputune window");
    engine
        .start_trial(&window, trial)
        .unwrap_or_else(|error| panic!("{error}"));
    machine.set_shared_faults("no_permission");
    let ended = engine
        .finish_trial(&window, &trial.gpu_uuid, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(ended.failed, "{:?}", ended.message);
    let journal = folder
        .path()
        .join("state")
        .join(format!("journal-{}.json", trial.gpu_uuid));
    assert!(journal.exists(), "what waits to be put back is journaled");
    journal
}

fn notices(engine: &mut Engine) -> Vec<Notice> {
    engine
        .take_events()
        .into_iter()
        .filter_map(|event| match event {
            EngineEvent::Notice { notice, .. } => Some(notice),
            _ => None,
        })
        .collect()
}

#[test]
fn the_safety_net_hands_hot_fans_back_to_the_driver_until_the_card_cools() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let window = client(1, "the gputune window");
    // The lowest curve allowed: 30 % until 75 °C, 70 % at 85 °C. Fans pinned low, a card at
    // full load heats past its slowdown margin (90 - 5 °C) at some point or holds below it.
    let curve = FanCurve::new(
        vec![
            CurvePoint {
                temperature_c: 75.0,
                speed_pct: 30.0,
            },
            CurvePoint {
                temperature_c: 85.0,
                speed_pct: 70.0,
            },
        ],
        3.0,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    engine
        .set_fan_curve(&window, &uuid, Some(curve))
        .unwrap_or_else(|error| panic!("{error}"));
    // A manual 30 % by a trial instead forces the heat: the net takes the fans back.
    engine
        .set_fan_curve(&window, &uuid, None)
        .unwrap_or_else(|error| panic!("{error}"));
    let trial = TrialRequest {
        gpu_uuid: uuid.clone(),
        settings: vec![
            Setting::FanSpeed {
                fan_index: 0,
                speed_pct: 30,
            },
            Setting::FanSpeed {
                fan_index: 1,
                speed_pct: 30,
            },
            Setting::PowerLimit {
                power_limit_mw: 600_000,
            },
        ],
        duration_s: 3_600,
        baseline_s: 0,
    };
    engine
        .start_trial(&window, &trial)
        .unwrap_or_else(|error| panic!("{error}"));
    let _ = engine.take_events();
    let mut engaged = None;
    for second in 0..1_800 {
        run_for(&mut engine, &mut sampler, &clock, 1);
        if let Some(notice) = notices(&mut engine)
            .into_iter()
            .find(|notice| notice.text().contains("back under the driver's control"))
        {
            let reading = sampler
                .telemetry(0)
                .unwrap_or_else(|error| panic!("{error}"));
            engaged = Some((second, notice, reading.temperature_c));
            break;
        }
    }
    let Some((second, notice, temperature_c)) = engaged else {
        panic!(
            "the card never got hot enough: {:?}",
            sampler.telemetry(0).map(|reading| reading.temperature_c)
        )
    };
    eprintln!("after {second} s at 30 %: {notice}");
    assert!(
        temperature_c.is_some_and(|celsius| celsius >= 85),
        "{temperature_c:?}"
    );
    assert!(
        notice.text().contains("slowdown temperature of 90 °C"),
        "{notice}"
    );
    assert_eq!(
        sampler.current_settings(0).map(|current| current.fans),
        Ok(Some(vec![FanMode::Automatic, FanMode::Automatic])),
    );
    let tuning = engine.tuning(0).unwrap_or_else(|| panic!("GPU 0"));
    assert!(tuning.fan_safety_engaged);
    assert!(
        tuning
            .last_change
            .is_some_and(|change| change.by == "gputune's fan safety net")
    );
}

#[test]
fn a_trial_in_the_window_s_fan_curve_session_is_kept_beyond_the_window() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let window = client(1, "the gputune window");
    engine
        .set_fan_curve(&window, &uuid, Some(FanCurve::default()))
        .unwrap_or_else(|error| panic!("{error}"));
    run_for(&mut engine, &mut sampler, &clock, 2);
    let holders = engine
        .tuning(0)
        .map(|tuning| tuning.holders)
        .unwrap_or_default();
    assert_eq!(
        holders
            .iter()
            .map(|holder| (holder.purpose, holder.controls.clone()))
            .collect::<Vec<_>>(),
        vec![(SessionPurpose::FanCurve, vec![Hold::Fans])]
    );
    let trial = TrialRequest {
        gpu_uuid: uuid.clone(),
        settings: vec![Setting::PowerLimit {
            power_limit_mw: 315_000,
        }],
        duration_s: 60,
        baseline_s: 0,
    };
    engine
        .start_trial(&window, &trial)
        .unwrap_or_else(|error| panic!("{error}"));
    // Another client may not touch the card meanwhile, and is told by whom it is held.
    let cli = client(2, "gputune apply --power-limit 70%");
    let refused = engine
        .apply_changes(
            &cli,
            &[GpuChange {
                gpu_uuid: uuid.clone(),
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 300_000,
                }],
            }],
        )
        .expect_err("held");
    assert_eq!(refused.kind, TuneErrorKind::Held);
    assert!(
        refused
            .message
            .contains("the gputune window (pid 1001, user alice)"),
        "{refused}"
    );
    engine
        .finish_trial(&window, &uuid, true)
        .unwrap_or_else(|error| panic!("{error}"));
    // The window closes: the curve's fans go back, the kept limit stays.
    engine.client_gone(window.id);
    let current = sampler
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(current.power_limit_mw, Some(315_000));
    assert_eq!(
        current.fans,
        Some(vec![FanMode::Automatic, FanMode::Automatic])
    );
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.holders.is_empty())
    );
}

#[test]
fn the_holder_s_own_apply_is_permanent_and_its_session_does_not_undo_it() {
    let (mut engine, _sampler, _clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let run = client(3, "gputune run");
    engine
        .start_session(
            &run,
            &SessionRequest {
                purpose: SessionPurpose::Run,
                changes: vec![GpuChange {
                    gpu_uuid: uuid.clone(),
                    settings: vec![Setting::PowerLimit {
                        power_limit_mw: 315_000,
                    }],
                }],
                fan_curves: Vec::new(),
                job_pid: None,
                job: None,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    engine
        .apply_changes(
            &run,
            &[GpuChange {
                gpu_uuid: uuid.clone(),
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 350_000,
                }],
            }],
        )
        .unwrap_or_else(|error| panic!("{error}"));
    engine.client_gone(run.id);
    assert_eq!(
        engine
            .tuning(0)
            .and_then(|tuning| tuning.in_force.power_limit_mw),
        Some(350_000)
    );
}

#[test]
fn a_plain_apply_rolls_back_what_it_wrote_when_a_later_write_is_refused() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let (mut engine, _) = Engine::open(Box::new(backend), &options(&folder), wall())
        .unwrap_or_else(|error| panic!("{error}"));
    let uuid = engine.gpus()[0].identity.uuid.clone();
    // The driver stops accepting offsets after the engine read the card's constraints.
    machine.set_shared_faults("offsets_not_supported");
    let refused = engine
        .apply_changes(
            &client(1, "gputune apply"),
            &[GpuChange {
                gpu_uuid: uuid,
                settings: vec![
                    Setting::PowerLimit {
                        power_limit_mw: 300_000,
                    },
                    Setting::GpuClockOffset { offset_mhz: 100 },
                ],
            }],
        )
        .expect_err("refused by the driver");
    assert!(refused.message.contains("was rolled back"), "{refused}");
    let writes: Vec<Setting> = machine
        .write_log()
        .iter()
        .map(|write| write.setting)
        .collect();
    assert_eq!(
        writes,
        vec![
            Setting::PowerLimit {
                power_limit_mw: 300_000
            },
            // The driver's refusal of P0's offset (the state it is asked of first).
            Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz: 100
            },
            Setting::PowerLimit {
                power_limit_mw: 450_000
            },
        ]
    );
    assert_eq!(machine.power_limit_mw(0), 450_000);
    let journals = std::fs::read_dir(folder.path().join("state"))
        .unwrap_or_else(|error| panic!("{error}"))
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("journal-"))
        .count();
    assert_eq!(journals, 0);
}

#[test]
fn a_refused_fan_write_stops_the_curve_and_is_said_once() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let mut reader =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let (mut engine, _) = Engine::open(Box::new(backend), &options(&folder), wall())
        .unwrap_or_else(|error| panic!("{error}"));
    let uuid = engine.gpus()[0].identity.uuid.clone();
    machine.set_shared_faults("no_permission");
    let window = client(1, "the gputune window");
    engine
        .set_fan_curve(&window, &uuid, Some(FanCurve::default()))
        .unwrap_or_else(|error| panic!("{error}"));
    let _ = engine.take_events();
    for _ in 0..20 {
        engine.on_samples(&[reader.telemetry(0)]);
    }
    let said: Vec<Notice> = notices(&mut engine)
        .into_iter()
        .filter(|notice| notice.text().contains("could not set GPU 0's fans"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].is_error());
    let attempts = machine
        .write_log()
        .iter()
        .filter(|write| matches!(write.setting, Setting::FanSpeed { .. }))
        .count();
    assert_eq!(attempts, 1, "one refused write, then no retry loop");
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.fan_curve.is_none() && tuning.holders.is_empty()),
        "the curve's session ended with it"
    );
    // The window's curve changed nothing: nothing is journaled, and its closing puts nothing
    // back (no write at all, so no "could not put back" either).
    let journals = std::fs::read_dir(folder.path().join("state"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.file_name().to_string_lossy().starts_with("journal-"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(journals, 0);
    let writes = machine.write_log().len();
    engine.client_gone(window.id);
    assert_eq!(machine.write_log().len(), writes);
    machine.set_shared_faults("");
}

#[test]
fn a_client_that_may_not_write_is_refused_before_anything() {
    let (mut engine, _sampler, _clock, _folder) = simulated(LoadPattern::Idle);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let mut stranger = client(9, "gputune apply");
    stranger.may_write = false;
    let refused = engine
        .start_trial(
            &stranger,
            &TrialRequest {
                gpu_uuid: uuid,
                settings: vec![Setting::ResetGpuClocks],
                duration_s: 5,
                baseline_s: 0,
            },
        )
        .expect_err("not allowed");
    assert_eq!(refused.kind, TuneErrorKind::NotAllowed);
    assert!(refused.message.contains("usermod -aG gputune"), "{refused}");
}

#[test]
fn a_trial_stopped_while_its_baseline_is_measured_changes_nothing() {
    let (mut engine, mut sampler, _clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let window = client(1, "the gputune window");
    let before = sampler
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let status = engine
        .start_trial(
            &window,
            &TrialRequest {
                gpu_uuid: uuid.clone(),
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 315_000,
                }],
                duration_s: 60,
                baseline_s: 30,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(
        matches!(
            status.phase,
            gputune_formats::tuning::TrialPhase::Measuring { .. }
        ),
        "no history yet: the baseline is measured first ({:?})",
        status.phase
    );
    // "Keep" before anything was tried keeps nothing.
    let ended = engine
        .finish_trial(&window, &uuid, true)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        ended.message.as_deref(),
        Some("Cancelled before anything was changed.")
    );
    assert_eq!(sampler.current_settings(0), Ok(before));
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.holders.is_empty())
    );
}

#[test]
fn a_trial_the_driver_refuses_changes_nothing_and_leaves_no_journal() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let (mut engine, _) = Engine::open(Box::new(backend), &options(&folder), wall())
        .unwrap_or_else(|error| panic!("{error}"));
    let uuid = engine.gpus()[0].identity.uuid.clone();
    machine.set_shared_faults("no_permission");
    let status = engine
        .start_trial(
            &client(1, "the gputune window"),
            &TrialRequest {
                gpu_uuid: uuid,
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 315_000,
                }],
                duration_s: 60,
                baseline_s: 0,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    machine.set_shared_faults("");
    let message = status.message.unwrap_or_default();
    assert!(status.failed);
    assert!(message.contains("Nothing was changed"), "{message}");
    assert!(message.contains("administrator rights"), "{message}");
    assert!(!message.contains("only in part"), "{message}");
    let journals = std::fs::read_dir(folder.path().join("state"))
        .unwrap_or_else(|error| panic!("{error}"))
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("journal-"))
        .count();
    assert_eq!(journals, 0, "nothing to restore, so no journal");
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.holders.is_empty())
    );
}

#[test]
fn a_trial_without_permission_fails_before_its_baseline_on_one_card_and_on_all() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let (mut engine, _) = Engine::open(Box::new(backend), &options(&folder), wall())
        .unwrap_or_else(|error| panic!("{error}"));
    let uuids: Vec<String> = engine
        .gpus()
        .iter()
        .map(|gpu| gpu.identity.uuid.clone())
        .collect();
    let limits_before: Vec<u32> = (0..uuids.len())
        .map(|gpu| machine.power_limit_mw(gpu))
        .collect();
    // Without a daemon, as a normal user on a real driver: every write is refused.
    machine.set_shared_faults("no_permission");
    let window = client(1, "the gputune window");
    let power_limit = vec![Setting::PowerLimit {
        power_limit_mw: 315_000,
    }];
    // No reading yet, so the trial would measure its 10 s baseline before the first write.
    let status = engine
        .start_trial(
            &window,
            &TrialRequest {
                gpu_uuid: uuids[0].clone(),
                settings: power_limit.clone(),
                duration_s: 60,
                baseline_s: 10,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let message = status.message.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        gputune_formats::tuning::TrialPhase::Ended,
        "ended at once, not measuring a baseline: {status:?}"
    );
    assert!(status.failed);
    assert!(message.contains("administrator rights"), "{message}");
    assert!(message.contains("Nothing was changed"), "{message}");
    assert!(
        engine
            .tuning(0)
            .is_some_and(|tuning| tuning.holders.is_empty()),
        "the card is free again"
    );

    // "All GPUs": the same, for every card together.
    let statuses = engine
        .start_group_trial(
            &window,
            &gputune_formats::tuning::GroupTrialRequest {
                changes: uuids
                    .iter()
                    .map(|uuid| GpuChange {
                        gpu_uuid: uuid.clone(),
                        settings: power_limit.clone(),
                    })
                    .collect(),
                duration_s: 60,
                baseline_s: 10,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(statuses.len(), uuids.len(), "{statuses:?}");
    for status in &statuses {
        assert_eq!(
            status.phase,
            gputune_formats::tuning::TrialPhase::Ended,
            "{status:?}"
        );
        assert!(status.failed, "{status:?}");
    }
    assert!(
        statuses[0]
            .message
            .as_deref()
            .is_some_and(|message| message.contains("administrator rights")),
        "{statuses:?}"
    );
    machine.set_shared_faults("");
    for (gpu, before_mw) in limits_before.iter().enumerate() {
        assert_eq!(
            machine.power_limit_mw(gpu),
            *before_mw,
            "GPU {gpu} unchanged"
        );
        assert!(
            engine
                .tuning(gpu as u32)
                .is_some_and(|tuning| tuning.holders.is_empty())
        );
    }
}

#[test]
fn a_sessions_job_is_named_to_every_client_and_only_its_owner_may_name_it() {
    let (mut engine, _sampler, _clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let run = client(3, "gputune run");
    let request = SessionRequest {
        purpose: SessionPurpose::Run,
        changes: vec![GpuChange {
            gpu_uuid: uuid,
            settings: vec![Setting::PowerLimit {
                power_limit_mw: 315_000,
            }],
        }],
        fan_curves: Vec::new(),
        job_pid: None,
        job: None,
    };
    let started = engine
        .start_session(&run, &request)
        .unwrap_or_else(|error| panic!("{error}"));
    let job_pid = |engine: &Engine| {
        engine
            .tuning(0)
            .and_then(|tuning| tuning.holders.first().cloned())
            .and_then(|holder| holder.job_pid)
    };
    assert_eq!(job_pid(&engine), None, "not named yet");
    let other = client(4, "gputune run");
    assert!(
        engine.set_session_job(&other, started.session, 77).is_err(),
        "another client's session"
    );
    engine
        .set_session_job(&run, started.session, 4242)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(job_pid(&engine), Some(4242));
    engine
        .end_session(&run, started.session, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(job_pid(&engine), None);

    // A sweep names its job when its session starts.
    let sweep = SessionRequest {
        purpose: SessionPurpose::Sweep,
        job_pid: Some(555),
        ..request
    };
    engine
        .start_session(&run, &sweep)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(job_pid(&engine), Some(555));
}

#[test]
fn an_in_process_engine_puts_back_a_refused_revert_before_its_next_trial() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let options = EngineOptions {
        ownership: Ownership::InProcess,
        ..options(&folder)
    };
    let (mut engine, _) =
        Engine::open(Box::new(backend), &options, wall()).unwrap_or_else(|error| panic!("{error}"));
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let window = client(1, "the gputune window");
    let trial = |settings: Vec<Setting>| TrialRequest {
        gpu_uuid: uuid.clone(),
        settings,
        duration_s: 60,
        baseline_s: 0,
    };
    let journal = trial_put_back_refused(
        &mut engine,
        &machine,
        &folder,
        &trial(vec![Setting::FanSpeed {
            fan_index: 0,
            speed_pct: 80,
        }]),
    );

    machine.set_shared_faults("");
    let writes_before = machine.write_log().len();
    engine
        .start_trial(
            &window,
            &trial(vec![Setting::PowerLimit {
                power_limit_mw: 315_000,
            }]),
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let writes: Vec<Setting> = machine.write_log()[writes_before..]
        .iter()
        .map(|write| write.setting)
        .collect();
    assert_eq!(
        writes,
        vec![
            Setting::FanAutomatic { fan_index: 0 },
            Setting::PowerLimit {
                power_limit_mw: 315_000
            },
        ]
    );
    engine
        .finish_trial(&window, &uuid, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(!journal.exists(), "nothing is left to put back");
    assert!(notices(&mut engine).iter().any(|notice| {
        notice
            .to_string()
            .contains("earlier put-back could not write")
    }));
}

#[test]
fn a_journal_value_the_card_can_never_take_is_said_and_does_not_block_the_card() {
    use gputune_core::tuning::state_folder::StateFolder;
    use gputune_formats::files::GpuJournal;
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let uuid = machine.uuid(0);
    let journal = GpuJournal::new(
        gputune_formats::card::BackendKind::Nvml,
        &uuid,
        0,
        // Below the card's 150 W minimum: the gate refuses it, now and always.
        vec![Setting::PowerLimit {
            power_limit_mw: 10_000,
        }],
        "a damaged gputune",
    );
    StateFolder::open(&folder.path().join("state"))
        .and_then(|state| state.write_journal(&journal))
        .unwrap_or_else(|error| panic!("{error}"));
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let (mut engine, opened) = Engine::open(Box::new(backend), &options(&folder), wall())
        .unwrap_or_else(|error| panic!("{error}"));
    let said: Vec<String> = opened
        .iter()
        .chain(&notices(&mut engine))
        .map(ToString::to_string)
        .collect();
    assert!(
        said.iter().any(|line| line.contains("cannot take back")),
        "{said:?}"
    );
    assert!(
        !folder
            .path()
            .join("state")
            .join(format!("journal-{uuid}.json"))
            .exists()
    );
    engine
        .apply_changes(
            &client(1, "gputune apply"),
            &[GpuChange {
                gpu_uuid: uuid,
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 300_000,
                }],
            }],
        )
        .unwrap_or_else(|error| panic!("the card is not blocked: {error}"));
    assert_eq!(machine.power_limit_mw(0), 300_000);
}
