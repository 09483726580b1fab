//! What clients ask the engine for: a session, a trial on one GPU or on several. They cross
//! the daemon's socket as JSON, like the answers in `types.rs`.

use super::types::{GpuApplied, GpuChange, SessionId, SessionPurpose};
use crate::tuning::fan_curve::FanCurve;

/// The longest trial: a day. Longer is a setting to apply, not to try.
pub const LONGEST_TRIAL_S: u64 = 86_400;
/// The longest baseline a trial waits for.
pub const LONGEST_BASELINE_S: u64 = 600;

/// What a trial asks for.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrialRequest {
    pub gpu_uuid: String,
    pub settings: Vec<crate::device::Setting>,
    pub duration_s: u64,
    /// Seconds of "before" numbers: taken from the recent past when the engine has them,
    /// else measured before anything is applied.
    pub baseline_s: u64,
}

/// What a new session asks for.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionRequest {
    pub purpose: SessionPurpose,
    /// Settings applied (temporarily) when the session starts.
    pub changes: Vec<GpuChange>,
    /// Fan curves followed while it lasts, per GPU UUID.
    pub fan_curves: Vec<(String, FanCurve)>,
    /// The job's process, when it already runs (a sweep's); see `Engine::set_session_job`.
    #[serde(default)]
    pub job_pid: Option<u32>,
}

/// A session that started.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionStarted {
    pub session: SessionId,
    pub applied: Vec<GpuApplied>,
}

/// What a trial over several GPUs asks for: each card's own settings (a power limit is in
/// watts, so each card gets the same percentage of its own default from the client).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupTrialRequest {
    pub changes: Vec<GpuChange>,
    pub duration_s: u64,
    pub baseline_s: u64,
}
