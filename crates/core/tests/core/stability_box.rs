//! The box check (`stability::together`) on the simulator's 8-GPU box, through an engine in
//! this process: the cards' pulse edges line up, one session of purpose `box_check` holds the
//! cards, and an injected wrong result on one card names that card, the step, and a clock cap
//! proven by rerunning the step.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gputune_core::device::sim::supply::{SupplyModel, SupplyWatch};
use gputune_core::device::sim::{LoadPattern, SimOptions, SimScenario};
use gputune_core::device::{BackendChoice, BackendOptions};
use gputune_core::folders::Folders;
use gputune_core::service::client::{
    ConnectOptions, SocketChoice, TuningClient, connect_in_process,
};
use gputune_core::stability::simulated::{SimFaults, SimulatedDevice};
use gputune_core::stability::together::{BoxCheck, BoxPlan, BoxProgress};
use gputune_core::stability::{
    CardConditions, ComputeDevice, ComputeError, ComputeSetup, VramPattern,
};
use gputune_formats::profile::Verdict;
use gputune_formats::protocol::{Request, Response, Snapshot};
use gputune_formats::reports::box_check::{BoxCheckReport, BoxStep};
use gputune_formats::reports::stability::{Checked, Prepared};
use gputune_formats::tuning::SessionPurpose;

pub fn client8(folder: &tempfile::TempDir) -> TuningClient {
    let state = folder.path().join("state");
    let options = ConnectOptions {
        backend: BackendOptions {
            choice: BackendChoice::Sim,
            nvml_library_path: None,
            sim: SimOptions {
                scenario: SimScenario::EightRtx4090,
                load: LoadPattern::Training,
            },
        },
        socket: SocketChoice::None,
        folders: Folders {
            state_dir: Some(state.clone()),
            record_dir: Some(state),
            config_dir: Some(folder.path().join("config")),
        },
        label: "gputune stability --together (test)".to_string(),
    };
    connect_in_process(&options).unwrap_or_else(|error| panic!("the engine starts: {error}"))
}

pub fn snapshot(client: &mut TuningClient) -> Snapshot {
    match client.request(Request::Snapshot) {
        Ok(Response::Snapshot(snapshot)) => *snapshot,
        other => panic!("a snapshot: {other:?}"),
    }
}

/// A device that does no arithmetic: it takes the time a simulated RTX 4090 takes for the work
/// (0.83 ms a 4096³ pass) and finds every result right. The alignment test measures the
/// engine's edges, not the CPU's sample work (the simulated device's 64³ sample costs about
/// 3.5 ms of CPU a batch in a debug build, and eight of them every 20 ms starve a 2-core CI
/// machine).
struct PacedDevice {
    setup: Option<ComputeSetup>,
}

impl ComputeDevice for PacedDevice {
    fn prepare(&mut self, setup: &ComputeSetup, _: &[u32]) -> Result<Prepared, ComputeError> {
        self.setup = Some(*setup);
        Ok(Prepared {
            device_name: "paced".to_string(),
            runtime: "paced (test)".to_string(),
            vram_tested_bytes: 0,
        })
    }

    fn gemm(&mut self, passes: u32) -> Result<Checked, ComputeError> {
        let setup = self
            .setup
            .ok_or_else(|| ComputeError::Unavailable("unprepared".into()))?;
        let flop = setup.gemm_flop() * f64::from(passes);
        let elapsed_s = flop / 165e12;
        std::thread::sleep(Duration::from_secs_f64(elapsed_s));
        Ok(Checked {
            results: setup.gemm_results() * u64::from(passes),
            wrong: 0,
            flop,
            bytes: 0,
            elapsed_s,
        })
    }

    fn fma(&mut self) -> Result<Checked, ComputeError> {
        Err(ComputeError::Unavailable(
            "a box check runs no FMA chains".into(),
        ))
    }

    fn vram(&mut self, _: VramPattern) -> Result<Checked, ComputeError> {
        Err(ComputeError::Unavailable(
            "a box check tests no VRAM".into(),
        ))
    }

    fn observe(&mut self, _: CardConditions) {}
}

/// Every card's plan, with the simulated devices and a handle on each one's faults.
pub fn plan(
    snapshot: &Snapshot,
    duration_s: f64,
) -> (BoxPlan, Vec<Box<dyn ComputeDevice>>, Vec<SimFaults>) {
    let mut devices: Vec<Box<dyn ComputeDevice>> = Vec::new();
    let mut faults = Vec::new();
    for gpu in &snapshot.gpus {
        let device = SimulatedDevice::for_gpu(&gpu.identity).expect("the simulator's card");
        faults.push(device.faults());
        devices.push(Box::new(device));
    }
    let indices: Vec<u32> = (0..snapshot.gpus.len() as u32).collect();
    let plan = BoxPlan::of(snapshot, &indices, &[], false, duration_s, None)
        .unwrap_or_else(|error| panic!("{error}"));
    (plan, devices, faults)
}

/// Drives `check` to its report, calling `during` with the seconds since the load began.
pub fn finish(
    client: &mut TuningClient,
    check: &mut BoxCheck,
    mut during: impl FnMut(&mut TuningClient, &BoxProgress),
) -> BoxCheckReport {
    client
        .request(Request::Subscribe { interval_ms: 100 })
        .expect("subscribed");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut looked = Instant::now();
    loop {
        if let Ok(Some(event)) = client.next_event(Duration::from_millis(2)) {
            check.take_event(&event);
        }
        if looked.elapsed() >= Duration::from_millis(20) {
            looked = Instant::now();
            during(client, &check.progress());
        }
        if let Some(report) = check.tick(client) {
            return report.clone();
        }
        assert!(Instant::now() < deadline, "the box check did not end");
    }
}

#[test]
fn eight_cards_pulse_in_phase_under_one_box_check_session() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let mut client = client8(&folder);
    let before = snapshot(&mut client);
    assert_eq!(before.gpus.len(), 8);
    let (plan, _, _) = plan(&before, 1.0);
    let devices: Vec<Box<dyn ComputeDevice>> = (0..8)
        .map(|_| Box::new(PacedDevice { setup: None }) as Box<dyn ComputeDevice>)
        .collect();
    let mut check = BoxCheck::start(&mut client, &plan, devices).expect("the box check starts");
    let mut holders_seen = false;
    let report = finish(&mut client, &mut check, |client, progress| {
        if progress.elapsed_s > 0.2 && !holders_seen {
            let now = snapshot(client);
            holders_seen = now.tunings.iter().all(|tuning| {
                tuning
                    .holders
                    .iter()
                    .any(|holder| holder.purpose == SessionPurpose::BoxCheck)
            });
        }
    });
    assert!(holders_seen, "one box-check session holds every card");
    assert_eq!(report.verdict, Verdict::Stable, "{}", report.sentence);
    assert_eq!(report.cards.len(), 8);
    assert!(report.journaled);
    assert_eq!(report.steps.len(), 6);
    assert_eq!(report.steps[5].step, BoxStep::Full);
    // Every edge that all eight cards began: its spread (the last card's start less the
    // first's) within one tick of the CLI's loop (20 ms) at the median (a starved CI machine
    // may wake one worker late now and then). The figures, measured alone, are in docs/box.md.
    let mut by_edge: std::collections::BTreeMap<u64, Vec<Instant>> = Default::default();
    for card in check.edges() {
        for begun in card {
            by_edge.entry(begun.edge).or_default().push(begun.began);
        }
    }
    let mut spreads: Vec<f64> = by_edge
        .values()
        .filter(|began| began.len() == 8)
        .map(|began| {
            let first = began.iter().min().copied().unwrap_or_else(Instant::now);
            let last = began.iter().max().copied().unwrap_or(first);
            last.duration_since(first).as_secs_f64() * 1000.0
        })
        .collect();
    spreads.sort_by(f64::total_cmp);
    assert!(spreads.len() >= 3, "{:?}", report.steps);
    assert!(
        spreads[spreads.len() / 2] < 20.0,
        "edges within one tick: {spreads:?}"
    );
    eprintln!(
        "box check of 8 simulated cards: edges per step {:?}, widest spread per step {spreads:?} ms; {}",
        report
            .steps
            .iter()
            .map(|step| step.edges)
            .collect::<Vec<_>>(),
        report.sentence
    );
    assert!(report.steps[5].box_power_mean_w.is_some());
    let after = snapshot(&mut client);
    assert!(after.tunings.iter().all(|tuning| tuning.holders.is_empty()));
    assert!(
        !folder.path().join("state").join("box-check.json").exists(),
        "its end removed the box-check journal"
    );
}

#[test]
fn a_wrong_result_on_one_card_names_it_and_a_rerun_proves_a_clock_cap() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let mut client = client8(&folder);
    let before = snapshot(&mut client);
    let (plan, devices, faults) = plan(&before, 1.0);
    let mut check = BoxCheck::start(&mut client, &plan, devices).expect("the box check starts");
    let mut injected: Option<Instant> = None;
    let mut detected_after: Option<Duration> = None;
    let report = finish(&mut client, &mut check, |_, progress| {
        if injected.is_none() && progress.elapsed_s > 0.25 {
            faults[3].wrong_gemm_values(5);
            injected = Some(Instant::now());
        }
        if let Some(at) = injected
            && detected_after.is_none()
            && progress.cards[3].activity == "finished"
        {
            detected_after = Some(at.elapsed());
        }
    });
    eprintln!("a wrong result on GPU 3 was found {detected_after:?} after it was injected");
    assert_eq!(report.verdict, Verdict::Unstable, "{}", report.sentence);
    let failure = report.first_failure.clone().expect("a first failure");
    assert_eq!(failure.gpu_index, 3, "{}", report.sentence);
    assert!(!failure.all_cards_lost);
    assert!(failure.step.is_some(), "the step is named: {failure:?}");
    assert!(
        failure.finding.contains("wrong GEMM"),
        "{}",
        failure.finding
    );
    assert!(
        report.sentence.starts_with("GPU 3 failed first"),
        "{}",
        report.sentence
    );
    assert_eq!(report.cards[3].verdict, Verdict::Unstable);
    assert!(
        report
            .cards
            .iter()
            .enumerate()
            .all(|(index, card)| index == 3 || card.verdict != Verdict::Unstable),
        "the others were stopped (or had just completed)"
    );
    let recommendation = report.recommendation.clone().expect("a clock cap");
    assert!(recommendation.confirmed, "{recommendation:?}");
    assert!(
        recommendation.how.contains("passed"),
        "{}",
        recommendation.how
    );
    assert!(
        report.sentence.contains("Try a clock cap of"),
        "{}",
        report.sentence
    );
    eprintln!("wrong result on GPU 3: {}", report.sentence);
    let after = snapshot(&mut client);
    assert!(after.tunings.iter().all(|tuning| tuning.holders.is_empty()));
    assert!(
        after.tunings.iter().all(|tuning| !matches!(
            tuning.in_force.gpu_clock_lock,
            gputune_formats::tuning::ClockLockInForce::Locked { .. }
        )),
        "the rerun's cap was put back"
    );
}

#[test]
fn a_supply_that_trips_loses_every_card_at_once_and_a_cap_is_worked_out_from_the_trip() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let mut client = client8(&folder);
    let before = snapshot(&mut client);
    let (plan, _, _) = plan(&before, 1.0);
    // A supply too small for this box: the first bursts trip it wherever they fall (the
    // in-phase arithmetic itself is `device::sim::supply`'s unit tests').
    let small = SupplyModel {
        rating_w: 2000.0,
        ..SupplyModel::of(SimScenario::EightRtx4090).expect("the box's supply")
    };
    let supply = Arc::new(SupplyWatch::new(small, 8));
    let devices: Vec<Box<dyn ComputeDevice>> = before
        .gpus
        .iter()
        .enumerate()
        .map(|(card, gpu)| {
            let device = SimulatedDevice::for_gpu(&gpu.identity).expect("the simulator's card");
            Box::new(device.with_supply(Arc::clone(&supply), card)) as Box<dyn ComputeDevice>
        })
        .collect();
    let mut check = BoxCheck::start(&mut client, &plan, devices).expect("the box check starts");
    let report = finish(&mut client, &mut check, |_, _| {});
    assert_eq!(report.verdict, Verdict::Unstable, "{}", report.sentence);
    let failure = report.first_failure.clone().expect("a first failure");
    assert!(failure.all_cards_lost, "{failure:?}");
    assert!(
        failure.finding.contains("fallen off the bus"),
        "{}",
        failure.finding
    );
    assert!(
        report.sentence.starts_with("Every card failed at once"),
        "{}",
        report.sentence
    );
    let recommendation = report.recommendation.clone().expect("a cap from the trip");
    assert!(!recommendation.confirmed, "not proven: the machine is down");
    assert!(recommendation.clock_cap_mhz < 2700, "{recommendation:?}");
    eprintln!("supply trip: {}", report.sentence);
    assert!(
        !folder.path().join("state").join("box-check.json").exists(),
        "the simulator's machine stayed up here: the check's end removed its journal"
    );
}

/// A service in this process on the simulator's 8-GPU box, a handle on its machine, and a
/// client that may not change settings (the check runs without a session, as a user's).
fn service8(
    folder: &tempfile::TempDir,
) -> (
    gputune_core::service::Service,
    gputune_core::device::sim::SimBackend,
    TuningClient,
) {
    use gputune_core::device::OpenedBackend;
    use gputune_core::device::sim::SimBackend;
    use gputune_core::service::{Service, ServiceOptions};
    use gputune_core::tuning::engine::{EngineOptions, Ownership};
    let sim = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        load: LoadPattern::Training,
    });
    let machine = sim.share();
    let service = Service::start(
        OpenedBackend {
            backend: Box::new(sim),
            fallback_reason: None,
        },
        ServiceOptions {
            engine: EngineOptions {
                state_dir: folder.path().join("state"),
                record_dir: Some(folder.path().join("state")),
                ownership: Ownership::InProcess,
                call_timeout: Duration::from_secs(10),
                owner_label: "the test".to_string(),
                box_journal_dir: None,
            },
            daemon: false,
            boot_defaults_dir: None,
            boot_profile: None,
            write_group: None,
            history: None,
            jobs_dir: None,
            job_price: None,
        },
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let client = gputune_core::service::client::attach(&service, "box check (test)")
        .unwrap_or_else(|error| panic!("{error}"));
    (service, machine, client)
}

#[test]
fn an_xid_on_one_card_names_it_first() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let (_service, machine, mut client) = service8(&folder);
    let before = snapshot(&mut client);
    let (plan, devices, _) = plan(&before, 1.0);
    let mut check = BoxCheck::start(&mut client, &plan, devices).expect("the box check starts");
    let mut injected: Option<Instant> = None;
    let mut detected_after: Option<Duration> = None;
    let report = finish(&mut client, &mut check, |_, progress| {
        if injected.is_none() && progress.elapsed_s > 0.25 {
            machine
                .inject_xid(5)
                .unwrap_or_else(|error| panic!("{error}"));
            injected = Some(Instant::now());
        }
        if let Some(at) = injected
            && detected_after.is_none()
            && progress.cards[5].activity == "finished"
        {
            detected_after = Some(at.elapsed());
        }
    });
    eprintln!("an Xid on GPU 5 was found {detected_after:?} after it was raised");
    assert!(!report.journaled);
    let failure = report.first_failure.clone().expect("a first failure");
    assert_eq!(failure.gpu_index, 5, "{}", report.sentence);
    assert!(failure.finding.starts_with("Xid"), "{}", failure.finding);
}

#[test]
fn a_machine_that_goes_down_mid_check_loses_every_card_and_a_cap_comes_from_the_trip() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let (_service, machine, mut client) = service8(&folder);
    let before = snapshot(&mut client);
    let (plan, devices, _) = plan(&before, 1.0);
    let mut check = BoxCheck::start(&mut client, &plan, devices).expect("the box check starts");
    let mut down = false;
    let report = finish(&mut client, &mut check, |_, progress| {
        if !down && progress.elapsed_s > 0.25 {
            machine.go_down("the simulated power supply tripped");
            down = true;
        }
    });
    let failure = report.first_failure.clone().expect("a first failure");
    assert!(failure.all_cards_lost, "{}", report.sentence);
    assert!(
        failure.finding.contains("stopped answering"),
        "{}",
        failure.finding
    );
    let recommendation = report.recommendation.clone().expect("a cap from the trip");
    assert!(!recommendation.confirmed);
    eprintln!("machine down: {}", report.sentence);
}
