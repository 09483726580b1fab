//! A scheduler's job (a Slurm job through the SPANK plugin): only root starts one; a later
//! step of the same job whose cards the job already holds joins its session (nothing written);
//! the session is handed to a step still running when its holder goes, and its cards go back
//! only when the last step has gone; another job is refused naming the job that holds them.

use std::sync::Arc;

use super::options;
use gputune_core::clock::{Clock, ManualClock};
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_core::tuning::engine::{ClientInfo, Engine};
use gputune_formats::card::Setting;
use gputune_formats::tuning::JobInfo;
use gputune_formats::tuning::{GpuChange, SessionPurpose, SessionRequest, TuneErrorKind};

fn eight_cards() -> (Engine, ManualClock, tempfile::TempDir) {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let backend = SimBackend::with_clock(
        &SimOptions {
            scenario: SimScenario::EightRtx4090,
            load: LoadPattern::Idle,
        },
        Box::new(clock.clone()),
    );
    let folder = tempfile::tempdir().expect("a state folder");
    let (engine, _notices) = Engine::open(
        Box::new(backend),
        &options(&folder),
        Arc::new(clock.clone()) as Arc<dyn Clock>,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    (engine, clock, folder)
}

fn plugin(id: u64, uid: u32) -> ClientInfo {
    ClientInfo {
        id,
        pid: Some(5_000 + id as u32),
        uid: Some(uid),
        user: Some(if uid == 0 {
            "root".into()
        } else {
            "alice".into()
        }),
        label: "gputune_spank.so".to_string(),
        may_write: true,
    }
}

fn job(job_id: &str, step: &str) -> JobInfo {
    JobInfo {
        scheduler: "slurm".to_string(),
        job_id: job_id.to_string(),
        step: step.to_string(),
        user: "alice".to_string(),
        uid: 1000,
    }
}

/// A job session on `cards` at `power_limit_mw`.
fn request(
    engine: &Engine,
    cards: &[usize],
    power_limit_mw: u32,
    job: Option<JobInfo>,
) -> SessionRequest {
    SessionRequest {
        purpose: SessionPurpose::Job,
        changes: cards
            .iter()
            .map(|&card| GpuChange {
                gpu_uuid: engine.gpus()[card].identity.uuid.clone(),
                settings: vec![Setting::PowerLimit { power_limit_mw }],
            })
            .collect(),
        fan_curves: Vec::new(),
        job_pid: None,
        job,
    }
}

fn power_limit_mw(engine: &Engine, card: u32) -> Option<u32> {
    engine
        .tuning(card)
        .and_then(|tuning| tuning.in_force.power_limit_mw)
}

#[test]
fn only_root_starts_a_job_and_a_job_names_itself() {
    let (mut engine, _clock, _folder) = eight_cards();
    let before = power_limit_mw(&engine, 0);
    let error = engine
        .start_session(
            &plugin(1, 1000),
            &request(&engine, &[0], 300_000, Some(job("7", "0"))),
        )
        .expect_err("a user is not the scheduler");
    assert_eq!(error.kind, TuneErrorKind::NotAllowed);
    assert!(error.message.contains("Only root"), "{}", error.message);
    let error = engine
        .start_session(&plugin(1, 0), &request(&engine, &[0], 300_000, None))
        .expect_err("a job names its job");
    assert_eq!(error.kind, TuneErrorKind::Refused);
    let mut run = request(&engine, &[0], 300_000, Some(job("7", "0")));
    run.purpose = SessionPurpose::Run;
    let error = engine
        .start_session(&plugin(1, 0), &run)
        .expect_err("only a job session names a job");
    assert_eq!(error.kind, TuneErrorKind::Refused);
    let error = engine
        .start_session(
            &plugin(1, 0),
            &request(&engine, &[0], 300_000, Some(job("7\n8", "0"))),
        )
        .expect_err("no control characters in a job id");
    assert_eq!(error.kind, TuneErrorKind::Refused);
    assert_eq!(power_limit_mw(&engine, 0), before, "nothing was written");
}

#[test]
fn a_jobs_steps_share_its_session_and_the_cards_go_back_after_the_last_one() {
    let (mut engine, _clock, _folder) = eight_cards();
    let before: Vec<Option<u32>> = (0..8).map(|card| power_limit_mw(&engine, card)).collect();
    let batch = plugin(1, 0);
    let started = engine
        .start_session(
            &batch,
            &request(&engine, &[1, 2], 300_000, Some(job("42", "batch"))),
        )
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(!started.joined);
    assert_eq!(power_limit_mw(&engine, 1), Some(300_000));
    assert_eq!(power_limit_mw(&engine, 2), Some(300_000));
    assert_eq!(power_limit_mw(&engine, 0), before[0], "not the job's card");
    let holder = engine
        .tuning(1)
        .and_then(|tuning| tuning.holders.first().cloned())
        .expect("a holder");
    assert_eq!(
        holder.job.as_ref().map(|job| job.job_id.as_str()),
        Some("42")
    );
    assert_eq!(holder.by, "Slurm job 42 of alice (step batch)");

    // An srun step inside the batch job, on one of its cards: joined, nothing written.
    let step = plugin(2, 0);
    let joined = engine
        .start_session(
            &step,
            &request(&engine, &[2], 250_000, Some(job("42", "0"))),
        )
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(joined.joined);
    assert_eq!(joined.session, started.session);
    assert!(joined.applied.is_empty());
    assert_eq!(
        power_limit_mw(&engine, 2),
        Some(300_000),
        "the job's own setting"
    );
    assert!(
        engine.has_sessions(step.id),
        "a joined step holds the cards too"
    );

    // Another job wanting the same card is refused, naming the job.
    let error = engine
        .start_session(
            &plugin(3, 0),
            &request(&engine, &[2], 250_000, Some(job("43", "0"))),
        )
        .expect_err("held by job 42");
    assert_eq!(error.kind, TuneErrorKind::Held);
    assert!(
        error.message.contains("Slurm job 42 of alice"),
        "{}",
        error.message
    );

    // The batch step's slurmstepd is killed: the step still running takes the session over.
    engine.client_gone(batch.id);
    assert_eq!(power_limit_mw(&engine, 1), Some(300_000));
    assert_eq!(power_limit_mw(&engine, 2), Some(300_000));
    // The last step ends: everything goes back exactly.
    let report = engine
        .end_session(&step, started.session, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(report.is_complete(), "{report:?}");
    for card in 0..8 {
        assert_eq!(
            power_limit_mw(&engine, card),
            before[card as usize],
            "GPU {card}"
        );
    }
}

#[test]
fn a_step_that_joined_leaves_without_putting_anything_back() {
    let (mut engine, _clock, _folder) = eight_cards();
    let before = power_limit_mw(&engine, 3);
    let batch = plugin(1, 0);
    let started = engine
        .start_session(
            &batch,
            &request(&engine, &[3], 280_000, Some(job("50", "batch"))),
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let step = plugin(2, 0);
    engine
        .start_session(
            &step,
            &request(&engine, &[3], 280_000, Some(job("50", "0"))),
        )
        .unwrap_or_else(|error| panic!("{error}"));
    let left = engine
        .end_session(&step, started.session, false)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(left.restored.is_empty());
    assert!(
        left.message.contains("stay on its cards"),
        "{}",
        left.message
    );
    assert_eq!(power_limit_mw(&engine, 3), Some(280_000));
    // A step killed while it was joined changes nothing either.
    let other = plugin(4, 0);
    engine
        .start_session(
            &other,
            &request(&engine, &[3], 280_000, Some(job("50", "1"))),
        )
        .unwrap_or_else(|error| panic!("{error}"));
    engine.client_gone(other.id);
    assert_eq!(power_limit_mw(&engine, 3), Some(280_000));
    assert!(!engine.has_sessions(other.id));
    // The job's end puts the card back.
    engine.client_gone(batch.id);
    assert_eq!(power_limit_mw(&engine, 3), before);
}
