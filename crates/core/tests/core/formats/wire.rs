//! The socket's messages (protocol v5): one request of each kind, each response, each event
//! (every engine event among them), one JSON line each, as the daemon and its clients write
//! them.

use gputune_formats::card::{BackendKind, CriticalEvent};
use gputune_formats::history::HistoryPage;
use gputune_formats::protocol::{
    Event, Message, PROTOCOL_VERSION, Request, RequestLine, Response, Snapshot, Welcome,
};
use gputune_formats::tuning::{
    EngineEvent, GpuFanCurve, GroupTrialRequest, SessionPurpose, SessionRequest, SessionStarted,
    TrialRequest, TuneError, TuneErrorKind,
};

use super::values::*;

pub fn requests() -> Vec<Request> {
    vec![
        Request::Hello {
            protocol: PROTOCOL_VERSION,
            client: "gputune apply --try 60".to_string(),
        },
        Request::Snapshot,
        Request::Subscribe { interval_ms: 500 },
        Request::Apply {
            changes: vec![change()],
        },
        Request::StartSession {
            session: SessionRequest {
                purpose: SessionPurpose::Stability,
                changes: vec![change()],
                fan_curves: vec![GpuFanCurve {
                    gpu_uuid: UUID.to_string(),
                    curve: curve(),
                }],
                job_pid: Some(4242),
                job: None,
            },
        },
        Request::StartSession {
            session: SessionRequest {
                purpose: SessionPurpose::Job,
                changes: vec![change()],
                fan_curves: Vec::new(),
                job_pid: None,
                job: Some(job_info()),
            },
        },
        Request::SessionApply {
            session: 7,
            changes: vec![change()],
        },
        Request::EndSession {
            session: 7,
            keep: false,
        },
        Request::SessionJob {
            session: 7,
            pid: 4242,
        },
        Request::StartTrial {
            trial: TrialRequest {
                gpu_uuid: UUID.to_string(),
                settings: all_settings_v6(),
                duration_s: 60,
                baseline_s: 10,
            },
        },
        Request::StartGroupTrial {
            trial: GroupTrialRequest {
                changes: vec![change()],
                duration_s: 60,
                baseline_s: 10,
            },
        },
        Request::FinishTrial {
            gpu_uuid: UUID.to_string(),
            keep: true,
        },
        Request::FollowFanCurve {
            gpu_uuid: UUID.to_string(),
            curve: Some(curve()),
        },
        Request::SetFanCurve {
            gpu_uuid: UUID.to_string(),
            curve: None,
            boot_default: true,
        },
        Request::SetTemperatureHold {
            gpu_uuid: UUID.to_string(),
            hold: Some(temperature_hold()),
            boot_default: true,
        },
        Request::SetBootDefault {
            gpu_uuid: UUID.to_string(),
            default: Some(boot_default()),
        },
        Request::BootDefaults,
        Request::History {
            gpu_uuid: UUID.to_string(),
            from_ms: 1_764_000_000_000,
            to_ms: 1_764_001_200_000,
        },
        Request::Jobs { limit: 20 },
        Request::Job {
            job_id: "4242_7".to_string(),
        },
    ]
}

pub fn request_lines() -> Vec<RequestLine> {
    (1..)
        .zip(requests())
        .map(|(id, request)| RequestLine { id, request })
        .collect()
}

pub fn responses() -> Vec<Response> {
    vec![
        Response::Welcome(Box::new(Welcome {
            protocol: PROTOCOL_VERSION,
            version: "0.9.0".to_string(),
            backend: BackendKind::Sim,
            simulated_because: Some("--sim was given".to_string()),
            gpus: vec![gpu_info()],
            daemon: true,
            notices: vec![notice()],
            job_price: Some(cost_config()),
        })),
        Response::Snapshot(Box::new(Snapshot {
            gpus: vec![gpu_info()],
            tunings: vec![tuning()],
            latest: vec![
                Some(Ok(telemetry())),
                Some(Err(device_errors()[0].clone())),
                None,
            ],
        })),
        Response::Applied {
            gpus: vec![applied()],
        },
        Response::SessionStarted(SessionStarted {
            session: 7,
            applied: vec![applied()],
            joined: false,
        }),
        Response::SessionStarted(SessionStarted {
            session: 7,
            applied: Vec::new(),
            joined: true,
        }),
        Response::SessionEnded { report: report() },
        Response::SessionEnded {
            report: job_report(),
        },
        Response::Trial {
            status: Box::new(trial_status()),
        },
        Response::Trials {
            statuses: vec![trial_status()],
        },
        Response::BootDefaults {
            defaults: vec![boot_default()],
        },
        Response::History(Box::new(HistoryPage {
            gpu_uuid: UUID.to_string(),
            rows: history_rows(),
            changes: vec![change_note(1_764_000_001_500)],
            next_from_ms: Some(1_764_000_003_000),
            keep_hours: 48,
        })),
        Response::Jobs {
            records: vec![job_record()],
            skipped: vec![
                "A job record was skipped: /var/lib/gputune/jobs/job-1.json is a symbolic link, which gputune does not follow here; it was left as it is.".to_string(),
            ],
        },
        Response::Job {
            record: Box::new(job_record()),
        },
        Response::Done,
        Response::Error {
            error: TuneError::new(
                TuneErrorKind::Held,
                "The power limit of GPU 0 is held by a trial of gputune apply --try 60.",
            ),
        },
    ]
}

pub fn events() -> Vec<Event> {
    vec![
        Event::Samples {
            readings: vec![Ok(telemetry()), Err(device_errors()[1].clone())],
        },
        Event::Engine {
            event: Box::new(EngineEvent::Tuning { tuning: tuning() }),
        },
        Event::Engine {
            event: Box::new(EngineEvent::Trial {
                client: 3,
                status: trial_status(),
            }),
        },
        Event::Engine {
            event: Box::new(EngineEvent::SessionEnded {
                client: 3,
                report: report(),
            }),
        },
        Event::Engine {
            event: Box::new(EngineEvent::Critical {
                critical: CriticalEvent {
                    gpu_index: 0,
                    xid: 79,
                },
            }),
        },
        Event::Engine {
            event: Box::new(EngineEvent::Notice {
                gpu_index: Some(0),
                notice: notice(),
            }),
        },
    ]
}

/// What the service sends: each response (numbered like the requests), then each event.
pub fn messages() -> Vec<Message> {
    let responses = (1..)
        .zip(responses())
        .map(|(id, response)| Message::Response { id, response });
    let events = events().into_iter().map(|event| Message::Event { event });
    responses.chain(events).collect()
}

/// The rule for fields a build does not know (docs/architecture.md, "Formats"): what gputune
/// acts on refuses them, so a newer client's meaning is never half applied; what it only shows
/// ignores them, so a newer daemon's additions reach an older window harmlessly. (A value that
/// is its tag alone, `{"type":"snapshot"}` or `{"type":"reset_gpu_clocks"}`, cannot refuse
/// one: serde ignores fields beside a unit variant's tag.)
#[test]
fn what_gputune_acts_on_refuses_an_unknown_field_and_what_it_only_shows_ignores_one() {
    use gputune_formats::protocol::parse_request_line;
    let refused = [
        r#"{"id":1,"request":{"type":"apply","changes":[{"gpu_uuid":"GPU-1","settings":[],"later":1}]}}"#,
        r#"{"id":1,"request":{"type":"apply","changes":[{"gpu_uuid":"GPU-1","settings":[{"type":"power_limit","power_limit_mw":300000,"dry_run":true}]}]}}"#,
        r#"{"id":1,"request":{"type":"start_trial","trial":{"gpu_uuid":"GPU-1","settings":[],"duration_s":60,"baseline_s":10,"keep":true}}}"#,
        r#"{"id":1,"request":{"type":"start_session","session":{"purpose":"run","changes":[],"fan_curves":[{"gpu_uuid":"GPU-1","curve":{"points":[{"temperature_c":40.0,"speed_pct":30.0},{"temperature_c":85.0,"speed_pct":100.0}],"hysteresis_c":3.0},"fans":[0]}]}}}"#,
        r#"{"id":1,"request":{"type":"follow_fan_curve","gpu_uuid":"GPU-1","curve":{"points":[{"temperature_c":40.0,"speed_pct":30.0,"rpm":900},{"temperature_c":85.0,"speed_pct":100.0}],"hysteresis_c":3.0}}}"#,
        r#"{"id":1,"request":{"type":"start_group_trial","trial":{"changes":[],"duration_s":60,"baseline_s":10,"cards":"all"}}}"#,
    ];
    for line in refused {
        assert!(
            parse_request_line(line.as_bytes()).is_err(),
            "a request with an unknown field was accepted: {line}"
        );
    }

    // Today's snapshot with a field added to the answer, a card's reading and its tuning.
    let snapshot = messages()
        .into_iter()
        .find(|message| {
            matches!(
                message,
                Message::Response {
                    response: Response::Snapshot(_),
                    ..
                }
            )
        })
        .map(|message| serde_json::to_string(&message).unwrap_or_default())
        .unwrap_or_default();
    let newer = snapshot
        .replacen(
            r#""type":"snapshot","#,
            r#""type":"snapshot","from_a_newer_daemon":1,"#,
            1,
        )
        .replacen(
            r#""sampled_at_ms":"#,
            r#""fan_noise_db":31,"sampled_at_ms":"#,
            1,
        )
        .replacen(
            r#""fan_safety_engaged":"#,
            r#""cooling":"liquid","fan_safety_engaged":"#,
            1,
        );
    assert_eq!(newer.matches("newer_daemon").count(), 1, "{newer}");
    assert!(
        newer.contains("fan_noise_db") && newer.contains("liquid"),
        "{newer}"
    );
    let read = serde_json::from_str::<Message>(&newer).map_err(|error| error.to_string());
    let expected = serde_json::from_str::<Message>(&snapshot).map_err(|error| error.to_string());
    assert!(read.is_ok(), "{read:?}");
    assert_eq!(read, expected);
}
