//! `gputune status --json`: every GPU's identity, constraints and one snapshot.

use serde::Serialize;

use crate::card::{Constraints, GpuIdentity, Telemetry};
use crate::temperature_hold::TemperatureHoldStatus;
use crate::tuning::{CriticalNote, Holder, SettingsInForce};

/// The status report's `format_version`.
pub const STATUS_REPORT_FORMAT: u32 = 1;

/// The whole of `status --json`.
#[derive(Debug, Serialize)]
pub struct StatusReport {
    pub format_version: u32,
    /// `"nvml"` or `"sim"`.
    pub backend: String,
    /// Why the simulator stands in for NVML, when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated_because: Option<String>,
    pub gpus: Vec<GpuEntry>,
}

/// One GPU: read, or why it could not be.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GpuEntry {
    Read(Box<GpuStatus>),
    Failed(GpuFailure),
}

/// One GPU as `status --json` prints it: identity, constraints and telemetry side by side,
/// plus `fan_speed_pct` / `fan_speed_rpm` as flat lists like nvidia-smi's fields.
#[derive(Debug, Serialize)]
pub struct GpuStatus {
    #[serde(flatten)]
    pub identity: GpuIdentity,
    #[serde(flatten)]
    pub constraints: Constraints,
    #[serde(flatten)]
    pub telemetry: Telemetry,
    pub fan_speed_pct: Option<Vec<Option<u32>>>,
    pub fan_speed_rpm: Option<Vec<Option<u32>>>,
    pub clock_offsets_supported: bool,
    /// The gputune sessions holding controls of the GPU (a `run`, a sweep, a trial, the
    /// window's fan curve), each with the controls it holds, as the daemon says; empty without
    /// one, or without a daemon to ask.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<SessionStatus>,
    /// Parts the driver did not answer in time ("readings (the driver did not answer within
    /// 30 s)"); their fields read as unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_read: Vec<String>,
    /// Whether the readings (and processes) were read: not when the driver timed out first.
    #[serde(skip)]
    pub has_readings: bool,
    /// What the card runs: power limit, clock locks (as the daemon or this user's gputune
    /// recorded them: NVML cannot read them back), offsets, fan modes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings_in_force: Option<SettingsInForce>,
    /// The card's last critical error (Xid) and what the daemon put back for it, as the daemon
    /// says (the sentence its clients were told then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_critical: Option<CriticalNote>,
    /// The temperature the daemon holds the card at, and where its hold is now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_hold: Option<TemperatureHoldStatus>,
}

/// A session holding a GPU, for `status`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionStatus {
    #[serde(flatten)]
    pub holder: Holder,
    /// Energy the GPU used since the session began (from its counter in this reading).
    pub energy_used_mj: Option<u64>,
}

/// A GPU that could not be read, in JSON next to the ones that could.
#[derive(Debug, Serialize)]
pub struct GpuFailure {
    pub index: u32,
    pub error: String,
}
