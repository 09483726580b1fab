//! A trial over several GPUs (the window's "All GPUs", `apply --try` with several `--gpu`), on
//! the real NVML path through the fake libnvidia-ml: one session holds every card; the clock,
//! a keep or a revert on any card, or a write the driver refuses on one card ends every card
//! the same way; a card held by another client refuses the whole trial before anything is
//! written.

use std::sync::Arc;
use std::time::Duration;

use common::FakeMachine;

use crate::common;
use gputune_core::clock::{ManualClock, wall_clock_ms};
use gputune_core::device::nvml::NvmlBackend;
use gputune_core::tuning::engine::{ClientInfo, Engine, EngineOptions, Ownership};
use gputune_formats::card::Setting;
use gputune_formats::tuning::{
    EngineEvent, GpuChange, GroupTrialRequest, TrialPhase, TrialRequest, TrialStatus, TuneErrorKind,
};

fn client(id: u64, label: &str) -> ClientInfo {
    ClientInfo {
        id,
        pid: Some(2000 + id as u32),
        uid: Some(1000),
        user: Some("alice".to_string()),
        label: label.to_string(),
        may_write: true,
    }
}

/// An engine on the fake library whose time the test moves (`clock.advance_ms`): trials end
/// when the test says, not after a sleep.
fn engine(machine: &FakeMachine) -> (Engine, ManualClock, tempfile::TempDir) {
    let clock = ManualClock::starting_at(wall_clock_ms());
    let folder = tempfile::tempdir().expect("a state folder");
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let options = EngineOptions {
        state_dir: folder.path().join("state"),
        record_dir: None,
        ownership: Ownership::Daemon,
        call_timeout: Duration::from_secs(30),
        owner_label: "the test's engine".to_string(),
        box_journal_dir: None,
    };
    let (engine, _) = Engine::open(Box::new(backend), &options, Arc::new(clock.clone()))
        .unwrap_or_else(|error| panic!("{error}"));
    (engine, clock, folder)
}

/// A power limit of `watts` on each of `gpus`, tried for `duration_s`.
fn group(engine: &Engine, gpus: &[(u32, u32)], duration_s: u64) -> GroupTrialRequest {
    GroupTrialRequest {
        changes: gpus
            .iter()
            .map(|(gpu, watts)| GpuChange {
                gpu_uuid: engine.gpus()[*gpu as usize].identity.uuid.clone(),
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: watts * 1000,
                }],
            })
            .collect(),
        duration_s,
        baseline_s: 0,
    }
}

/// The trial endings the engine told, by GPU.
fn endings(engine: &mut Engine) -> Vec<TrialStatus> {
    engine
        .take_events()
        .into_iter()
        .filter_map(|event| match event {
            EngineEvent::Trial { status, .. } if status.phase == TrialPhase::Ended => Some(status),
            _ => None,
        })
        .collect()
}

fn ended_gpus(endings: &[TrialStatus]) -> Vec<u32> {
    let mut gpus: Vec<u32> = endings.iter().map(|status| status.gpu_index).collect();
    gpus.sort_unstable();
    gpus
}

#[test]
fn several_gpus_are_tried_in_one_session_and_put_back_together_when_time_is_up() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let (mut engine, clock, _folder) = engine(&machine);
    let window = client(1, "the gputune window");
    let statuses = engine
        .start_group_trial(&window, &group(&engine, &[(0, 300), (1, 315), (2, 330)], 1))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(statuses.len(), 3);
    assert!(
        statuses
            .iter()
            .all(|status| matches!(status.phase, TrialPhase::Running { .. })),
        "{statuses:?}"
    );
    assert_eq!(
        [0, 1, 2, 3].map(|gpu| machine.power_limit_mw(gpu)),
        [300_000, 315_000, 330_000, 450_000]
    );
    // One session holds the three cards.
    let sessions: Vec<_> = (0..3)
        .map(|gpu| {
            engine
                .tuning(gpu)
                .and_then(|tuning| tuning.holders.first().cloned())
                .map(|holder| holder.session)
        })
        .collect();
    assert!(sessions[0].is_some() && sessions.iter().all(|id| *id == sessions[0]));
    assert!(
        engine
            .tuning(3)
            .is_some_and(|tuning| tuning.holders.is_empty())
    );
    let _ = engine.take_events();
    // A millisecond before the second is up nothing ends; at the second, every card does.
    clock.advance_ms(999);
    engine.tick();
    assert!(endings(&mut engine).is_empty());
    assert_eq!(machine.power_limit_mw(2), 330_000);
    clock.advance_ms(1);
    engine.tick();
    let ended = endings(&mut engine);
    assert_eq!(ended_gpus(&ended), [0, 1, 2], "{ended:?}");
    assert!(
        ended.iter().all(|status| !status.failed
            && status
                .message
                .as_deref()
                .is_some_and(|message| message.starts_with("Time is up: put back power limit"))),
        "{ended:?}"
    );
    assert_eq!(
        [0, 1, 2].map(|gpu| machine.power_limit_mw(gpu)),
        [450_000; 3]
    );
    assert!((0..3).all(|gpu| {
        engine
            .tuning(gpu)
            .is_some_and(|tuning| tuning.holders.is_empty())
    }));
}

#[test]
fn keeping_or_reverting_on_one_card_ends_every_card_of_the_trial() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let (mut engine, _clock, _folder) = engine(&machine);
    let window = client(1, "the gputune window");
    let uuid = |engine: &Engine, gpu: usize| engine.gpus()[gpu].identity.uuid.clone();

    engine
        .start_group_trial(&window, &group(&engine, &[(4, 300), (5, 300)], 600))
        .unwrap_or_else(|error| panic!("{error}"));
    let _ = engine.take_events();
    let kept = engine
        .finish_trial(&window, &uuid(&engine, 5), true)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(kept.message.unwrap_or_default().starts_with("Kept"));
    assert_eq!(ended_gpus(&endings(&mut engine)), [4, 5]);
    assert_eq!([4, 5].map(|gpu| machine.power_limit_mw(gpu)), [300_000; 2]);
    assert!(
        engine
            .tuning(4)
            .is_some_and(|tuning| tuning.holders.is_empty())
    );

    engine
        .start_group_trial(&window, &group(&engine, &[(4, 270), (5, 280)], 600))
        .unwrap_or_else(|error| panic!("{error}"));
    let _ = engine.take_events();
    engine
        .finish_trial(&window, &uuid(&engine, 4), false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(ended_gpus(&endings(&mut engine)), [4, 5]);
    // Back to what they ran before this trial: the kept 300 W.
    assert_eq!([4, 5].map(|gpu| machine.power_limit_mw(gpu)), [300_000; 2]);
}

#[test]
fn a_write_refused_on_one_card_puts_every_card_back() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let (mut engine, _clock, _folder) = engine(&machine);
    let window = client(1, "the gputune window");
    let mut request = group(&engine, &[(0, 300), (1, 300)], 600);
    // The fans turn out not to answer on the driver after gputune read the card's limits: the
    // second card's fan write fails after the first card's power limit was written.
    request.changes[1].settings.push(Setting::FanSpeed {
        fan_index: 0,
        speed_pct: 80,
    });
    machine.set_shared_faults("fans_not_supported");
    let statuses = engine
        .start_group_trial(&window, &request)
        .unwrap_or_else(|error| panic!("{error}"));
    machine.set_shared_faults("");
    assert!(
        statuses.last().is_some_and(|status| status.failed),
        "{statuses:?}"
    );
    let ended = endings(&mut engine);
    assert_eq!(ended_gpus(&ended), [0, 1], "{ended:?}");
    assert_eq!([0, 1].map(|gpu| machine.power_limit_mw(gpu)), [450_000; 2]);
    assert!((0..2).all(|gpu| {
        engine
            .tuning(gpu)
            .is_some_and(|tuning| tuning.holders.is_empty())
    }));
}

#[test]
fn a_card_held_by_another_client_refuses_the_whole_trial_before_any_write() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let (mut engine, _clock, _folder) = engine(&machine);
    let terminal = client(2, "gputune apply --try 600");
    engine
        .start_trial(
            &terminal,
            &TrialRequest {
                gpu_uuid: engine.gpus()[2].identity.uuid.clone(),
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 350_000,
                }],
                duration_s: 600,
                baseline_s: 0,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let window = client(1, "the gputune window");
    let error = engine
        .start_group_trial(&window, &group(&engine, &[(1, 300), (2, 300)], 60))
        .expect_err("GPU 2 is held");
    assert_eq!(error.kind, TuneErrorKind::Held);
    assert!(error.message.contains("gputune apply --try 600"), "{error}");
    assert_eq!(machine.power_limit_mw(1), 450_000);
    assert!(
        engine
            .tuning(1)
            .is_some_and(|tuning| tuning.holders.is_empty())
    );
    // A value one card refuses: refused before anything, naming the card.
    let error = engine
        .start_group_trial(&window, &group(&engine, &[(0, 300), (1, 9_000)], 60))
        .expect_err("9000 W is out of range");
    assert_eq!(error.kind, TuneErrorKind::Refused);
    assert!(error.message.starts_with("GPU 1:"), "{error}");
    assert_eq!(machine.power_limit_mw(0), 450_000);
    let error = engine
        .start_group_trial(&window, &group(&engine, &[(0, 300), (0, 310)], 60))
        .expect_err("a card named twice");
    assert!(error.message.contains("named twice"), "{error}");
}

#[test]
fn the_window_tries_every_gpu_through_the_daemon_and_closing_it_puts_them_all_back() {
    use common::daemon::{Daemon, wait_until, window_options};
    use gputune_core::link::{Link, LinkCommand, TuneCommand};
    use gputune_core::service::client::SocketChoice;
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let daemon = Daemon::start(&machine);
    let all_at = |watts: u32| {
        let state = machine.state();
        state
            .machine
            .gpus
            .iter()
            .all(|gpu| gpu.settings.power_limit_mw == watts * 1000)
    };
    let every_gpu: Vec<(u32, Vec<Setting>)> = (0..8)
        .map(|gpu| {
            (
                gpu,
                vec![Setting::PowerLimit {
                    power_limit_mw: 300_000,
                }],
            )
        })
        .collect();
    let try_all = TuneCommand::StartTrialAll {
        changes: every_gpu,
        duration_s: 600,
    };
    let link = Link::spawn(
        window_options(&machine, SocketChoice::Path(daemon.socket.clone())),
        500,
        || {},
    )
    .expect("the link starts");
    link.send(LinkCommand::Tune(try_all.clone()));
    wait_until("every card runs the trial", || all_at(300));
    // Revert on one card: every card goes back.
    link.send(LinkCommand::Tune(TuneCommand::RevertTrial { gpu_index: 3 }));
    wait_until("every card is put back", || all_at(450));
    // Tried again, then the window closes: the daemon puts every card back.
    link.send(LinkCommand::Tune(try_all));
    wait_until("every card runs the trial again", || all_at(300));
    drop(link);
    wait_until("closing the window put every card back", || all_at(450));
    let _ = daemon.stop();
}
