//! What a client, a user and every user but root may make the engine hold: sessions that hold
//! nothing are bounded like any other (per client, per user, for all users but root), each
//! refusal one sentence; a request's changes are bounded; and the most sessions the bounds
//! allow, with the longest labels, list in far less than one protocol message.

use super::simulated;

use gputune_core::device::sim::LoadPattern;
use gputune_core::tuning::engine::{
    ClientInfo, Engine, MAX_CHANGE_SETTINGS, MAX_SESSION_CARDS_OF_OTHERS,
    MAX_SESSION_CARDS_PER_CLIENT, MAX_SESSION_CARDS_PER_USER, MAX_SESSION_CHANGES,
};
use gputune_formats::card::Setting;
use gputune_formats::protocol::MAX_MESSAGE_BYTES;
use gputune_formats::tuning::{
    GpuChange, SessionId, SessionPurpose, SessionRequest, TuneErrorKind,
};

/// Client `id` of user `uid`, with the longest label the daemon keeps (200 characters, four
/// bytes each).
fn client_of(id: u64, uid: u32) -> ClientInfo {
    ClientInfo {
        id,
        pid: Some(4_000_000_000),
        uid: Some(uid),
        user: Some(format!("user-with-a-long-name-{uid}")),
        label: "𝄞".repeat(200),
        may_write: true,
    }
}

/// A session on GPU 0 that holds nothing (a stability check at the card's own settings).
fn empty(engine: &Engine) -> SessionRequest {
    SessionRequest {
        purpose: SessionPurpose::Stability,
        changes: vec![GpuChange {
            gpu_uuid: engine.gpus()[0].identity.uuid.clone(),
            settings: Vec::new(),
        }],
        fan_curves: Vec::new(),
        job_pid: None,
        job: None,
    }
}

/// Starts `count` empty sessions for `client`; every one must start.
fn start(engine: &mut Engine, client: &ClientInfo, count: usize) -> Vec<SessionId> {
    (0..count)
        .map(|_| {
            engine
                .start_session(client, &empty(engine))
                .unwrap_or_else(|error| panic!("{error}"))
                .session
        })
        .collect()
}

fn refusal(engine: &mut Engine, client: &ClientInfo) -> String {
    let error = engine
        .start_session(client, &empty(engine))
        .expect_err("past the bound");
    assert_eq!(error.kind, TuneErrorKind::Refused);
    error.message
}

#[test]
fn empty_sessions_are_bounded_per_client_per_user_and_for_all_but_root() {
    let (mut engine, _sampler, _clock, _folder) = simulated(LoadPattern::Idle);
    let alice = client_of(1, 1000);
    let mine = start(&mut engine, &alice, MAX_SESSION_CARDS_PER_CLIENT);
    let said = refusal(&mut engine, &alice);
    assert!(said.contains("one client may have at most 24"), "{said}");

    // Alice's second connection gets the rest of her share, and no more.
    let alice_again = client_of(2, 1000);
    start(
        &mut engine,
        &alice_again,
        MAX_SESSION_CARDS_PER_USER - MAX_SESSION_CARDS_PER_CLIENT,
    );
    let said = refusal(&mut engine, &alice_again);
    assert!(
        said.contains("user-with-a-long-name-1000 already has 32"),
        "{said}"
    );

    // Other members fill what all users but root may hold together; root still starts.
    start(
        &mut engine,
        &client_of(3, 1001),
        MAX_SESSION_CARDS_PER_CLIENT,
    );
    start(
        &mut engine,
        &client_of(6, 1001),
        MAX_SESSION_CARDS_OF_OTHERS - MAX_SESSION_CARDS_PER_USER - MAX_SESSION_CARDS_PER_CLIENT,
    );
    let carol = client_of(4, 1002);
    let said = refusal(&mut engine, &carol);
    assert!(
        said.contains("the most it takes for users other than root"),
        "{said}"
    );
    let root = client_of(5, 0);
    start(&mut engine, &root, MAX_SESSION_CARDS_PER_CLIENT);

    // Every session the bounds allow, with the longest labels, lists in a fraction of one
    // message: the snapshot and every card's `tuning` event stay readable.
    let listed = serde_json::to_vec(&engine.tunings()).expect("tunings serialize");
    eprintln!(
        "{} sessions on one card, labels of 800 bytes: their tunings take {} bytes of {MAX_MESSAGE_BYTES}",
        engine.tunings()[0].holders.len(),
        listed.len()
    );
    assert!(
        listed.len() < MAX_MESSAGE_BYTES / 2,
        "{} bytes",
        listed.len()
    );

    // An ended session makes room again.
    engine
        .end_session(&alice, mine[0], false)
        .unwrap_or_else(|error| panic!("{error}"));
    start(&mut engine, &alice, 1);
}

#[test]
fn a_session_request_names_a_bounded_number_of_changes_and_settings() {
    let (mut engine, _sampler, _clock, _folder) = simulated(LoadPattern::Idle);
    let alice = client_of(1, 1000);
    let uuid = engine.gpus()[0].identity.uuid.clone();
    let mut many_changes = empty(&engine);
    many_changes.changes = vec![
        GpuChange {
            gpu_uuid: uuid.clone(),
            settings: Vec::new(),
        };
        MAX_SESSION_CHANGES + 1
    ];
    let error = engine
        .start_session(&alice, &many_changes)
        .expect_err("too many changes");
    assert!(
        error.message.contains("at most 64 GPU changes"),
        "{}",
        error.message
    );

    let mut many_settings = empty(&engine);
    many_settings.changes[0].settings = vec![
        Setting::PowerLimit {
            power_limit_mw: 300_000,
        };
        MAX_CHANGE_SETTINGS + 1
    ];
    let error = engine
        .start_session(&alice, &many_settings)
        .expect_err("too many settings");
    assert!(
        error.message.contains("at most 32 settings"),
        "{}",
        error.message
    );
    assert!(engine.tunings()[0].holders.is_empty(), "nothing started");
}
