//! What the engine asks and answers: requests for sessions and trials, what a card runs and
//! who holds it, how an apply, a trial or a session went, its events, its refusals, and the
//! statistics and notices in them. Their code is in `tuning` (the engine) and `notice`.

use serde::{Deserialize, Serialize};

use super::card::{Constraints, CriticalEvent, FanMode, GpuIdentity, PstateOffset, Setting};
use super::fan_curve::FanCurve;
use super::temperature_hold::TemperatureHoldStatus;
use super::throttle::ThrottleReason;

/// A connection to the engine, numbered by the service.
pub type ClientId = u64;

/// A session, numbered by the engine.
pub type SessionId = u64;

/// What a client wants to change on one GPU, named by UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// A box check: every listed card loaded at once, in phase. The engine keeps a box-check
    /// journal while it lasts, so a machine that goes down mid-check is said at its next start.
    BoxCheck,
    /// A scheduler's job (a Slurm job's step, through the SPANK plugin): settings held on
    /// exactly the job's cards for its life; only root may start one (`JobInfo`).
    Job,
}

/// The scheduler's job a session belongs to: who and which job, for the holder's line, the
/// exporter's labels and the job's energy record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobInfo {
    /// Which scheduler ("slurm").
    pub scheduler: String,
    /// The job's id as the scheduler writes it ("4242", an array task "4242_7").
    pub job_id: String,
    /// The step that asked ("batch", "0", "extern"); the steps of one job on a node share its
    /// session.
    pub step: String,
    /// The job's user, by name and number.
    pub user: String,
    pub uid: u32,
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
    /// The scheduler's job, for a session of purpose `job`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobInfo>,
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
    /// The card's last critical error (Xid) since the engine started and what was put back for
    /// it (one that found nothing to do does not replace one that put something back).
    #[serde(default)]
    pub last_critical: Option<CriticalNote>,
    /// The temperature hold the daemon keeps on the card, and where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_hold: Option<TemperatureHoldStatus>,
}

/// A critical error (Xid) a card reported and what the engine did about it, kept so that a
/// client that was not listening then (the next `gputune status`) still hears it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticalNote {
    pub at_ms: u64,
    pub critical: CriticalEvent,
    /// The settings written back, in order ("GPU clock offset +0 MHz").
    pub put_back: Vec<Setting>,
    /// The one sentence every client was told: what the card reported, what went back, what
    /// was kept.
    pub sentence: String,
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
#[serde(tag = "type", rename_all = "snake_case")]
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
    pub left: Vec<SettingLeft>,
    /// Whether every control written back has exactly its value before: a clock lock gputune
    /// did not know (NVML cannot read locks) can only be reset, not restored. What could not
    /// be written at all is in `left`.
    pub exact: bool,
}

/// A setting a restore could not write, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingLeft {
    pub setting: Setting,
    /// The driver's refusal or failure, as a sentence part ("the driver refused").
    pub reason: String,
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
    pub stats: Vec<GpuStats>,
    /// One sentence: why and how it ended.
    pub message: String,
    /// The critical GPU error that ended it, if one did.
    #[serde(default)]
    pub critical_event: Option<CriticalEvent>,
    /// For a scheduler's job: what it did on its cards and what that cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_record: Option<Box<super::jobs::JobRecord>>,
}

/// What one GPU did over a span (a session's, a trial's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStats {
    pub gpu_index: u32,
    pub stats: TrialStats,
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

/// What the engine has to say to its clients, collected as it works and routed by the service.
// Events are made one at a time and moved to the clients, never kept in bulk: boxing the
// trial's status would only add an allocation to each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
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

/// What a trial asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialRequest {
    pub gpu_uuid: String,
    pub settings: Vec<Setting>,
    pub duration_s: u64,
    /// Seconds of "before" numbers: taken from the recent past when the engine has them,
    /// else measured before anything is applied.
    pub baseline_s: u64,
}

/// What a new session asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    pub purpose: SessionPurpose,
    /// Settings applied (temporarily) when the session starts.
    pub changes: Vec<GpuChange>,
    /// Fan curves followed while it lasts, one per GPU.
    pub fan_curves: Vec<GpuFanCurve>,
    /// The job's process, when it already runs (a sweep's); see `Engine::set_session_job`.
    #[serde(default)]
    pub job_pid: Option<u32>,
    /// The scheduler's job, for purpose `job` (required then, refused otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobInfo>,
}

/// A fan curve for one GPU, named by UUID.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuFanCurve {
    pub gpu_uuid: String,
    pub curve: FanCurve,
}

/// A session that started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStarted {
    pub session: SessionId,
    pub applied: Vec<GpuApplied>,
    /// A job's later step joined the session its first step holds on the same cards (nothing
    /// was written): the session ends when the last of its steps has ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joined: bool,
}

/// What a trial over several GPUs asks for: each card's own settings (a power limit is in
/// watts, so each card gets the same percentage of its own default from the client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupTrialRequest {
    pub changes: Vec<GpuChange>,
    pub duration_s: u64,
    pub baseline_s: u64,
}

/// What a session holds on a card: one control, or all of its fans together (a curve drives
/// every fan, and a fan's speed is meaningless beside another client's curve). Two sessions
/// may change one card at once when they hold different ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    PowerLimit,
    GpuClockLock,
    MemoryClockLock,
    GpuClockOffset,
    MemoryClockOffset,
    Fans,
}

/// A clock lock as gputune knows it. NVML cannot read locks back, so what gputune did not set
/// itself since the driver started is `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClockLockInForce {
    Unlocked,
    Locked {
        min_mhz: u32,
        max_mhz: u32,
    },
    #[default]
    Unknown,
}

/// The clock locks gputune set, kept by the engine because NVML cannot read them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LockRecord {
    pub gpu_clock_lock: ClockLockInForce,
    pub memory_clock_lock: ClockLockInForce,
}

/// Everything gputune can change on one card, as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SettingsInForce {
    /// The power limit set (the enforced one is in the telemetry).
    pub power_limit_mw: Option<u32>,
    pub gpu_clock_lock: ClockLockInForce,
    pub memory_clock_lock: ClockLockInForce,
    /// The GPU clock offset compute runs at (P2's where the card reports it, else P0's).
    pub gpu_clock_offset_mhz: Option<i32>,
    pub memory_clock_offset_mhz: Option<i32>,
    /// Each fan's mode; `None` for a card without fans (or one that does not say).
    pub fans: Option<Vec<FanMode>>,
    /// Every P-state's GPU clock offset, as read back; empty when the card (or an older
    /// daemon) does not say per P-state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_clock_offsets: Vec<PstateOffset>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_clock_offsets: Vec<PstateOffset>,
}

/// Where the temperature was going at the end of the samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TemperatureTrend {
    /// Not enough samples to say (less than the settle window).
    TooShort,
    Settled,
    /// Still moving: degrees per minute, positive when warming.
    Moving {
        c_per_min: f64,
    },
}

/// Seconds a card spent under one throttle reason.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThrottleTime {
    pub reason: ThrottleReason,
    pub seconds: f64,
}

/// What a GPU did over a run of samples.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TrialStats {
    pub samples: usize,
    /// From the first sample to the last.
    pub duration_s: f64,
    /// Energy over time when the card has an energy counter, else the mean of the readings.
    pub average_power_w: Option<f64>,
    pub average_sm_clock_mhz: Option<f64>,
    pub min_sm_clock_mhz: Option<u32>,
    pub average_temperature_c: Option<f64>,
    pub peak_temperature_c: Option<u32>,
    /// Mean over the fans and the samples, percent.
    pub average_fan_speed_pct: Option<f64>,
    /// From the energy counter's first and last readings; `None` without a counter.
    pub energy_wh: Option<f64>,
    /// Energy per minute of the span: from the counter, else from the average power.
    pub energy_wh_per_min: Option<f64>,
    /// Seconds under each throttle reason that was active at all, in NVML's order. Each
    /// interval between two samples counts under the reasons its closing sample reports.
    pub throttle_s: Vec<ThrottleTime>,
    pub temperature_trend: Option<TemperatureTrend>,
}

/// One sentence for the user, and whether it is news, a warning or an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "text", rename_all = "snake_case")]
pub enum Notice {
    Info(String),
    Warning(String),
    Error(String),
}
