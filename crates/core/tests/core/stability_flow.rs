//! What a check does around the card, through an engine in this process on the simulator: a
//! busy card (another check or scan, other programs computing) is refused before anything is
//! measured, and a CUDA fault at the card's own offset and lock puts the offsets and locks back
//! to stock through the engine, the fans left as they were.

use std::time::{Duration, Instant};

use gputune_core::device::sim::{LoadPattern, SimOptions, SimScenario};
use gputune_core::device::{BackendChoice, BackendOptions};
use gputune_core::folders::Folders;
use gputune_core::service::client::{
    ConnectOptions, SocketChoice, TuningClient, connect_in_process,
};
use gputune_core::stability::busy::OtherWork;
use gputune_core::stability::check::{CardCheck, CheckSetup};
use gputune_core::stability::rounds::CheckOptions;
use gputune_core::stability::simulated::SimulatedDevice;
use gputune_formats::card::{GpuProcess, ProcessKind, Setting};
use gputune_formats::protocol::{Request, Response, Snapshot};
use gputune_formats::reports::stability::LoadShape;
use gputune_formats::reports::stability::{Ending, Finding};
use gputune_formats::tuning::{ClockLockInForce, Hold};
use gputune_formats::tuning::{GpuChange, Holder, SessionPurpose};
use gputune_formats::{profile::Verdict, reports::stability::CheckReport};

fn client(folder: &tempfile::TempDir, load: LoadPattern) -> TuningClient {
    let state = folder.path().join("state");
    let options = ConnectOptions {
        backend: BackendOptions {
            choice: BackendChoice::Sim,
            nvml_library_path: None,
            sim: SimOptions {
                scenario: SimScenario::Rtx4090,
                load,
            },
        },
        socket: SocketChoice::None,
        folders: Folders {
            state_dir: Some(state.clone()),
            record_dir: Some(state),
            config_dir: Some(folder.path().join("config")),
        },
        label: "gputune stability (test)".to_string(),
    };
    connect_in_process(&options).unwrap_or_else(|error| panic!("the engine starts: {error}"))
}

fn snapshot(client: &mut TuningClient) -> Snapshot {
    match client.request(Request::Snapshot) {
        Ok(Response::Snapshot(snapshot)) => *snapshot,
        other => panic!("a snapshot: {other:?}"),
    }
}

fn device(snapshot: &Snapshot) -> SimulatedDevice {
    SimulatedDevice::for_gpu(&snapshot.gpus[0].identity).expect("the simulator's card")
}

/// Drives `check` to its report.
fn finish(client: &mut TuningClient, mut check: CardCheck) -> CheckReport {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(event)) = client.next_event(Duration::from_millis(20)) {
            check.take_event(&event);
        }
        if let Some(report) = check.tick(client) {
            return report.clone();
        }
        assert!(Instant::now() < deadline, "the check did not end");
    }
}

#[test]
fn a_cuda_fault_at_the_cards_own_offset_and_lock_puts_them_back_and_keeps_the_fans() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let mut client = client(&folder, LoadPattern::Idle);
    let uuid = snapshot(&mut client).gpus[0].identity.uuid.clone();
    let applied = client.request(Request::Apply {
        changes: vec![GpuChange {
            gpu_uuid: uuid,
            settings: vec![
                Setting::LockGpuClocks {
                    min_mhz: 210,
                    max_mhz: 2520,
                },
                Setting::GpuClockOffset { offset_mhz: 300 },
                Setting::FanSpeed {
                    fan_index: 0,
                    speed_pct: 80,
                },
            ],
        }],
    });
    assert!(
        matches!(applied, Ok(Response::Applied { .. })),
        "{applied:?}"
    );
    let before = snapshot(&mut client);
    let fans_before = before.tunings[0].in_force.fans.clone();
    let device = device(&before);
    device.faults().fail_next_call();
    let other_work = OtherWork::default();
    let setup = CheckSetup {
        settings: &[],
        fan_curve: None,
        other_work: &other_work,
    };
    let options = CheckOptions::new(30.0, LoadShape::Both).expect("options");
    let check = CardCheck::start(
        &mut client,
        &before.gpus[0],
        &before.tunings[0],
        &setup,
        options,
        Box::new(device),
    )
    .unwrap_or_else(|error| panic!("the check starts: {error}"));
    let report = finish(&mut client, check);
    assert_eq!(report.verdict, Verdict::Unstable);
    assert!(
        matches!(
            report.result.ending,
            Ending::Unstable {
                finding: Finding::Fault { .. }
            }
        ),
        "{:?}",
        report.result.ending
    );
    let said = report.put_back.join(" ");
    assert!(
        said.contains("A CUDA fault at the card's own settings")
            && said.contains("put back to stock")
            && said.contains("the fans were left as they are"),
        "{said}"
    );
    assert!(report.put_back_complete);
    let after = snapshot(&mut client);
    let in_force = &after.tunings[0].in_force;
    assert_eq!(in_force.gpu_clock_offset_mhz, Some(0));
    assert_eq!(in_force.gpu_clock_lock, ClockLockInForce::Unlocked);
    assert_eq!(in_force.fans, fans_before, "the fans stay as they were");
}

#[test]
fn a_check_at_the_cards_own_settings_is_seen_among_its_holders_and_a_second_is_refused() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let mut client = client(&folder, LoadPattern::Idle);
    let before = snapshot(&mut client);
    let other_work = OtherWork::default();
    let setup = CheckSetup {
        settings: &[],
        fan_curve: None,
        other_work: &other_work,
    };
    let options = CheckOptions::new(60.0, LoadShape::Both).expect("options");
    let mut first = CardCheck::start(
        &mut client,
        &before.gpus[0],
        &before.tunings[0],
        &setup,
        options,
        Box::new(device(&before)),
    )
    .unwrap_or_else(|error| panic!("the check starts: {error}"));
    let during = snapshot(&mut client);
    let holders = &during.tunings[0].holders;
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].purpose, SessionPurpose::Stability);
    assert!(holders[0].controls.is_empty(), "it holds nothing");
    let second = CardCheck::start(
        &mut client,
        &during.gpus[0],
        &during.tunings[0],
        &setup,
        options,
        Box::new(device(&during)),
    );
    let Err(refused) = second else {
        panic!("a second check started");
    };
    assert!(
        refused.starts_with("GPU 0 is busy: a stability check of gputune stability (test)")
            && refused.ends_with("The check did not start; nothing was measured."),
        "{refused}"
    );
    first.stop(&mut client, "the test ends");
    let report = finish(&mut client, first);
    assert_eq!(report.verdict, Verdict::Stopped);
    assert!(report.put_back.is_empty(), "{:?}", report.put_back);
    assert!(snapshot(&mut client).tunings[0].holders.is_empty());
}

#[test]
fn other_programs_computing_on_the_card_are_named_and_only_force_goes_on_beside_them() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let mut client = client(&folder, LoadPattern::Training);
    let snapshot = snapshot(&mut client);
    let training = GpuProcess {
        pid: 4242,
        kind: ProcessKind::Compute,
        used_memory_bytes: Some(20_480 << 20),
        user: Some("alice".to_string()),
        command: Some("python train.py".to_string()),
        exited: false,
        ancestor_pids: Vec::new(),
    };
    let desktop = GpuProcess {
        pid: 1000,
        kind: ProcessKind::Graphics,
        used_memory_bytes: Some(300 << 20),
        user: Some("alice".to_string()),
        command: Some("Xorg".to_string()),
        exited: false,
        ancestor_pids: Vec::new(),
    };
    let mut other_work = OtherWork {
        processes: Some(vec![training.clone(), desktop.clone()]),
        force: false,
        force_hint: ", or check beside them with --force".to_string(),
    };
    let tuning = &snapshot.tunings[0];
    let refused = other_work
        .refusal(0, tuning, "check")
        .expect_err("refused beside a training job");
    assert!(
        refused.contains(
            "1 other program computes on it (pid 4242 (alice) python train.py, 20480 MiB)"
        ) && refused.contains("Stop them first, or check beside them with --force."),
        "{refused}"
    );
    other_work.force = true;
    assert_eq!(other_work.refusal(0, tuning, "check"), Ok(vec![training]));
    // A desktop's graphics work is no obstacle.
    other_work.processes = Some(vec![desktop]);
    other_work.force = false;
    assert_eq!(other_work.refusal(0, tuning, "check"), Ok(Vec::new()));
    // Another client's scan is refused even with force.
    let mut scanned = tuning.clone();
    scanned.holders.push(Holder {
        session: 9,
        controls: vec![Hold::GpuClockLock, Hold::GpuClockOffset],
        purpose: SessionPurpose::Scan,
        by: "gputune scan (pid 77, user bob)".to_string(),
        client: 5,
        since_ms: 0,
        trial_ends_at_ms: None,
        job_pid: None,
        energy_at_start_mj: None,
        job: None,
    });
    other_work.force = true;
    let refused = other_work
        .refusal(0, &scanned, "check")
        .expect_err("refused during a scan");
    assert!(
        refused.starts_with("GPU 0 is busy: an undervolt scan of gputune scan (pid 77, user bob)"),
        "{refused}"
    );
}
