//! Sessions, holders and refusals in words, and the small facts clients ask of them (whether
//! everything went back, the energy a session used).

use crate::card::DeviceError;
use crate::holds::describe_holds;
use crate::tuning::{
    GpuRestored, Holder, JobInfo, SessionPurpose, SessionReport, TuneError, TuneErrorKind,
};

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
            SessionPurpose::BoxCheck => "box_check",
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
            SessionPurpose::BoxCheck => "a box check (every card at once)",
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
        describe_holds(&self.controls).0
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
