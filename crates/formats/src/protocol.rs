//! What clients and the tuning service say to each other. In-process the values pass through
//! channels; through the daemon's socket each message is one line of JSON (at most
//! [`MAX_MESSAGE_BYTES`]), versioned by [`PROTOCOL_VERSION`]:
//!
//! ```text
//! → {"id":1,"request":{"type":"hello","protocol":6,"client":"gputune apply --try 60"}}
//! ← {"id":1,"response":{"type":"welcome", ...}}
//! → {"id":2,"request":{"type":"start_trial","trial":{"gpu_uuid":"GPU-...","settings":[...],...}}}
//! ← {"id":2,"response":{"type":"trial","status":{...}}}
//! ← {"event":{"type":"engine","event":{"type":"trial","client":3,"status":{...}}}}
//! ```
//!
//! GPUs are named by UUID. A request the service does not understand gets an `error` response
//! and the connection stays open; a line longer than the limit closes it.

use serde::{Deserialize, Serialize};

use super::card::{BackendKind, DeviceError, Setting, Telemetry};
use super::fan_curve::FanCurve;
use super::history::HistoryPage;
use super::jobs::{CostConfig, JobRecord};
use super::temperature_hold::TemperatureHold;
use super::tuning::{
    EngineEvent, GpuApplied, GpuChange, GpuInfo, GpuTuning, GroupTrialRequest, Notice, SessionId,
    SessionReport, SessionRequest, SessionStarted, TrialRequest, TrialStatus, TuneError,
};

/// Bumped whenever a message changes meaning; a client and a daemon of different versions say
/// so instead of misreading each other.
pub const PROTOCOL_VERSION: u32 = 7;
/// The longest message, in bytes. A real one is at most a few kilobytes (a snapshot of eight
/// GPUs); anything longer is refused and its connection closed.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// The longest message a client may send (requests are small).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A card's default settings, applied by the daemon when it starts (at boot).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootDefault {
    pub gpu_uuid: String,
    /// The profile it came from, for people.
    pub profile_name: String,
    /// The settings for this card (already converted by the client, validated again by the
    /// daemon when stored and when applied).
    pub settings: Vec<Setting>,
    /// A fan curve the daemon keeps on the card from its start (files written before curves
    /// could be kept have none).
    #[serde(default)]
    pub fan_curve: Option<FanCurve>,
    /// A temperature hold the daemon keeps on the card from its start (absent in files
    /// written before holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_hold: Option<TemperatureHold>,
}

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The first request of a connection: the versions, and what the client is.
    Hello {
        protocol: u32,
        client: String,
    },
    /// Every GPU, its tuning state and its latest reading.
    Snapshot,
    /// Send readings every `interval_ms` (100 to 5000) and every change of tuning state.
    Subscribe {
        interval_ms: u64,
    },
    /// Permanent changes, all or nothing.
    Apply {
        changes: Vec<GpuChange>,
    },
    StartSession {
        session: SessionRequest,
    },
    SessionApply {
        session: SessionId,
        changes: Vec<GpuChange>,
    },
    EndSession {
        session: SessionId,
        keep: bool,
    },
    /// The process the client started as the session's job (`gputune run`'s command).
    SessionJob {
        session: SessionId,
        pid: u32,
    },
    StartTrial {
        trial: TrialRequest,
    },
    /// One trial over several GPUs: one session, kept or put back together.
    StartGroupTrial {
        trial: GroupTrialRequest,
    },
    FinishTrial {
        gpu_uuid: String,
        keep: bool,
    },
    /// Follow a curve while connected; `None` stops and puts the fans back.
    FollowFanCurve {
        gpu_uuid: String,
        curve: Option<FanCurve>,
    },
    /// The daemon keeps `curve` on the card with no client attached, until it is cleared
    /// (`None`: the fans go back to the driver) or the daemon stops; with `boot_default`,
    /// the card's boot default gets (or loses) the curve too, so the daemon keeps it again
    /// from its next start.
    SetFanCurve {
        gpu_uuid: String,
        curve: Option<FanCurve>,
        #[serde(default)]
        boot_default: bool,
    },
    /// The daemon keeps the card at or below a temperature by moving its power limit within
    /// the hold's bounds, with no client attached, until it is cleared (`None`: the power
    /// limit goes back to what it was before the hold) or the daemon stops; with
    /// `boot_default`, the card's boot default gets (or loses) the hold too.
    SetTemperatureHold {
        gpu_uuid: String,
        hold: Option<TemperatureHold>,
        #[serde(default)]
        boot_default: bool,
    },
    /// Store (or with `None`, remove) a card's boot default.
    SetBootDefault {
        gpu_uuid: String,
        default: Option<BootDefault>,
    },
    BootDefaults,
    /// A page of a GPU's history kept by the daemon (Unix ms, both ends included); the answer
    /// says where the next page starts.
    History {
        gpu_uuid: String,
        from_ms: u64,
        to_ms: u64,
    },
    /// The newest job records the daemon keeps, newest first: at most `limit`, fewer when
    /// more would not fit in one message.
    Jobs {
        limit: u32,
    },
    /// The newest record of one job.
    Job {
        job_id: String,
    },
}

impl Request {
    /// Whether the request changes anything (and so needs a client that may write).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            Request::Hello { .. }
                | Request::Snapshot
                | Request::Subscribe { .. }
                | Request::BootDefaults
                | Request::History { .. }
                | Request::Jobs { .. }
                | Request::Job { .. }
        )
    }
}

/// Who answers: the daemon, or this process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    pub protocol: u32,
    /// gputune's version on the answering side.
    pub version: String,
    pub backend: BackendKind,
    /// Why the simulator stands in for NVML, when it does.
    pub simulated_because: Option<String>,
    pub gpus: Vec<GpuInfo>,
    /// True when a daemon answers; false for an engine in this process.
    pub daemon: bool,
    /// What the engine restored or found wrong when it started.
    pub notices: Vec<Notice>,
    /// The price the daemon's job records are costed at (its cost.toml), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_price: Option<CostConfig>,
}

/// Every GPU as the service knows it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub gpus: Vec<GpuInfo>,
    pub tunings: Vec<GpuTuning>,
    /// The latest reading of each GPU, `None` before the first.
    #[serde(with = "crate::readings::latest")]
    pub latest: Vec<Option<Result<Telemetry, DeviceError>>>,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    Welcome(Box<Welcome>),
    Snapshot(Box<Snapshot>),
    Applied {
        gpus: Vec<GpuApplied>,
    },
    SessionStarted(SessionStarted),
    SessionEnded {
        report: SessionReport,
    },
    Trial {
        status: Box<TrialStatus>,
    },
    /// Each card's trial of a group, in the request's order.
    Trials {
        statuses: Vec<TrialStatus>,
    },
    BootDefaults {
        defaults: Vec<BootDefault>,
    },
    History(Box<HistoryPage>),
    /// Job records, newest first, and the files skipped reading them (one sentence each).
    Jobs {
        records: Vec<JobRecord>,
        skipped: Vec<String>,
    },
    Job {
        record: Box<JobRecord>,
    },
    Done,
    Error {
        error: TuneError,
    },
}

/// What the service sends without being asked, to subscribed clients (and a session's own
/// news to its client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// One reading per GPU, in index order; a GPU that failed to read carries its error.
    Samples {
        #[serde(with = "crate::readings::each")]
        readings: Vec<Result<Telemetry, DeviceError>>,
    },
    Engine {
        event: Box<EngineEvent>,
    },
}

/// One line on the wire from a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLine {
    pub id: u64,
    pub request: Request,
}

/// One line on the wire from the service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Message {
    Response { id: u64, response: Response },
    Event { event: Event },
}

/// Why a line could not be read as a request, with the id when one could be found (so the
/// error reply goes to the right request).
pub fn parse_request_line(line: &[u8]) -> Result<RequestLine, (u64, String)> {
    match serde_json::from_slice::<RequestLine>(line) {
        Ok(request) => Ok(request),
        Err(error) => {
            let id = serde_json::from_slice::<serde_json::Value>(line)
                .ok()
                .and_then(|value| value.get("id").and_then(serde_json::Value::as_u64))
                .unwrap_or(0);
            Err((id, format!("The request could not be read: {error}.")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_unknown_ones_are_refused_with_their_id() {
        let line = RequestLine {
            id: 7,
            request: Request::Apply {
                changes: vec![GpuChange {
                    gpu_uuid: "GPU-1".to_string(),
                    settings: vec![Setting::PowerLimit {
                        power_limit_mw: 300_000,
                    }],
                }],
            },
        };
        let text = serde_json::to_string(&line).unwrap();
        assert_eq!(parse_request_line(text.as_bytes()), Ok(line));
        let (id, message) =
            parse_request_line(br#"{"id":9,"request":{"type":"format_disk"}}"#).unwrap_err();
        assert_eq!(id, 9);
        assert!(message.contains("format_disk"), "{message}");
        let (id, _) = parse_request_line(b"\xff\xfe not json").unwrap_err();
        assert_eq!(id, 0);
        assert!(Request::Apply { changes: vec![] }.writes());
        assert!(!Request::Snapshot.writes());
    }

    #[test]
    fn a_boot_default_written_before_kept_curves_still_reads() {
        let old = r#"{"gpu_uuid":"GPU-1","profile_name":"Quiet","settings":[{"PowerLimit":{"power_limit_mw":315000}}]}"#;
        let default = BootDefault::from_file_bytes(old.as_bytes()).unwrap();
        assert_eq!(default.fan_curve, None);
        assert_eq!(default.settings.len(), 1);
        let line = r#"{"id":4,"request":{"type":"set_fan_curve","gpu_uuid":"GPU-1","curve":null}}"#;
        assert_eq!(
            parse_request_line(line.as_bytes()).unwrap().request,
            Request::SetFanCurve {
                gpu_uuid: "GPU-1".to_string(),
                curve: None,
                boot_default: false
            }
        );
    }

    #[test]
    fn messages_are_told_apart_on_the_wire() {
        let response = Message::Response {
            id: 3,
            response: Response::Done,
        };
        let text = serde_json::to_string(&response).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), response);
        let event = Message::Event {
            event: Event::Samples { readings: vec![] },
        };
        let text = serde_json::to_string(&event).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), event);
    }
}
