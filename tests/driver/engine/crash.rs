//! A critical error (Xid) on a tuned card, in the engine on the simulator: by the Xid's class,
//! the clock offsets and locks go back first (to what their session recorded, or to stock for
//! a plain apply's), the fans are never written (a kept curve goes on, a run that drives the
//! fans keeps them), the sessions that held what went back end marked by the crash, the crash
//! is the card's last change, and every client is told in one sentence.

use super::*;

use gputune_core::device::sim::SimSettings;
use gputune_formats::card::CriticalEvent;
use gputune_formats::tuning::ClockLockInForce;
use gputune_formats::tuning::{CriticalNote, SessionReport};

/// A flat curve: the fans run at 77 % whatever the card's temperature.
fn flat_77() -> FanCurve {
    let point = |temperature_c| CurvePoint {
        temperature_c,
        speed_pct: 77.0,
    };
    FanCurve::new(vec![point(0.0), point(110.0)], 2.0).unwrap_or_else(|error| panic!("{error}"))
}

fn card(sampler: &SimBackend) -> SimSettings {
    sampler.machine().gpus[0].settings.clone()
}

/// A plain apply of a user's tuning: a lowered power limit, a GPU clock lock and both offsets.
fn tune_plainly(engine: &mut Engine, uuid: &str) {
    engine
        .apply_changes(
            &client(1, "gputune apply"),
            &[GpuChange {
                gpu_uuid: uuid.to_string(),
                settings: vec![
                    Setting::PowerLimit {
                        power_limit_mw: 400_000,
                    },
                    Setting::LockGpuClocks {
                        min_mhz: 210,
                        max_mhz: 2520,
                    },
                    Setting::GpuClockOffset { offset_mhz: 300 },
                    Setting::MemoryClockOffset { offset_mhz: 500 },
                ],
            }],
        )
        .unwrap_or_else(|error| panic!("{error}"));
}

fn xid(engine: &mut Engine, xid: u64) -> Vec<EngineEvent> {
    engine.on_critical_event(CriticalEvent { gpu_index: 0, xid });
    engine.take_events()
}

fn error_sentences(events: &[EngineEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            EngineEvent::Notice {
                notice: Notice::Error(text),
                ..
            } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn last_critical(engine: &Engine) -> CriticalNote {
    engine
        .tuning(0)
        .and_then(|tuning| tuning.last_critical)
        .expect("the crash is kept")
}

#[test]
fn an_xid_13_puts_back_a_plain_offset_and_lock_to_stock_and_leaves_the_kept_curve_and_limit() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    engine
        .keep_fan_curve(&client(2, "gputune fan curve set"), &uuid, Some(flat_77()))
        .unwrap_or_else(|error| panic!("{error}"));
    run_for(&mut engine, &mut sampler, &clock, 2);
    tune_plainly(&mut engine, &uuid);
    assert_eq!(card(&sampler).fan_manual_pct, vec![Some(77), Some(77)]);
    let _ = engine.take_events();

    let events = xid(&mut engine, 13);
    let settings = card(&sampler);
    assert_eq!(settings.gpu_clock_offset_mhz, 0);
    assert_eq!(settings.memory_clock_offset_mhz, 0);
    assert_eq!(settings.gpu_locked_clocks, None);
    assert_eq!(settings.power_limit_mw, 400_000, "a lowered limit is kept");
    assert_eq!(settings.fan_manual_pct, vec![Some(77), Some(77)]);
    // No session held them: nobody's session ended, the kept curve goes on.
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, EngineEvent::SessionEnded { .. }))
    );
    let tuning = engine.tuning(0).expect("GPU 0");
    assert_eq!(tuning.fan_curve, Some(flat_77()));
    assert_eq!(
        tuning
            .holders
            .iter()
            .map(|holder| holder.purpose)
            .collect::<Vec<_>>(),
        vec![SessionPurpose::KeptFanCurve]
    );
    assert_eq!(tuning.in_force.gpu_clock_lock, ClockLockInForce::Unlocked);
    run_for(&mut engine, &mut sampler, &clock, 2);
    assert_eq!(card(&sampler).fan_manual_pct, vec![Some(77), Some(77)]);

    // One sentence to every client, kept for those that were not listening.
    let sentences = error_sentences(&events);
    assert_eq!(sentences.len(), 1, "{sentences:?}");
    let sentence = &sentences[0];
    assert!(
        sentence.starts_with("GPU 0 reported Xid 13 (a graphics engine exception"),
        "{sentence}"
    );
    assert!(
        sentence.contains("at +300 MHz, memory +500 MHz"),
        "{sentence}"
    );
    assert!(
        sentence
            .contains("the GPU clock offset and lock, and the memory clock offset were put back"),
        "{sentence}"
    );
    assert!(
        sentence.contains("fans kept (the fan curve goes on), power limit 400 W kept"),
        "{sentence}"
    );
    let note = last_critical(&engine);
    assert_eq!(&note.sentence, sentence);
    assert_eq!(
        note.critical,
        CriticalEvent {
            gpu_index: 0,
            xid: 13
        }
    );
    assert_eq!(
        note.put_back,
        vec![
            // Each compute P-state's offset on its own (P0, P2), then the lock.
            Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz: 0
            },
            Setting::GpuClockOffsetAt {
                pstate: 2,
                offset_mhz: 0
            },
            Setting::MemoryClockOffsetAt {
                pstate: 0,
                offset_mhz: 0
            },
            Setting::MemoryClockOffsetAt {
                pstate: 2,
                offset_mhz: 0
            },
            Setting::ResetGpuClocks,
        ]
    );
    let change = tuning.last_change.expect("noted");
    assert_eq!(change.by, "the Xid 13 crash");
    assert!(
        change.what.starts_with("put back GPU clock offset +0 MHz"),
        "{change:?}"
    );
    // The critical event itself still reaches every client, after the notice.
    assert!(matches!(events.last(), Some(EngineEvent::Critical { .. })));

    // The rest of the burst (43 after 13) is told, but changes no setting: the card's last
    // change and its kept crash are still the one that put it back.
    let burst = xid(&mut engine, 43);
    let told: Vec<String> = burst
        .iter()
        .filter_map(|event| match event {
            EngineEvent::Notice {
                notice: Notice::Warning(text),
                ..
            } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        told,
        vec![
            "GPU 0 reported Xid 43 (the GPU stopped processing) right after Xid 13: nothing more to put back."
                .to_string()
        ],
        "every Xid is told, the rest of a burst as that"
    );
    assert!(error_sentences(&burst).is_empty(), "{burst:?}");
    let tuning = engine.tuning(0).expect("GPU 0");
    assert_eq!(tuning.last_change.map(|change| change.by), Some(change.by));
    assert_eq!(tuning.last_critical.map(|note| note.critical.xid), Some(13));
}

#[test]
fn a_session_that_held_the_clocks_ends_marked_by_the_crash_and_one_driving_the_fans_goes_on() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    // A run with a profile: a lowered limit, an offset, a fan curve.
    let run = client(3, "gputune run --profile Quiet");
    engine
        .start_session(
            &run,
            &SessionRequest {
                purpose: SessionPurpose::Run,
                changes: vec![GpuChange {
                    gpu_uuid: uuid.clone(),
                    settings: vec![
                        Setting::PowerLimit {
                            power_limit_mw: 315_000,
                        },
                        Setting::GpuClockOffset { offset_mhz: 150 },
                    ],
                }],
                fan_curves: vec![gputune_formats::tuning::GpuFanCurve {
                    gpu_uuid: uuid.clone(),
                    curve: flat_77(),
                }],
                job_pid: None,
                job: None,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    run_for(&mut engine, &mut sampler, &clock, 2);
    // Beside it, a check's session holding the memory offset.
    let check = client(4, "gputune stability");
    let checked = engine
        .start_session(
            &check,
            &SessionRequest {
                purpose: SessionPurpose::Stability,
                changes: vec![GpuChange {
                    gpu_uuid: uuid.clone(),
                    settings: vec![Setting::MemoryClockOffset { offset_mhz: 800 }],
                }],
                fan_curves: Vec::new(),
                job_pid: None,
                job: None,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let _ = engine.take_events();

    let events = xid(&mut engine, 13);
    let settings = card(&sampler);
    assert_eq!(settings.gpu_clock_offset_mhz, 0, "what the run recorded");
    assert_eq!(
        settings.memory_clock_offset_mhz, 0,
        "what the check recorded"
    );
    assert_eq!(settings.power_limit_mw, 315_000, "the run keeps its limit");
    assert_eq!(settings.fan_manual_pct, vec![Some(77), Some(77)]);
    // The check's session ended, marked by the crash, with what went back for it.
    let ended: Vec<&SessionReport> = events
        .iter()
        .filter_map(|event| match event {
            EngineEvent::SessionEnded { client, report } if *client == check.id => Some(report),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1, "{events:?}");
    let report = ended[0];
    assert_eq!(report.session, checked.session);
    assert_eq!(
        report.critical_event,
        Some(CriticalEvent {
            gpu_index: 0,
            xid: 13
        })
    );
    assert_eq!(
        report.restored[0].restored,
        vec![
            Setting::MemoryClockOffsetAt {
                pstate: 0,
                offset_mhz: 0
            },
            Setting::MemoryClockOffsetAt {
                pstate: 2,
                offset_mhz: 0
            }
        ]
    );
    let lines = gputune_core::tuning::engine::report_lines(report).join(" ");
    assert!(lines.contains("GPU 0 reported Xid 13"), "{lines}");
    assert!(
        lines.contains("Put back on GPU 0: memory clock offset +0 MHz in P0 and P2."),
        "{lines}"
    );
    // The run goes on, holding its fans and limit only; its curve drives the fans.
    let holders = engine.tuning(0).expect("GPU 0").holders;
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].purpose, SessionPurpose::Run);
    assert_eq!(holders[0].controls, vec![Hold::PowerLimit, Hold::Fans]);
    run_for(&mut engine, &mut sampler, &clock, 2);
    assert_eq!(card(&sampler).fan_manual_pct, vec![Some(77), Some(77)]);
    let sentence = &last_critical(&engine).sentence;
    assert!(
        sentence.contains("the GPU clock offset, and the memory clock offset were put back; ended a stability check of gputune stability"),
        "{sentence}"
    );
    assert!(
        sentence.contains("fans kept (the fan curve goes on)"),
        "{sentence}"
    );
    // When the run ends, its limit and fans go back, and nothing of the offset it lost.
    engine.client_gone(run.id);
    let settings = card(&sampler);
    assert_eq!(settings.power_limit_mw, 450_000);
    assert_eq!(settings.gpu_clock_offset_mhz, 0);
    assert_eq!(settings.fan_manual_pct, vec![None, None]);
}

#[test]
fn memory_errors_put_back_the_memory_overclock_only_and_an_nvlink_error_nothing() {
    let (mut engine, sampler, _clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    tune_plainly(&mut engine, &uuid);
    let _ = engine.take_events();

    // NVLink: not a tuning's doing. Nothing is written, and every client is told so.
    let events = xid(&mut engine, 74);
    let settings = card(&sampler);
    assert_eq!(settings.gpu_clock_offset_mhz, 300);
    assert_eq!(settings.memory_clock_offset_mhz, 500);
    let sentences = error_sentences(&events);
    assert_eq!(
        sentences,
        vec!["GPU 0 reported Xid 74 (an NVLink error) at +300 MHz, memory +500 MHz: not a tuning's doing, so nothing was put back; fans kept, power limit 400 W kept.".to_string()]
    );

    // A double-bit ECC error: only the memory overclock goes back.
    let events = xid(&mut engine, 48);
    let settings = card(&sampler);
    assert_eq!(settings.memory_clock_offset_mhz, 0);
    assert_eq!(settings.gpu_clock_offset_mhz, 300);
    assert!(settings.gpu_locked_clocks.is_some());
    let sentences = error_sentences(&events);
    assert!(
        sentences[0].contains("(a double-bit ECC error) at +300 MHz, memory +500 MHz: the memory clock offset was put back"),
        "{sentences:?}"
    );
    assert_eq!(last_critical(&engine).critical.xid, 48);

    // An Xid that finds nothing more to put back right after says so, and keeps the note of
    // the one that did.
    let events = xid(&mut engine, 92);
    assert!(
        events.iter().any(|event| matches!(
            event,
            EngineEvent::Notice {
                notice: Notice::Warning(text),
                ..
            } if text.ends_with("right after Xid 48: nothing more to put back.")
        )),
        "{events:?}"
    );
    assert_eq!(last_critical(&engine).critical.xid, 48);
}

#[test]
fn a_put_back_the_driver_refuses_after_a_crash_waits_in_the_journal_and_goes_back_later() {
    let machine = FakeMachine::new("rtx4090", "");
    let folder = tempfile::tempdir().expect("a state folder");
    let backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let (mut engine, _) = Engine::open(Box::new(backend), &options(&folder), wall())
        .unwrap_or_else(|error| panic!("{error}"));
    let uuid = engine.gpus()[0].identity.uuid.clone();
    engine
        .apply_changes(
            &client(1, "gputune apply"),
            &[GpuChange {
                gpu_uuid: uuid.clone(),
                settings: vec![Setting::GpuClockOffset { offset_mhz: 300 }],
            }],
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let _ = engine.take_events();
    machine.set_shared_faults("no_permission");
    let events = xid(&mut engine, 13);
    let sentence = &error_sentences(&events)[0];
    assert!(
        sentence.contains(
            "at +300 MHz: nothing could be put back yet (not yet: GPU clock offset +0 MHz in P0: "
        ) && sentence.contains("tried again every 10 s)"),
        "{sentence}"
    );
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 300);
    let journal = folder
        .path()
        .join("state")
        .join(format!("journal-{uuid}.json"));
    let journaled = std::fs::read_to_string(&journal).unwrap_or_default();
    assert!(journaled.contains("gpu_clock_offset"), "{journaled}");
    // The driver takes writes again: the next retry puts the offset back.
    machine.set_shared_faults("");
    engine.tick();
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 0);
    assert!(!journal.exists());
}

/// Training runs in P2: an Xid on a card whose P0 and P2 run different plain-applied offsets
/// puts each P-state's own offset back to stock, P2's (the one compute ran at) included.
#[test]
fn an_xid_puts_back_the_offset_of_every_p_state_each_on_its_own() {
    let (mut engine, mut sampler, clock, _folder) = simulated(LoadPattern::Training);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    run_for(&mut engine, &mut sampler, &clock, 2);
    engine
        .apply_changes(
            &client(1, "gputune apply"),
            &[GpuChange {
                gpu_uuid: uuid.clone(),
                settings: vec![
                    Setting::GpuClockOffsetAt {
                        pstate: 0,
                        offset_mhz: 120,
                    },
                    Setting::GpuClockOffsetAt {
                        pstate: 2,
                        offset_mhz: 300,
                    },
                    Setting::MemoryClockOffsetAt {
                        pstate: 2,
                        offset_mhz: 400,
                    },
                ],
            }],
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let before = card(&sampler);
    assert_eq!(
        (before.gpu_clock_offset_in(0), before.gpu_clock_offset_in(2)),
        (120, 300)
    );
    let _ = engine.take_events();

    let events = xid(&mut engine, 13);
    let settings = card(&sampler);
    assert_eq!(
        (
            settings.gpu_clock_offset_in(0),
            settings.gpu_clock_offset_in(2),
            settings.memory_clock_offset_in(2)
        ),
        (0, 0, 0),
        "every P-state's offset back to stock"
    );
    let sentences = error_sentences(&events);
    assert_eq!(sentences.len(), 1, "{sentences:?}");
    assert!(
        sentences[0].contains("at +300 MHz"),
        "the offset compute ran at (P2's) is named: {}",
        sentences[0]
    );
    assert!(
        last_critical(&engine)
            .put_back
            .contains(&Setting::GpuClockOffsetAt {
                pstate: 2,
                offset_mhz: 0
            }),
        "{:?}",
        last_critical(&engine).put_back
    );
}
