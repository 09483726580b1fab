//! What the engine tells its clients: who asks, what a card runs and who holds it, how an apply,
//! a trial or a session went, and why a request was refused. All of it crosses the daemon's
//! socket as JSON, so every type here is serializable.

use serde::{Deserialize, Serialize};

use crate::device::{Constraints, CriticalEvent, DeviceError, GpuIdentity, Setting};
use crate::notice::Notice;
use crate::tuning::fan_curve::FanCurve;
use crate::tuning::in_force::{Hold, SettingsInForce};
use crate::tuning::stats::TrialStats;

/// A connection to the engine, numbered by the service.
pub type ClientId = u64;
/// The client a kept fan curve's session belongs to: no connection has it, so no client's
/// going away ends the curve (service clients are numbered from 1; 0 is the daemon's boot
/// defaults).
pub const KEPT_CURVE_CLIENT: ClientId = ClientId::MAX;
/// A session, numbered by the engine.
pub type SessionId = u64;

/// Who is asking: what the service knows of a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    pub id: ClientId,
    /// From the socket's peer credentials (or this process, in-process).
    pub pid: Option<u32>,
    pub uid: Option<u32>,
    pub user: Option<String>,
    /// What the client says it is ("gputune apply --try 60"), already made printable.
    pub label: String,
    /// Whether it may change settings (root, the daemon's own user, or the socket's group).
    pub may_write: bool,
}

impl ClientInfo {
    /// "gputune apply --try 60 (pid 4242, user alice)", for messages that name a holder.
    pub fn describe(&self) -> String {
        let mut details = Vec::new();
        if let Some(pid) = self.pid {
            details.push(format!("pid {pid}"));
        }
        match (&self.user, self.uid) {
            (Some(user), _) => details.push(format!("user {user}")),
            (None, Some(uid)) => details.push(format!("uid {uid}")),
            (None, None) => {}
        }
        if details.is_empty() {
            self.label.clone()
        } else {
            format!("{} ({})", self.label, details.join(", "))
        }
    }
}

/// What a client wants to change on one GPU, named by UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuChange {
    pub gpu_uuid: String,
    pub settings: Vec<Setting>,
}

/// Why a session exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionPurpose {
    /// Settings tried for a while, then reverted unless kept.
    Trial,
    /// Settings (and a fan curve) for the length of one command.
    Run,
    /// A fan curve followed while a client (the window) is connected.
    FanCurve,
    /// A fan curve the daemon keeps with no client attached, until it is cleared or the
    /// daemon stops (`Engine::keep_fan_curve`).
    KeptFanCurve,
    /// Settings stepped through while a training job runs.
    Sweep,
    /// Settings held while a stability check proves they compute correctly.
    Stability,
    /// Clock offsets stepped through by the undervolt scanner, each checked.
    Scan,
}

impl SessionPurpose {
    /// Its name on the wire and in metrics labels ("trial", "fan_curve").
    pub fn as_str(self) -> &'static str {
        match self {
            SessionPurpose::Trial => "trial",
            SessionPurpose::Run => "run",
            SessionPurpose::FanCurve => "fan_curve",
            SessionPurpose::KeptFanCurve => "kept_fan_curve",
            SessionPurpose::Sweep => "sweep",
            SessionPurpose::Stability => "stability",
            SessionPurpose::Scan => "scan",
        }
    }

    /// The session and its client, for "held by …": "a trial of gputune apply --try 60 (pid
    /// 4242)", "the fan curve kept by the daemon, set by alice".
    pub fn describe_by(self, by: &str) -> String {
        match self {
            SessionPurpose::KeptFanCurve => format!("{}, set by {by}", self.describe()),
            _ => format!("{} of {by}", self.describe()),
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            SessionPurpose::Trial => "a trial",
            SessionPurpose::Run => "a run",
            SessionPurpose::FanCurve => "a fan curve",
            SessionPurpose::KeptFanCurve => "the fan curve kept by the daemon",
            SessionPurpose::Sweep => "a sweep",
            SessionPurpose::Stability => "a stability check",
            SessionPurpose::Scan => "an undervolt scan",
        }
    }
}

/// Who holds controls of a GPU: one session on it, and which controls it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub session: SessionId,
    /// The controls it holds on this card (no other session changes them meanwhile).
    pub controls: Vec<Hold>,
    pub purpose: SessionPurpose,
    /// The client, described ("gputune run --profile Quiet (pid 77, user bob)").
    pub by: String,
    pub client: ClientId,
    pub since_ms: u64,
    /// When a trial on the card reverts, if one runs.
    pub trial_ends_at_ms: Option<u64>,
    /// The session's job: the process `gputune run` or a sweep started, when its client said
    /// (so every client can mark it among the GPU's processes).
    #[serde(default)]
    pub job_pid: Option<u32>,
    /// The card's energy counter (mJ) when the session began; the counter now minus this is
    /// the energy the card used during the session (its job's, for a run).
    #[serde(default)]
    pub energy_at_start_mj: Option<u64>,
}

impl Holder {
    /// "power limit and fans": what it holds, for people.
    pub fn controls_text(&self) -> String {
        crate::tuning::in_force::describe_holds(&self.controls).0
    }

    /// Energy the card used since the session began (mJ), from a reading of its counter.
    pub fn energy_used_mj(&self, energy_total_mj: Option<u64>) -> Option<u64> {
        Some(energy_total_mj?.saturating_sub(self.energy_at_start_mj?))
    }
}

/// The last change to a card's settings and who made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeNote {
    pub at_ms: u64,
    /// A client's description, "gputune's fan safety net", or "another program".
    pub by: String,
    pub what: String,
}

/// Everything about tuning one GPU, as every client shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTuning {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub in_force: SettingsInForce,
    /// The curve the engine follows on this card now.
    pub fan_curve: Option<FanCurve>,
    /// The fans were handed back to the driver because the card neared its slowdown
    /// temperature.
    pub fan_safety_engaged: bool,
    /// The sessions on the card, oldest first, each with the controls it holds (never the
    /// same control twice).
    pub holders: Vec<Holder>,
    pub last_change: Option<ChangeNote>,
}

/// What one GPU got from an apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuApplied {
    pub gpu_index: u32,
    /// The settings the driver accepted, in order.
    pub applied: Vec<Setting>,
    /// What the card runs afterwards.
    pub in_force: SettingsInForce,
    /// The limit the card enforces afterwards, read back.
    pub enforced_power_limit_mw: Option<u32>,
}

/// Where a trial stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum TrialPhase {
    /// Measuring the baseline before anything is written.
    Measuring {
        left_s: u64,
    },
    /// The settings are on the card; they revert in `left_s` unless kept.
    Running {
        left_s: u64,
    },
    Ended,
}

/// A trial's status: the countdown, the numbers before and during, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialStatus {
    pub gpu_index: u32,
    pub session: SessionId,
    /// What is tried ("power limit 315 W").
    pub what: String,
    pub phase: TrialPhase,
    pub baseline: TrialStats,
    pub during: TrialStats,
    /// Set when a setting changed within the baseline, so its numbers mix two settings.
    pub baseline_warning: Option<String>,
    /// How it ended, or why it could not start.
    pub message: Option<String>,
    /// It could not start, or not everything could be put back.
    #[serde(default)]
    pub failed: bool,
}

/// One GPU's part of a restore: what was written and what could not be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRestored {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub restored: Vec<Setting>,
    /// Settings not restored, each with the reason.
    pub left: Vec<(Setting, String)>,
    /// Whether every control written back has exactly its value before: a clock lock gputune
    /// did not know (NVML cannot read locks) can only be reset, not restored. What could not
    /// be written at all is in `left`.
    pub exact: bool,
}

impl GpuRestored {
    pub fn is_complete(&self) -> bool {
        self.left.is_empty()
    }
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionReport {
    pub session: SessionId,
    pub purpose: SessionPurpose,
    /// The changes were kept (nothing restored).
    pub kept: bool,
    pub restored: Vec<GpuRestored>,
    /// What each GPU did while the session ran.
    pub stats: Vec<(u32, TrialStats)>,
    /// One sentence: why and how it ended.
    pub message: String,
    /// The critical GPU error that ended it, if one did.
    #[serde(default)]
    pub critical_event: Option<CriticalEvent>,
}

impl SessionReport {
    /// Whether everything that had to go back went back.
    pub fn is_complete(&self) -> bool {
        self.restored.iter().all(GpuRestored::is_complete)
    }
}

/// What kind of refusal: lets a client react without parsing messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TuneErrorKind {
    /// A value outside the card's constraints, or a request that makes no sense.
    Refused,
    /// Another session holds the control.
    Held,
    /// The driver refused for lack of rights.
    Permission,
    /// The driver failed (lost GPU, timeout, ...).
    Device,
    /// No such GPU or session.
    NotFound,
    /// The client may not change settings.
    NotAllowed,
    /// A file of the engine's could not be written (its journal): nothing was changed.
    State,
}

/// A refused or failed request, as one sentence that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct TuneError {
    pub kind: TuneErrorKind,
    pub message: String,
}

impl TuneError {
    pub fn new(kind: TuneErrorKind, message: impl Into<String>) -> TuneError {
        TuneError {
            kind,
            message: message.into(),
        }
    }

    /// A driver error, classified.
    pub fn device(error: &DeviceError, context: &str) -> TuneError {
        let kind = match error {
            DeviceError::NoPermission { .. } => TuneErrorKind::Permission,
            _ => TuneErrorKind::Device,
        };
        TuneError::new(kind, format!("{context}{error}"))
    }
}

/// What the engine has to say to its clients, collected as it works and routed by the service.
// Events are made one at a time and moved to the clients, never kept in bulk: boxing the
// trial's status would only add an allocation to each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EngineEvent {
    /// A card's settings, holder or fan state changed: for every client.
    Tuning { tuning: GpuTuning },
    /// A trial's countdown or end: for the client that started it.
    Trial {
        client: ClientId,
        status: TrialStatus,
    },
    /// A session ended without its client asking (its trial's time was up, its GPU was lost):
    /// for the client that started it.
    SessionEnded {
        client: ClientId,
        report: SessionReport,
    },
    /// The driver reported a critical error (an Xid) on a card: for every client, so a
    /// stability check on that card ends as unstable whether or not it holds a session.
    Critical { critical: CriticalEvent },
    /// News about a card (the fan safety net, a fan curve that stopped): for every client.
    Notice {
        gpu_index: Option<u32>,
        notice: Notice,
    },
}

/// A GPU as the engine found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub identity: GpuIdentity,
    pub constraints: Constraints,
}
