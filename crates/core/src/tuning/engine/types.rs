//! What the engine tells its clients: what a card runs and who holds it, how an apply, a trial
//! or a session went, and why a request was refused. Those types cross the daemon's socket, so
//! they are formats, defined in `formats::tuning`; here are their methods and what the engine
//! keeps of its own (who asks: `ClientInfo`).

use crate::device::DeviceError;
pub use crate::formats::tuning::{
    ChangeNote, ClientId, CriticalNote, EngineEvent, GpuApplied, GpuChange, GpuInfo, GpuRestored,
    GpuStats, GpuTuning, Holder, JobInfo, SessionId, SessionPurpose, SessionReport, SettingLeft,
    TrialPhase, TrialStatus, TuneError, TuneErrorKind,
};

/// The client a kept fan curve's session belongs to: no connection has it, so no client's
/// going away ends the curve (service clients are numbered from 1; 0 is the daemon's boot
/// defaults).
pub const KEPT_CURVE_CLIENT: ClientId = ClientId::MAX;

/// Who is asking: what the service knows of a client.
#[derive(Debug, Clone, PartialEq, Eq)]
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
            SessionPurpose::Job => "job",
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
            SessionPurpose::Job => "a scheduler's job",
        }
    }
}

impl JobInfo {
    /// "Slurm job 4242 of alice (step batch)": a job session's holder, as every client names it.
    pub fn describe(&self) -> String {
        let scheduler = match self.scheduler.as_str() {
            "slurm" => "Slurm",
            other => other,
        };
        format!(
            "{scheduler} job {} of {} (step {})",
            self.job_id, self.user, self.step
        )
    }
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

impl GpuRestored {
    /// Nothing put back yet on GPU `gpu_index`: a report a put-back fills in.
    pub fn nothing(gpu_index: u32, gpu_uuid: &str) -> GpuRestored {
        GpuRestored {
            gpu_index,
            gpu_uuid: gpu_uuid.to_string(),
            restored: Vec::new(),
            left: Vec::new(),
            exact: true,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.left.is_empty()
    }
}

impl SessionReport {
    /// Whether everything that had to go back went back.
    pub fn is_complete(&self) -> bool {
        self.restored.iter().all(GpuRestored::is_complete)
    }
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
