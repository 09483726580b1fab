//! Clock offsets per P-state, through the real NVML code path on the fake library: an offset
//! for compute reaches P2 (where GeForce cards run CUDA) on a card whose P-states each have
//! their own offset and on one that links them (written once there); every P-state's offset
//! reads back; a driver that cannot list P-states gets P0's, as before; and the engine puts
//! each P-state back to its own offset when a trial is reverted or a session ends.

use std::sync::Arc;
use std::time::Duration;

use common::FakeMachine;
use nvidia_ml_fake::{FakeState, save_state};

use crate::common;
use gputune_core::clock::{WallClock, wall_clock_ms};
use gputune_core::device::Backend;
use gputune_core::device::gate::validate;
use gputune_core::device::nvml::NvmlBackend;
use gputune_core::device::sim::{LoadPattern, SimMachine, SimScenario};
use gputune_core::tuning::engine::{ClientInfo, Engine, EngineOptions, Ownership};
use gputune_formats::card::{DeviceError, PstateOffset, Setting};
use gputune_formats::tuning::{GpuChange, SessionPurpose, SessionRequest, TrialRequest};

/// A fake RTX 4090 under training whose P-states are linked or not, with P0 and P2 at the
/// offsets given (as another tool may have left them).
fn card(linked: bool, p0_mhz: i32, p2_mhz: i32) -> FakeMachine {
    let machine = FakeMachine::new("rtx4090", "");
    let mut sim = SimMachine::new(SimScenario::Rtx4090, LoadPattern::Training, wall_clock_ms());
    let gpu = &mut sim.gpus[0];
    gpu.spec.offset_pstates_linked = linked;
    gpu.settings.gpu_clock_offset_mhz = p0_mhz;
    gpu.settings.pstate_gpu_clock_offsets_mhz.insert(2, p2_mhz);
    save_state(machine.state_path(), &FakeState::new(sim))
        .unwrap_or_else(|error| panic!("the fake's state is written: {error}"));
    machine
}

fn open(machine: &FakeMachine) -> NvmlBackend {
    NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"))
}

fn apply(backend: &mut NvmlBackend, setting: Setting) -> Result<(), DeviceError> {
    let constraints = backend.constraints(0)?;
    let validated =
        validate(&constraints, setting).unwrap_or_else(|error| panic!("{setting:?}: {error}"));
    backend.apply(0, &validated)
}

/// The GPU clock offset writes the fake driver saw, from `from` on.
fn offset_writes(machine: &FakeMachine, from: usize) -> Vec<Setting> {
    machine.write_log()[from..]
        .iter()
        .map(|write| write.setting)
        .filter(|setting| matches!(setting, Setting::GpuClockOffsetAt { .. }))
        .collect()
}

fn at(pstate: u32, offset_mhz: i32) -> Setting {
    Setting::GpuClockOffsetAt { pstate, offset_mhz }
}

fn offsets(pairs: &[(u32, i32)]) -> Vec<PstateOffset> {
    pairs
        .iter()
        .map(|&(pstate, offset_mhz)| PstateOffset { pstate, offset_mhz })
        .collect()
}

#[test]
fn an_offset_reaches_p2_where_the_card_computes_on_independent_p_states() {
    let machine = card(false, 0, 0);
    let mut backend = open(&machine);
    apply(&mut backend, Setting::GpuClockOffset { offset_mhz: 150 })
        .unwrap_or_else(|error| panic!("{error}"));
    let settings = machine.settings(0);
    assert_eq!(settings.gpu_clock_offset_in(2), 150, "P2, where CUDA runs");
    assert_eq!(settings.gpu_clock_offset_in(0), 150);
    assert_eq!(offset_writes(&machine, 0), vec![at(0, 150), at(2, 150)]);
    let current = backend
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(current.gpu_clock_offset_mhz, Some(150));
    assert_eq!(
        current.gpu_clock_offsets,
        offsets(&[(0, 150), (2, 150), (8, 0)])
    );
}

#[test]
fn an_offset_is_written_once_where_the_card_links_p0_and_p2() {
    let machine = card(true, 0, 0);
    let mut backend = open(&machine);
    apply(&mut backend, Setting::GpuClockOffset { offset_mhz: 90 })
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(offset_writes(&machine, 0), vec![at(0, 90)], "one write");
    let settings = machine.settings(0);
    assert_eq!(settings.gpu_clock_offset_in(2), 90, "P2 followed P0");
    let current = backend
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        current.gpu_clock_offsets,
        offsets(&[(0, 90), (2, 90), (8, 0)])
    );
    // One P-state's own write moves its linked twin too.
    apply(&mut backend, at(2, -30)).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(machine.settings(0).gpu_clock_offset_in(0), -30);
}

#[test]
fn every_p_state_s_offset_and_range_is_read() {
    let machine = card(false, 0, 45);
    let mut backend = open(&machine);
    let constraints = backend
        .constraints(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let ranges: Vec<(u32, i32, i32)> = constraints
        .gpu_clock_offset_pstates
        .iter()
        .map(|range| (range.pstate, range.min_mhz, range.max_mhz))
        .collect();
    assert_eq!(ranges, vec![(0, -1000, 1000), (2, -1000, 1000), (8, 0, 0)]);
    let current = backend
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        current.gpu_clock_offsets,
        offsets(&[(0, 0), (2, 45), (8, 0)])
    );
    assert_eq!(
        current.gpu_clock_offset_mhz,
        Some(45),
        "the offset compute runs at is P2's"
    );
    // A P-state without room takes nothing but its 0.
    assert!(validate(&constraints, at(8, 15)).is_err());
    assert!(
        validate(&constraints, at(5, 0)).is_err(),
        "no P5 on this card"
    );
}

#[test]
fn a_driver_that_cannot_list_p_states_gets_p0_as_before() {
    let machine = FakeMachine::new("rtx4090", "pstates_not_listed");
    let mut backend = open(&machine);
    apply(&mut backend, Setting::GpuClockOffset { offset_mhz: 60 })
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(offset_writes(&machine, 0), vec![at(0, 60)]);
    let current = backend
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(current.gpu_clock_offsets, offsets(&[(0, 60)]));
    assert_eq!(current.gpu_clock_offset_mhz, Some(60));
}

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

fn engine_on(machine: &FakeMachine, folder: &tempfile::TempDir) -> Engine {
    let options = EngineOptions {
        state_dir: folder.path().join("state"),
        record_dir: Some(folder.path().join("state")),
        ownership: Ownership::Daemon,
        call_timeout: Duration::from_secs(30),
        owner_label: "the test's engine".to_string(),
        box_journal_dir: None,
    };
    let (engine, _) = Engine::open(Box::new(open(machine)), &options, Arc::new(WallClock))
        .unwrap_or_else(|error| panic!("{error}"));
    engine
}

#[test]
fn a_trial_s_revert_puts_each_p_state_back_to_its_own_offset() {
    let machine = card(false, 0, 60);
    let folder = tempfile::tempdir().expect("a state folder");
    let mut engine = engine_on(&machine, &folder);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let window = client(1, "the gputune window");
    engine
        .start_trial(
            &window,
            &TrialRequest {
                gpu_uuid: uuid.clone(),
                settings: vec![Setting::GpuClockOffset { offset_mhz: 150 }],
                duration_s: 60,
                baseline_s: 0,
            },
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let tried = machine.settings(0);
    assert_eq!(
        (tried.gpu_clock_offset_in(0), tried.gpu_clock_offset_in(2)),
        (150, 150)
    );
    let writes_before = machine.write_log().len();
    let ended = engine
        .finish_trial(&window, &uuid, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(!ended.failed, "{:?}", ended.message);
    let back = machine.settings(0);
    assert_eq!(
        (back.gpu_clock_offset_in(0), back.gpu_clock_offset_in(2)),
        (0, 60),
        "each P-state has its own offset back"
    );
    assert_eq!(
        offset_writes(&machine, writes_before),
        vec![at(0, 0), at(2, 60)]
    );
    let in_force = engine
        .tuning(0)
        .map(|tuning| tuning.in_force.clone())
        .unwrap_or_default();
    assert_eq!(in_force.gpu_clock_offset_mhz, Some(60));
}

#[test]
fn a_session_s_put_back_restores_each_p_state_on_a_linked_card_too() {
    for linked in [false, true] {
        let (p0_mhz, p2_mhz) = if linked { (30, 30) } else { (-15, 45) };
        let machine = card(linked, p0_mhz, p2_mhz);
        let folder = tempfile::tempdir().expect("a state folder");
        let mut engine = engine_on(&machine, &folder);
        let uuid = engine.gpus()[0].identity.uuid.clone();
        let run = client(3, "gputune run");
        engine
            .start_session(
                &run,
                &SessionRequest {
                    purpose: SessionPurpose::Run,
                    changes: vec![GpuChange {
                        gpu_uuid: uuid.clone(),
                        settings: vec![Setting::GpuClockOffset { offset_mhz: 120 }],
                    }],
                    fan_curves: Vec::new(),
                    job_pid: None,
                    job: None,
                },
            )
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(machine.settings(0).gpu_clock_offset_in(2), 120, "{linked}");
        let journal = std::fs::read_to_string(machine_journal(&folder, &uuid))
            .unwrap_or_else(|error| panic!("the journal is written: {error}"));
        assert!(journal.contains("gpu_clock_offset_at"), "{journal}");
        engine.client_gone(run.id);
        let back = machine.settings(0);
        assert_eq!(
            (back.gpu_clock_offset_in(0), back.gpu_clock_offset_in(2)),
            (p0_mhz, p2_mhz),
            "linked: {linked}"
        );
        drop(engine);
        drop(machine);
    }
}

fn machine_journal(folder: &tempfile::TempDir, uuid: &str) -> std::path::PathBuf {
    folder
        .path()
        .join("state")
        .join(format!("journal-{uuid}.json"))
}
