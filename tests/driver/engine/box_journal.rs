//! The box-check journal, on the simulator's 8-GPU box and a manual clock: written before the
//! load, kept when the machine goes down (its supply tripped by eight cards pulsing in phase),
//! and said at the next start after the reboot (a fresh machine, the same state folder); a
//! damaged, huge, symbolically or hard linked file there is moved aside unread.

use super::*;
use gputune_core::device::sim::supply::{SupplyModel, SupplyWatch};
use gputune_core::tuning::engine::{BOX_JOURNAL_FILE, WENT_DOWN};
use gputune_formats::card::{DeviceError, Telemetry};
use gputune_formats::reports::box_check::BoxJournal;

pub(super) const START_MS: u64 = 1_700_000_000_000;

pub(super) fn eight(clock: &ManualClock) -> SimBackend {
    SimBackend::with_clock(
        &SimOptions {
            scenario: SimScenario::EightRtx4090,
            load: LoadPattern::Training,
        },
        Box::new(clock.clone()),
    )
}

pub(super) fn open(
    backend: SimBackend,
    folder: &tempfile::TempDir,
    clock: &ManualClock,
) -> (Engine, Vec<Notice>) {
    Engine::open(Box::new(backend), &options(folder), Arc::new(clock.clone()))
        .unwrap_or_else(|error| panic!("{error}"))
}

/// An engine without the daemon (a gputune process on its own), on `folder`.
pub(super) fn open_in_process(
    folder: &tempfile::TempDir,
    clock: &ManualClock,
) -> (Engine, Vec<Notice>) {
    let options = EngineOptions {
        ownership: Ownership::InProcess,
        ..options(folder)
    };
    Engine::open(Box::new(eight(clock)), &options, Arc::new(clock.clone()))
        .unwrap_or_else(|error| panic!("{error}"))
}

pub(super) fn readings(sampler: &mut SimBackend) -> Vec<Result<Telemetry, DeviceError>> {
    (0..8).map(|index| sampler.telemetry(index)).collect()
}

pub(super) fn journal_path(folder: &tempfile::TempDir) -> std::path::PathBuf {
    folder.path().join("state").join(BOX_JOURNAL_FILE)
}

pub(super) fn set_aside(folder: &tempfile::TempDir) -> Vec<String> {
    std::fs::read_dir(folder.path().join("state"))
        .unwrap_or_else(|error| panic!("{error}"))
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().to_string())
        .filter(|name| name.starts_with("box-check.json."))
        .collect()
}

pub(super) fn box_check(engine: &mut Engine) -> gputune_formats::tuning::SessionId {
    box_check_by(engine, &client(1, "gputune stability --together"))
        .unwrap_or_else(|error| panic!("{error}"))
}

pub(super) fn box_check_by(
    engine: &mut Engine,
    by: &ClientInfo,
) -> Result<gputune_formats::tuning::SessionId, gputune_formats::tuning::TuneError> {
    let changes = engine
        .gpus()
        .iter()
        .map(|gpu| GpuChange {
            gpu_uuid: gpu.identity.uuid.clone(),
            settings: Vec::new(),
        })
        .collect();
    engine
        .start_session(
            by,
            &SessionRequest {
                purpose: SessionPurpose::BoxCheck,
                changes,
                fan_curves: Vec::new(),
                job_pid: None,
                job: None,
            },
        )
        .map(|started| started.session)
}

#[test]
fn a_box_that_went_down_mid_check_is_said_at_its_next_start_with_a_clock_cap() {
    let clock = ManualClock::starting_at(START_MS);
    let backend = eight(&clock);
    let mut sampler = backend.share();
    let folder = tempfile::tempdir().expect("a state folder");
    let (mut engine, notices) = open(backend, &folder, &clock);
    assert!(notices.is_empty(), "{notices:?}");
    box_check(&mut engine);
    assert!(
        journal_path(&folder).exists(),
        "written before the load starts"
    );
    for _ in 0..41 {
        clock.advance_ms(1_000);
        engine.on_samples(&readings(&mut sampler));
    }
    let journal: BoxJournal = serde_json::from_slice(
        &std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}")),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let box_w = journal.box_power_w.expect("the box's power");
    assert!(box_w > 3000.0, "eight cards training: {box_w} W");
    assert_eq!(journal.updated_at_ms - journal.started_at_ms, 41_000);

    // Eight cards begin a burst together at their clocks: the supply trips, the machine goes
    // down, and the engine finds every card lost; the journal stays.
    let watch = SupplyWatch::new(
        SupplyModel::of(SimScenario::EightRtx4090).expect("a supply"),
        8,
    );
    let at = std::time::Instant::now();
    let trip = readings(&mut sampler)
        .iter()
        .enumerate()
        .find_map(|(card, reading)| {
            let clock_mhz = reading.as_ref().ok()?.sm_clock_mhz?;
            watch.burst_began(card, at, clock_mhz)
        })
        .expect("eight cards in phase at their clocks trip the supply");
    sampler.go_down(&trip.describe());
    clock.advance_ms(1_000);
    engine.on_samples(&readings(&mut sampler));
    assert!(
        engine
            .tunings()
            .iter()
            .all(|tuning| tuning.holders.is_empty())
    );
    assert!(
        journal_path(&folder).exists(),
        "a lost box keeps its journal"
    );
    drop(engine);

    // The reboot: a fresh machine (and a new boot id), the same state folder.
    let mut journal: BoxJournal = serde_json::from_slice(
        &std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}")),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    journal.boot_id = Some("a boot before this one".to_string());
    std::fs::write(
        journal_path(&folder),
        serde_json::to_vec(&journal).unwrap_or_default(),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let (_engine, notices) = open(eight(&clock), &folder, &clock);
    let said: Vec<String> = notices
        .iter()
        .filter_map(|notice| match notice {
            Notice::Error(text) if text.starts_with(WENT_DOWN) => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(said.len(), 1, "{notices:?}");
    let said = &said[0];
    eprintln!("at the next start: {said}");
    for part in [
        "41 s into an all-card check of GPU 0, GPU 1",
        "at about 3,",
        "suspect the power supply; try a clock cap of",
    ] {
        assert!(said.contains(part), "{part:?} in {said}");
    }
    assert!(!journal_path(&folder).exists(), "said once");
    assert_eq!(set_aside(&folder).len(), 1);
}

#[test]
fn a_box_check_that_ends_normally_leaves_no_journal_and_one_of_this_boot_blames_a_process() {
    let clock = ManualClock::starting_at(START_MS);
    let backend = eight(&clock);
    let mut sampler = backend.share();
    let folder = tempfile::tempdir().expect("a state folder");
    let (mut engine, _) = open(backend, &folder, &clock);
    let session = box_check(&mut engine);
    clock.advance_ms(2_000);
    engine.on_samples(&readings(&mut sampler));
    // A rerun's cap reaches the journal at once.
    let capped: Vec<GpuChange> = engine
        .gpus()
        .iter()
        .map(|gpu| GpuChange {
            gpu_uuid: gpu.identity.uuid.clone(),
            settings: vec![Setting::LockGpuClocks {
                min_mhz: 210,
                max_mhz: 2550,
            }],
        })
        .collect();
    engine
        .session_apply(&client(1, "gputune stability --together"), session, &capped)
        .unwrap_or_else(|error| panic!("{error}"));
    let journal: BoxJournal = serde_json::from_slice(
        &std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}")),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(journal.clock_cap_mhz, Some(2550));
    engine.client_gone(1);
    assert!(!journal_path(&folder).exists(), "a normal end removes it");

    // A journal of this boot left behind: the process died, not the machine.
    box_check(&mut engine);
    let (_engine, notices) = {
        drop(engine);
        open(eight(&clock), &folder, &clock)
    };
    assert!(
        notices
            .iter()
            .any(|notice| matches!(notice, Notice::Warning(text)
            if text.contains("the machine did not go down"))),
        "{notices:?}"
    );
}

/// Puts a hostile file where the journal goes.
type Planter<'a> = Box<dyn Fn(&std::path::Path) + 'a>;

#[test]
fn a_damaged_huge_or_linked_box_journal_is_moved_aside_unread() {
    let clock = ManualClock::starting_at(START_MS);
    let folder = tempfile::tempdir().expect("a state folder");
    let state = folder.path().join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|error| panic!("{error}"));
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .unwrap_or_else(|error| panic!("{error}"));
    let victim = folder.path().join("victim");
    std::fs::write(&victim, "precious").unwrap_or_else(|error| panic!("{error}"));
    let cases: [(&str, Planter); 4] = [
        (
            "damaged",
            Box::new(|path| std::fs::write(path, "{ not json").unwrap_or_default()),
        ),
        (
            "larger than",
            Box::new(|path| std::fs::write(path, vec![b' '; 10 << 20]).unwrap_or_default()),
        ),
        (
            "symbolic link",
            Box::new(|path| std::os::unix::fs::symlink(&victim, path).unwrap_or_default()),
        ),
        (
            "hard links",
            Box::new(|path| std::fs::hard_link(&victim, path).unwrap_or_default()),
        ),
    ];
    for (index, (what, plant)) in cases.iter().enumerate() {
        plant(&journal_path(&folder));
        let (engine, notices) = open(eight(&clock), &folder, &clock);
        drop(engine);
        assert!(
            notices
                .iter()
                .any(|notice| matches!(notice, Notice::Warning(text)
                if text.contains("could not be used") && text.contains(what))),
            "{what}: {notices:?}"
        );
        assert!(!journal_path(&folder).exists(), "{what}: moved aside");
        assert_eq!(set_aside(&folder).len(), index + 1, "{what}");
    }
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap_or_default(),
        "precious",
        "the links were never followed nor written through"
    );
}

#[test]
fn a_journal_kept_because_cards_were_lost_says_so_not_a_dead_process() {
    let clock = ManualClock::starting_at(START_MS);
    let backend = eight(&clock);
    let mut sampler = backend.share();
    let folder = tempfile::tempdir().expect("a state folder");
    let (mut engine, _) = open(backend, &folder, &clock);
    box_check(&mut engine);
    clock.advance_ms(5_000);
    engine.on_samples(&readings(&mut sampler));
    // The cards stop answering (fallen off the bus); the machine stays up: the same boot.
    sampler.go_down("the cards fell off the bus");
    clock.advance_ms(1_000);
    engine.on_samples(&readings(&mut sampler));
    let kept: BoxJournal = serde_json::from_slice(
        &std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}")),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    // The cards found lost when the check ended (it ends at the first).
    assert!(!kept.cards_lost.is_empty(), "{kept:?}");
    drop(engine);
    // The daemon restarted in the same boot.
    let (_engine, notices) = open(eight(&clock), &folder, &clock);
    let said: Vec<&Notice> = notices
        .iter()
        .filter(|notice| notice.to_string().contains("box check"))
        .collect();
    assert_eq!(said.len(), 1, "{notices:?}");
    let said = said[0].to_string();
    assert!(
        said.contains("GPU 7 lost GPU 0") && !said.contains("died"),
        "{said}"
    );
}

#[test]
fn a_journal_s_own_text_reaches_the_notice_without_control_characters() {
    let clock = ManualClock::starting_at(START_MS);
    let folder = tempfile::tempdir().expect("a state folder");
    let (engine, _) = open_in_process(&folder, &clock);
    drop(engine);
    // serde names an unknown field in its error: here one that would retitle a terminal.
    std::fs::write(
        journal_path(&folder),
        r#"{"format_version": 1, "\u001b]0;owned\u0007\u001b[2J": 1}"#,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let (_engine, notices) = open_in_process(&folder, &clock);
    let said: Vec<String> = notices
        .iter()
        .map(ToString::to_string)
        .filter(|text| text.contains("could not be used"))
        .collect();
    assert_eq!(said.len(), 1, "{notices:?}");
    assert!(
        !said[0].chars().any(char::is_control) && said[0].contains("owned"),
        "{:?}",
        said[0]
    );
}

#[test]
fn the_went_down_notice_says_when_and_goes_from_the_welcome_once_a_box_check_ends() {
    use gputune_core::device::{BackendChoice, BackendOptions};
    use gputune_core::service::client::{ConnectOptions, SocketChoice, connect_in_process};
    use gputune_formats::protocol::{PROTOCOL_VERSION, Request, Response};
    let clock = ManualClock::starting_at(START_MS);
    let folder = tempfile::tempdir().expect("a state folder");
    // A journal of a boot before this one: the machine went down mid-check.
    let (mut engine, _) = open(eight(&clock), &folder, &clock);
    box_check(&mut engine);
    drop(engine);
    let mut journal: BoxJournal = serde_json::from_slice(
        &std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}")),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    journal.boot_id = Some("a boot before this one".to_string());
    std::fs::write(
        journal_path(&folder),
        serde_json::to_vec(&journal).unwrap_or_default(),
    )
    .unwrap_or_else(|error| panic!("{error}"));

    let mut client = connect_in_process(&ConnectOptions {
        backend: BackendOptions {
            choice: BackendChoice::Sim,
            nvml_library_path: None,
            sim: SimOptions {
                scenario: SimScenario::EightRtx4090,
                load: LoadPattern::Training,
            },
        },
        socket: SocketChoice::Default,
        folders: gputune_core::folders::Folders {
            state_dir: Some(folder.path().join("state")),
            record_dir: Some(folder.path().join("state")),
            config_dir: None,
        },
        label: "gputune stability --together".to_string(),
    })
    .unwrap_or_else(|error| panic!("{error}"));
    let went_down = |client: &gputune_core::service::client::TuningClient| {
        client
            .welcome()
            .notices
            .iter()
            .map(ToString::to_string)
            .filter(|text| text.starts_with(WENT_DOWN))
            .collect::<Vec<_>>()
    };
    let said = went_down(&client);
    assert_eq!(said.len(), 1, "{:?}", client.welcome().notices);
    assert!(said[0].contains("It went down at about "), "{}", said[0]);

    // A box check that ends with the machine up: the notice is old news.
    let changes = client
        .welcome()
        .gpus
        .iter()
        .map(|gpu| GpuChange {
            gpu_uuid: gpu.identity.uuid.clone(),
            settings: Vec::new(),
        })
        .collect();
    let started = client.request(Request::StartSession {
        session: SessionRequest {
            purpose: SessionPurpose::BoxCheck,
            changes,
            fan_curves: Vec::new(),
            job_pid: None,
            job: None,
        },
    });
    let Ok(Response::SessionStarted(started)) = started else {
        panic!("{started:?}");
    };
    client
        .request(Request::EndSession {
            session: started.session,
            keep: false,
        })
        .unwrap_or_else(|error| panic!("{error}"));
    // The welcome the next client gets.
    let again = client.request(Request::Hello {
        protocol: PROTOCOL_VERSION,
        client: "gputune status".to_string(),
    });
    let Ok(Response::Welcome(welcome)) = again else {
        panic!("{again:?}");
    };
    assert!(
        welcome
            .notices
            .iter()
            .all(|notice| !notice.text().starts_with(WENT_DOWN)),
        "{:?}",
        welcome.notices
    );
}
