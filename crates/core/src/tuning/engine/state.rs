//! What the engine keeps between calls: each GPU's state, each session's part on a card, a
//! trial's phase and readings, the fan curve followed. Data only, beside `types.rs` (what
//! crosses to clients): the files that act on it (`session.rs`, `trial.rs`, `fan_curves.rs`,
//! ...) import it from here and never from each other.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::types::ClientInfo;
use crate::device::gate::ValidatedSetting;
use crate::tuning::gpu_locks::GpuLock;
use crate::tuning::in_force::Control;
use crate::tuning::in_force::ControlsInForce;
use crate::tuning::temperature_control::TemperatureControl;
use gputune_formats::card::{Setting, Telemetry};
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::temperature_hold::{TemperatureHold, TemperatureHoldState};
use gputune_formats::tuning::TrialStats;
use gputune_formats::tuning::{
    ChangeNote, CriticalNote, GpuInfo, SessionId, SessionPurpose, TrialPhase, TrialStatus,
};
use gputune_formats::tuning::{Hold, SettingsInForce};

/// What puts controls back: for each, the setting that restores it.
pub(crate) type RestoreMap = BTreeMap<Control, RestoreEntry>;

/// The setting that puts one control back, and whether writing it restores exactly the value
/// before (not so for the reset of a lock gputune did not know).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RestoreEntry {
    pub setting: Setting,
    pub exact: bool,
}

impl RestoreEntry {
    /// A setting that puts its control back exactly.
    pub fn exact(setting: Setting) -> RestoreEntry {
        RestoreEntry {
            setting,
            exact: true,
        }
    }

    /// What puts `control` back to its value in `in_force` now (see `SettingsInForce::restoring`).
    pub fn of(in_force: &SettingsInForce, control: Control) -> Option<RestoreEntry> {
        in_force
            .restoring(control)
            .map(|(setting, exact)| RestoreEntry { setting, exact })
    }
}

/// Where a temporary change is recorded, oldest first: the journal restores the oldest value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    Session = 0,
    Trial = 1,
    /// A plain apply in progress: permanent once it succeeds.
    Pending = 2,
}

/// One GPU's state in the engine.
pub(super) struct Gpu {
    pub info: GpuInfo,
    pub in_force: SettingsInForce,
    /// The card's lock: the daemon's alone for its life; an engine without the daemon shares
    /// it with other gputune processes while it holds control locks.
    pub card_lock: Option<GpuLock>,
    /// The locks of the controls an engine without the daemon changes now (the daemon has
    /// none: its card lock keeps every other engine off the card).
    pub control_locks: BTreeMap<Hold, GpuLock>,
    /// Readings of the last two minutes, for baselines.
    pub recent: VecDeque<Telemetry>,
    pub fans: FanFollower,
    pub last_change: Option<ChangeNote>,
    /// The card's last critical error and what was put back for it (`crash.rs`).
    pub last_critical: Option<CriticalNote>,
    /// When the engine last wrote to the card (real time, as the sampler stamps its reads): a
    /// settings read begun before that is stale.
    pub last_write: Option<Instant>,
    /// The GPU fell off the bus or its driver stopped answering: nothing more is written.
    pub lost: Option<String>,
    /// What a put-back could not write (the driver refused it), each control's oldest value:
    /// kept in the card's journal and written before anything else is (see `restore.rs`).
    pub unrestored: RestoreMap,
    /// When `unrestored` was last tried (the engine's clock), for trying again every
    /// [`super::UNRESTORED_RETRY`].
    pub unrestored_tried: Option<Instant>,
    /// The last failure to put `unrestored` back that was said, so each is said once.
    pub unrestored_said: Option<String>,
    /// The temperature hold the daemon keeps on the card (`temperature_hold.rs`).
    pub temperature_hold: Option<HoldKeeper>,
}

/// A temperature hold as the engine keeps it: what was asked, the control's memory, and what
/// puts the power limit back (journaled as the oldest value while the hold has written).
pub(super) struct HoldKeeper {
    pub hold: TemperatureHold,
    pub set_by: String,
    pub since_ms: u64,
    pub control: TemperatureControl,
    /// The power limit before the hold's first write; `None` until it writes.
    pub restore: Option<RestoreEntry>,
    pub state: TemperatureHoldState,
    /// After a write the driver refused: nothing is tried again before this (engine clock).
    pub quiet_until: Option<Instant>,
}

/// The fan state the engine keeps per GPU.
#[derive(Debug, Clone, Default)]
pub(super) struct FanFollower {
    /// The curve followed now.
    pub curve: Option<FanCurve>,
    /// The speed last written by the curve, to write only on change.
    pub target_pct: Option<u32>,
    /// The fans are the driver's until the card cools.
    pub safety_engaged: bool,
}

/// A session's part on one GPU.
pub(super) struct SessionGpu {
    /// The controls the session holds on the card: no other session changes them, and a
    /// plain apply of them by another client is refused.
    pub held: BTreeSet<Hold>,
    /// What the session's unkept changes replaced.
    pub restore: RestoreMap,
    pub trial: Option<Trial>,
    /// Readings since the session began.
    pub during: Vec<Telemetry>,
    /// The session follows a fan curve on this card.
    pub follows_curve: bool,
    /// The card's energy counter (mJ) when the session began: what it used since is the
    /// session's energy (a run's, a sweep's).
    pub energy_at_start_mj: Option<u64>,
    /// A job session's running figures on the card (its readings are not kept in `during`).
    pub tally: Option<crate::job_energy::tally::CardTally>,
}

pub(super) struct Session {
    pub client: ClientInfo,
    pub purpose: SessionPurpose,
    pub started_at_ms: u64,
    pub gpus: BTreeMap<u32, SessionGpu>,
    /// The process the session's client started as its job, when it said.
    pub job_pid: Option<u32>,
    /// The scheduler's job, for a session of purpose `job`.
    pub job: Option<gputune_formats::tuning::JobInfo>,
    /// The job's later steps that joined the session (`scheduler_job.rs`): it ends after the
    /// last of them and its holder.
    pub steps: Vec<super::ClientInfo>,
}

/// Where a trial is: measuring its baseline, or running until its deadline (instants of the
/// engine's clock; `ends_at_ms` the same moment as a date, for clients).
pub(super) enum Phase {
    Measuring { until: Instant },
    Running { deadline: Instant, ends_at_ms: u64 },
}

/// A trial on one GPU, inside a session.
pub(super) struct Trial {
    pub what: String,
    pub settings: Vec<ValidatedSetting>,
    pub duration: Duration,
    pub phase: Phase,
    /// When the baseline began (wall clock), to see whether a setting changed within it.
    pub baseline_from_ms: u64,
    pub baseline: Vec<Telemetry>,
    pub during: Vec<Telemetry>,
    /// What the trial's changes replaced.
    pub restore: RestoreMap,
    pub baseline_warning: Option<String>,
    /// The client that started it, to tell after its session is gone.
    pub client: Option<gputune_formats::tuning::ClientId>,
}

impl Trial {
    /// When the engine must look at the trial next.
    pub fn wakeup(&self) -> Instant {
        match self.phase {
            Phase::Measuring { until } => until,
            Phase::Running { deadline, .. } => deadline,
        }
    }

    /// Makes a measuring trial wait until `until` (a group's trials apply together).
    pub fn measure_until(&mut self, until: Instant) {
        if let Phase::Measuring { until: own } = &mut self.phase {
            *own = until;
        }
    }

    /// When it reverts, once it runs.
    pub fn ends_at_ms(&self) -> Option<u64> {
        match self.phase {
            Phase::Running { ends_at_ms, .. } => Some(ends_at_ms),
            Phase::Measuring { .. } => None,
        }
    }

    /// Files a reading under the baseline or the trial.
    pub fn observe(&mut self, reading: &Telemetry) {
        match self.phase {
            Phase::Measuring { .. } => self.baseline.push(reading.clone()),
            Phase::Running { .. } => self.during.push(reading.clone()),
        }
    }

    pub fn status(
        &self,
        index: u32,
        session: SessionId,
        message: Option<String>,
        now: Instant,
    ) -> TrialStatus {
        self.status_of(index, session, message, false, now)
    }

    pub(super) fn status_of(
        &self,
        index: u32,
        session: SessionId,
        message: Option<String>,
        failed: bool,
        now: Instant,
    ) -> TrialStatus {
        let left_s =
            |until: Instant| until.saturating_duration_since(now).as_secs_f64().ceil() as u64;
        TrialStatus {
            gpu_index: index,
            session,
            what: self.what.clone(),
            phase: match (&message, &self.phase) {
                (Some(_), _) => TrialPhase::Ended,
                (None, Phase::Measuring { until }) => TrialPhase::Measuring {
                    left_s: left_s(*until),
                },
                (None, Phase::Running { deadline, .. }) => TrialPhase::Running {
                    left_s: left_s(*deadline),
                },
            },
            baseline: TrialStats::from_samples(&self.baseline),
            during: TrialStats::from_samples(&self.during),
            baseline_warning: self.baseline_warning.clone(),
            message,
            failed,
        }
    }
}

pub(super) fn ended_status(index: u32, session: SessionId, message: &str) -> TrialStatus {
    TrialStatus {
        gpu_index: index,
        session,
        what: String::new(),
        phase: TrialPhase::Ended,
        baseline: TrialStats::default(),
        during: TrialStats::default(),
        baseline_warning: None,
        message: Some(message.to_string()),
        failed: true,
    }
}
