//! The socket's messages (protocol v5): one request of each kind, each response, each event
//! (every engine event among them), one JSON line each, as the daemon and its clients write
//! them.

use gputune_core::formats::card::{BackendKind, CriticalEvent};
use gputune_core::formats::history::HistoryPage;
use gputune_core::formats::protocol::{
    Event, Message, PROTOCOL_VERSION, Request, RequestLine, Response, Snapshot, Welcome,
};
use gputune_core::formats::tuning::{
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
                settings: all_settings(),
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
        }),
        Response::SessionEnded { report: report() },
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
