//! The one tuning engine. Every write to a card — the window, `apply`, `apply --try`, `run`,
//! `profile apply`, boot defaults, sweeps — goes through an [`Engine`], owned by the daemon or,
//! without one, by the process that may write. It validates through `device::gate`, journals
//! what puts a card back before any temporary change, keeps what each card runs
//! ([`SettingsInForce`]), holds one session per card, follows fan curves with a safety net, ends
//! trials by the clock and puts back exactly what was there when a session ends or its client
//! goes away.
//!
//! The engine is single-threaded: the service's engine thread calls it, and it talks to the
//! driver through a [`DeviceWorker`], where every call has a deadline.

mod apply;
mod fans;
mod group_trial;
mod job;
mod open;
mod restore;
mod session;
mod trial;
mod trial_end;
mod types;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

pub use group_trial::GroupTrialRequest;
pub use open::{EngineOptions, held_elsewhere, recorded_locks, restore_left_changes};
pub use session::{SessionRequest, SessionStarted};
pub use trial::{LONGEST_BASELINE_S, LONGEST_TRIAL_S, TrialRequest};
pub use types::*;

use crate::device::gate::{ValidatedSetting, validate};
use crate::device::sim::wall_clock_ms;
use crate::device::worker::DeviceWorker;
use crate::device::{
    BackendKind, Constraints, CriticalEvent, CurrentSettings, DeviceError, GpuIdentity, Setting,
    Telemetry,
};
use crate::notice::Notice;
use crate::tuning::in_force::{ClockLock, Control, Hold, SettingsInForce};
use crate::tuning::state_folder::{GpuJournal, GpuLock, LockRefused, StateFolder};

use fans::FanFollower;
use session::Session;

/// How much recent history each GPU keeps, for trial baselines.
const RECENT_WINDOW_MS: u64 = 120_000;

/// Said when a put-back reset a clock lock instead of restoring it: true whether the lock was
/// set by another tool or never set since the driver started.
pub const UNKNOWN_LOCK_RESET: &str = "its clock lock before was not known to gputune (NVML cannot read clock locks, and no gputune had recorded one since the driver started), so it was reset to unlocked rather than restored.";

/// How often the engine tries again to put back what the driver refused to take back: a fan
/// left at a fixed speed or a limit left raised must not wait for the next command.
pub const UNRESTORED_RETRY: Duration = Duration::from_secs(10);

/// What puts controls back: for each, the setting that restores it and whether exactly.
pub(crate) type RestoreMap = BTreeMap<Control, (Setting, bool)>;

/// Where a temporary change is recorded, oldest first: the journal restores the oldest value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    Session = 0,
    Trial = 1,
    /// A plain apply in progress: permanent once it succeeds.
    Pending = 2,
}

/// Who owns the engine, which decides how it holds the cards' locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The daemon: it holds every card's lock for as long as it runs.
    Daemon,
    /// A gputune process without a daemon: a card's lock is taken for an apply or a session
    /// and given back after, so the next gputune process can change the card too.
    InProcess,
}

/// A GPU as the engine found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub identity: GpuIdentity,
    pub constraints: Constraints,
}

use serde::{Deserialize, Serialize};

/// One GPU's state in the engine.
struct Gpu {
    info: GpuInfo,
    in_force: SettingsInForce,
    /// The card's lock: the daemon's alone for its life; an engine without the daemon shares
    /// it with other gputune processes while it holds control locks.
    card_lock: Option<GpuLock>,
    /// The locks of the controls an engine without the daemon changes now (the daemon has
    /// none: its card lock keeps every other engine off the card).
    control_locks: BTreeMap<Hold, GpuLock>,
    /// Readings of the last two minutes, for baselines.
    recent: VecDeque<Telemetry>,
    fans: FanFollower,
    last_change: Option<ChangeNote>,
    /// When the engine last wrote to the card: a settings read begun before that is stale.
    last_write: Option<Instant>,
    /// The GPU fell off the bus or its driver stopped answering: nothing more is written.
    lost: Option<String>,
    /// What a put-back could not write (the driver refused it), each control's oldest value:
    /// kept in the card's journal and written before anything else is (see `restore.rs`).
    unrestored: RestoreMap,
    /// When `unrestored` was last tried, for trying again every [`UNRESTORED_RETRY`].
    unrestored_tried: Option<Instant>,
    /// The last failure to put `unrestored` back that was said, so each is said once.
    unrestored_said: Option<String>,
}

/// See the module documentation.
pub struct Engine {
    worker: DeviceWorker,
    backend_kind: BackendKind,
    call_timeout: Duration,
    ownership: Ownership,
    folder: StateFolder,
    gpus: Vec<Gpu>,
    sessions: BTreeMap<SessionId, Session>,
    next_session: SessionId,
    /// Events for the service to route; taken with [`Engine::take_events`].
    events: Vec<EngineEvent>,
}

impl Engine {
    /// The GPUs, in index order.
    pub fn gpus(&self) -> Vec<GpuInfo> {
        self.gpus.iter().map(|gpu| gpu.info.clone()).collect()
    }

    pub fn backend_kind(&self) -> BackendKind {
        self.backend_kind
    }

    /// Tuning state of every GPU.
    pub fn tunings(&self) -> Vec<GpuTuning> {
        (0..self.gpus.len() as u32)
            .filter_map(|index| self.tuning(index))
            .collect()
    }

    /// Tuning state of one GPU.
    pub fn tuning(&self, index: u32) -> Option<GpuTuning> {
        let gpu = self.gpus.get(index as usize)?;
        Some(GpuTuning {
            gpu_index: index,
            gpu_uuid: gpu.info.identity.uuid.clone(),
            in_force: gpu.in_force.clone(),
            fan_curve: gpu.fans.curve.clone(),
            fan_safety_engaged: gpu.fans.safety_engaged,
            holders: self
                .sessions_on(index)
                .into_iter()
                .filter_map(|id| self.holder_of(id, index))
                .collect(),
            last_change: gpu.last_change.clone(),
        })
    }

    /// The events produced since the last call.
    pub fn take_events(&mut self) -> Vec<EngineEvent> {
        std::mem::take(&mut self.events)
    }

    /// When the engine next needs [`Engine::tick`] (a trial's deadline or end of baseline).
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.sessions
            .values()
            .flat_map(|session| session.gpus.values())
            .filter_map(|part| part.trial.as_ref().map(|trial| trial.wakeup()))
            .min()
    }

    /// Index of the GPU with this UUID, for clients.
    pub fn gpu_index(&self, uuid: &str) -> Result<u32, TuneError> {
        self.index_of(uuid)
    }

    /// Whether every setting would pass the gate on GPU `index` (nothing is written).
    pub fn check_settings(&self, index: u32, settings: &[Setting]) -> Result<(), TuneError> {
        if index as usize >= self.gpus.len() {
            return Err(TuneError::new(
                TuneErrorKind::NotFound,
                format!("There is no GPU {index}."),
            ));
        }
        self.validate_all(index, settings).map(|_| ())
    }

    /// Index of the GPU with this UUID.
    fn index_of(&self, uuid: &str) -> Result<u32, TuneError> {
        self.gpus
            .iter()
            .position(|gpu| gpu.info.identity.uuid.eq_ignore_ascii_case(uuid.trim()))
            .map(|index| index as u32)
            .ok_or_else(|| {
                TuneError::new(
                    TuneErrorKind::NotFound,
                    format!(
                        "No GPU has the UUID \"{}\": see `gputune status`.",
                        crate::text::printable(uuid)
                    ),
                )
            })
    }

    fn gpu(&self, index: u32) -> &Gpu {
        &self.gpus[index as usize]
    }

    fn gpu_mut(&mut self, index: u32) -> &mut Gpu {
        &mut self.gpus[index as usize]
    }

    /// Every setting through the gate for GPU `index`: all of them, or the first refusal.
    fn validate_all(
        &self,
        index: u32,
        settings: &[Setting],
    ) -> Result<Vec<ValidatedSetting>, TuneError> {
        let constraints = &self.gpu(index).info.constraints;
        settings
            .iter()
            .map(|setting| {
                validate(constraints, *setting).map_err(|error| {
                    TuneError::new(TuneErrorKind::Refused, format!("GPU {index}: {error}"))
                })
            })
            .collect()
    }

    /// Refuses when GPU `index` fell off the bus earlier.
    fn check_present(&self, index: u32) -> Result<(), TuneError> {
        match &self.gpu(index).lost {
            Some(reason) => Err(TuneError::new(
                TuneErrorKind::Device,
                format!("GPU {index} is not answering ({reason}); nothing is sent to it."),
            )),
            None => Ok(()),
        }
    }

    /// Writes one validated setting through the worker, with the deadline.
    fn write(&mut self, index: u32, setting: ValidatedSetting) -> Result<(), DeviceError> {
        let what = format!(
            "writing the {} on GPU {index}",
            setting.setting().describe()
        );
        let result = self.worker.call(&what, self.call_timeout, move |backend| {
            backend.apply(index, &setting)
        });
        self.gpu_mut(index).last_write = Some(Instant::now());
        match &result {
            Ok(()) => {
                let gpu = self.gpu_mut(index);
                gpu.in_force.record_applied(setting.setting());
                if matches!(
                    Control::of(setting.setting()),
                    Control::GpuClockLock | Control::MemoryClockLock
                ) {
                    let (uuid, locks) = (gpu.info.identity.uuid.clone(), gpu.in_force.locks());
                    if let Err(error) = self.folder.write_locks(&uuid, locks) {
                        tracing::warn!("the clock-lock record could not be written: {error}");
                    }
                }
            }
            Err(error) if error.is_fatal() => {
                self.gpu_mut(index).lost = Some(error.to_string());
            }
            Err(_) => {}
        }
        result
    }

    /// Reads GPU `index`'s settings back now and takes them in.
    fn refresh_settings(&mut self, index: u32) {
        let what = format!("reading the settings of GPU {index}");
        let read = self.worker.call(&what, self.call_timeout, move |backend| {
            backend.current_settings(index)
        });
        match read {
            Ok(current) => self.gpu_mut(index).in_force.refresh_from_card(&current),
            Err(error) => tracing::warn!("GPU {index}: {error}"),
        }
    }

    /// The enforced power limit, read now.
    fn read_enforced_limit(&mut self, index: u32) -> Option<u32> {
        let what = format!("reading the enforced power limit of GPU {index}");
        self.worker
            .call(&what, self.call_timeout, move |backend| {
                backend.enforced_power_limit(index)
            })
            .ok()
            .flatten()
    }

    /// Writes GPU `index`'s journal: for every control changed temporarily, the oldest value
    /// (what the card had before any of it). The sessions on the card hold different controls,
    /// so their layers never name the same control: each session's own changes, then its
    /// trial's, then what an earlier put-back could not write, then a pending apply's.
    /// `replacing` stands in for one of those layers while its owner edits it.
    ///
    /// What could not be put back comes after the sessions' layers: nothing new is written to a
    /// card while it waits, so it can only be older than a session that began before it failed.
    ///
    /// Without the daemon, other gputune processes may hold other controls of the card and keep
    /// their entries in the same file: the file is rewritten under its journal lock, with this
    /// engine's entries for the controls it holds and every other entry as it was.
    fn write_journal(
        &self,
        index: u32,
        replacing: Option<(&RestoreMap, Layer)>,
    ) -> Result<(), TuneError> {
        let gpu = self.gpu(index);
        let parts: Vec<&session::SessionGpu> = self
            .sessions_on(index)
            .into_iter()
            .filter_map(|id| self.sessions.get(&id)?.gpus.get(&index))
            .collect();
        let mut layers: Vec<&RestoreMap> = parts.iter().map(|part| &part.restore).collect();
        let replaced = |layer: Layer| {
            replacing
                .filter(|(_, replaced)| *replaced == layer)
                .map(|(map, _)| map)
        };
        layers.extend(replaced(Layer::Session));
        layers.extend(
            parts
                .iter()
                .filter_map(|part| part.trial.as_ref().map(|trial| &trial.restore)),
        );
        layers.extend(replaced(Layer::Trial));
        layers.push(&gpu.unrestored);
        layers.extend(replaced(Layer::Pending));
        let mut merged: RestoreMap = BTreeMap::new();
        for layer in layers {
            for (control, value) in layer {
                merged.entry(*control).or_insert(*value);
            }
        }
        let mut by: Vec<String> = Vec::new();
        for id in self.sessions_on(index) {
            if let Some(session) = self.sessions.get(&id) {
                let described = session.client.describe();
                if !by.contains(&described) {
                    by.push(described);
                }
            }
        }
        let mut restore: Vec<crate::device::Setting> =
            merged.values().map(|(setting, _)| *setting).collect();
        let uuid = &gpu.info.identity.uuid;
        let state_error = |message: String| {
            TuneError::new(
                TuneErrorKind::State,
                format!(
                    "{message} Nothing more was changed: gputune writes down how to undo a change before making it."
                ),
            )
        };
        let _journal_lock = if self.ownership == Ownership::InProcess {
            let lock = self.folder.lock_journal(uuid).map_err(|refused| {
                state_error(refused.message(index, "its journal could not be rewritten."))
            })?;
            // Other processes' entries: the controls this engine does not hold.
            match self.folder.read_journal(uuid) {
                Ok(Some(theirs)) if theirs.backend == self.backend_kind => {
                    let kept: Vec<crate::device::Setting> = theirs
                        .restore
                        .iter()
                        .filter(|setting| {
                            let control = Control::of(setting);
                            !merged.contains_key(&control)
                                && !gpu.control_locks.contains_key(&control.hold())
                        })
                        .copied()
                        .collect();
                    if !kept.is_empty() && !by.contains(&theirs.by) {
                        by.push(theirs.by.clone());
                    }
                    restore.extend(kept);
                }
                Ok(_) => {}
                Err(problem) => tracing::warn!("{}", problem.message),
            }
            Some(lock)
        } else {
            None
        };
        let by = if by.is_empty() {
            "gputune".to_string()
        } else {
            by.join(" and ")
        };
        let journal = GpuJournal::new(self.backend_kind, uuid, index, restore, &by);
        self.folder
            .write_journal(&journal)
            .map_err(|error| state_error(error.to_string()))
    }

    /// The sessions with a part on GPU `index`, oldest first.
    fn sessions_on(&self, index: u32) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, session)| session.gpus.contains_key(&index))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The session that holds `hold` on GPU `index`, if one does.
    fn holding(&self, index: u32, hold: Hold) -> Option<SessionId> {
        self.sessions
            .iter()
            .find(|(_, session)| {
                session
                    .gpus
                    .get(&index)
                    .is_some_and(|part| part.held.contains(&hold))
            })
            .map(|(id, _)| *id)
    }

    /// Takes the locks of `holds` on GPU `index` for `by` when the engine does not hold them
    /// already, and catches up with what other gputune processes did to those controls
    /// meanwhile. The daemon holds every card's lock for its life; an engine without it shares
    /// the card's lock and takes one lock per control.
    fn take_locks(
        &mut self,
        index: u32,
        by: &str,
        holds: &std::collections::BTreeSet<Hold>,
    ) -> Result<(), TuneError> {
        if self.ownership == Ownership::InProcess {
            let uuid = self.gpu(index).info.identity.uuid.clone();
            let refusal = |refused: LockRefused, message: String| {
                let kind = match refused {
                    LockRefused::Held { .. } => TuneErrorKind::Held,
                    LockRefused::Unusable { .. } => TuneErrorKind::State,
                };
                TuneError::new(kind, message)
            };
            if self.gpu(index).card_lock.is_none() {
                let lock = self.folder.try_lock_shared(&uuid, by).map_err(|refused| {
                    let message =
                        refused.message(index, "wait for it to finish, or stop it first.");
                    refusal(refused, message)
                })?;
                self.gpu_mut(index).card_lock = Some(lock);
            }
            let mut newly = Vec::new();
            for &hold in holds {
                if self.gpu(index).control_locks.contains_key(&hold) {
                    continue;
                }
                match self.folder.try_lock_control(&uuid, hold, by) {
                    Ok(lock) => {
                        self.gpu_mut(index).control_locks.insert(hold, lock);
                        newly.push(hold);
                    }
                    Err(refused) => {
                        // Only what this call took goes back.
                        let gpu = self.gpu_mut(index);
                        for hold in &newly {
                            gpu.control_locks.remove(hold);
                        }
                        if gpu.control_locks.is_empty() {
                            gpu.card_lock = None;
                        }
                        let (what, verb) = crate::tuning::in_force::describe_holds(&[hold]);
                        let message = match &refused {
                            LockRefused::Held { holder } => format!(
                                "GPU {index}'s {what} {verb} being changed by {holder}: wait for it to finish, or stop it first."
                            ),
                            LockRefused::Unusable { .. } => refused.message(index, ""),
                        };
                        return Err(refusal(refused, message));
                    }
                }
            }
            if !newly.is_empty() {
                // Another process may have changed the card since this engine last looked:
                // what a session would put back must be what the card runs now.
                self.refresh_settings(index);
                self.take_in_journal(index, &newly);
            }
        }
        self.take_in_lock_record(index);
        Ok(())
    }

    /// Takes in the clock locks recorded for GPU `index`: another gputune (an in-process
    /// engine beside the daemon) may have set them. A recorded value wins over what this engine
    /// remembers, which only it wrote to the same record.
    fn take_in_lock_record(&mut self, index: u32) {
        let uuid = &self.gpu(index).info.identity.uuid;
        let Some(recorded) = self.folder.read_locks(uuid) else {
            return;
        };
        // A lock a session of this engine holds is this engine's to know.
        let gpu_free = self.holding(index, Hold::GpuClockLock).is_none();
        let memory_free = self.holding(index, Hold::MemoryClockLock).is_none();
        let in_force = &mut self.gpu_mut(index).in_force;
        if gpu_free && recorded.gpu_clock_lock != ClockLock::Unknown {
            in_force.gpu_clock_lock = recorded.gpu_clock_lock;
        }
        if memory_free && recorded.memory_clock_lock != ClockLock::Unknown {
            in_force.memory_clock_lock = recorded.memory_clock_lock;
        }
    }

    /// Gives back the locks of GPU `index`'s controls that no session holds and no put-back
    /// waits for, and the card's lock with the last of them (in-process engines only). A
    /// control whose put-back the driver refused stays locked: this engine tries it again and
    /// no other process writes over it meanwhile.
    fn release_lock(&mut self, index: u32) {
        if self.ownership != Ownership::InProcess {
            return;
        }
        let needed: std::collections::BTreeSet<Hold> = Hold::ALL
            .into_iter()
            .filter(|hold| {
                self.holding(index, *hold).is_some()
                    || self
                        .gpu(index)
                        .unrestored
                        .keys()
                        .any(|control| control.hold() == *hold)
            })
            .collect();
        let gpu = self.gpu_mut(index);
        gpu.control_locks.retain(|hold, _| needed.contains(hold));
        if gpu.control_locks.is_empty() {
            gpu.card_lock = None;
        }
    }

    /// Notes who changed what on GPU `index`, and tells every client.
    fn note_change(&mut self, index: u32, by: &str, what: String) {
        if what.is_empty() {
            return;
        }
        self.gpu_mut(index).last_change = Some(ChangeNote {
            at_ms: wall_clock_ms(),
            by: by.to_string(),
            what,
        });
        self.announce(index);
    }

    /// Tells every client GPU `index`'s tuning state.
    fn announce(&mut self, index: u32) {
        if let Some(tuning) = self.tuning(index) {
            self.events.push(EngineEvent::Tuning { tuning });
        }
    }

    fn notice(&mut self, gpu_index: Option<u32>, notice: Notice) {
        match &notice {
            Notice::Error(text) => tracing::error!("{text}"),
            Notice::Warning(text) => tracing::warn!("{text}"),
            Notice::Info(text) => tracing::info!("{text}"),
        }
        self.events.push(EngineEvent::Notice { gpu_index, notice });
    }

    /// Takes in a round of readings (one per GPU, in index order): baselines, sessions, trials
    /// and fan curves follow them.
    pub fn on_samples(&mut self, readings: &[Result<Telemetry, DeviceError>]) {
        for (index, reading) in readings.iter().enumerate().take(self.gpus.len()) {
            let index = index as u32;
            let reading = match reading {
                Ok(reading) => reading,
                Err(error) if error.is_fatal() => {
                    self.gpu_lost(index, error);
                    continue;
                }
                Err(_) => continue,
            };
            let gpu = self.gpu_mut(index);
            // It answers: whatever was lost is back.
            gpu.lost = None;
            gpu.recent.push_back(reading.clone());
            while gpu.recent.front().is_some_and(|oldest| {
                reading.sampled_at_ms.saturating_sub(oldest.sampled_at_ms) > RECENT_WINDOW_MS
            }) {
                gpu.recent.pop_front();
            }
            self.record_in_sessions(index, reading);
            self.drive_fans(index, reading);
        }
        self.trial_progress();
    }

    /// GPU `index` stopped answering: the sessions on it end (what cannot be put back stays in
    /// its journal for when the card is back), and their clients are told.
    fn gpu_lost(&mut self, index: u32, error: &DeviceError) {
        let first_time = self.gpu(index).lost.is_none();
        self.gpu_mut(index).lost = Some(error.to_string());
        let ids = self.sessions_on(index);
        if ids.is_empty() {
            if first_time {
                self.announce(index);
            }
            return;
        }
        let reason = format!("{error} Its session ended:");
        for id in ids {
            if self.trial_only(id, index) {
                self.finish_trial_with(id, index, false, &reason, true);
                continue;
            }
            let client = self.sessions.get(&id).map(|session| session.client.id);
            let report = self.end_session_now(id, false, &reason);
            if let Some(client) = client {
                self.events
                    .push(EngineEvent::SessionEnded { client, report });
            }
        }
    }

    /// Whether session `id` is a trial session with a trial on GPU `index` (ending the trial
    /// ends it).
    fn trial_only(&self, id: SessionId, index: u32) -> bool {
        self.sessions.get(&id).is_some_and(|session| {
            session.purpose == SessionPurpose::Trial
                && session
                    .gpus
                    .get(&index)
                    .is_some_and(|part| part.trial.is_some())
        })
    }

    /// The driver reported a critical error: every session on that GPU ends at once, everything
    /// it changed put back (an unstable setting must not stay), and every client is told.
    pub fn on_critical_event(&mut self, event: CriticalEvent) {
        let index = event.gpu_index;
        if index as usize >= self.gpus.len() {
            return;
        }
        let what = format!(
            "GPU {index} reported Xid {} ({})",
            event.xid,
            event.meaning()
        );
        let ids = self.sessions_on(index);
        if ids.is_empty() {
            self.notice(Some(index), Notice::Warning(format!("{what}.")));
            self.events.push(EngineEvent::Critical { critical: event });
            return;
        }
        for id in ids {
            let (client, purpose, by) = match self.sessions.get(&id) {
                Some(session) => (
                    session.client.id,
                    session.purpose,
                    session.client.describe(),
                ),
                None => continue,
            };
            let reason = format!("Xid {} ({}); put back at once:", event.xid, event.meaning());
            if self.trial_only(id, index) {
                self.finish_trial_with(id, index, false, &reason, true);
            } else {
                let mut report = self.end_session_now(
                    id,
                    false,
                    &format!("{what}; everything the session changed was put back at once"),
                );
                report.critical_event = Some(event);
                self.events
                    .push(EngineEvent::SessionEnded { client, report });
            }
            self.notice(
                Some(index),
                Notice::Error(format!(
                    "{what} during {} of {by}; everything it changed was put back.",
                    purpose.describe()
                )),
            );
        }
        // After the sessions' ends: a client that holds one hears it was put back first.
        self.events.push(EngineEvent::Critical { critical: event });
    }

    /// Takes in settings read back from GPU `index` by the sampler, whose read began at
    /// `read_started`: a change nobody here made is somebody else's.
    pub fn on_settings(&mut self, index: u32, current: &CurrentSettings, read_started: Instant) {
        let Some(gpu) = self.gpus.get_mut(index as usize) else {
            return;
        };
        // A read begun before the engine's last write may show the value before it.
        if gpu
            .last_write
            .is_some_and(|written| read_started <= written)
        {
            return;
        }
        let before = gpu.in_force.clone();
        gpu.in_force.refresh_from_card(current);
        let changed = gpu.in_force.readable_differences(&before);
        if changed.is_empty() {
            return;
        }
        let what = changed
            .iter()
            .map(|control| control.describe())
            .collect::<Vec<_>>()
            .join(", ");
        self.note_change(index, "another program", format!("{what} changed"));
    }

    /// Reverts every session (the daemon or the window is stopping). Kept settings stay.
    pub fn shutdown(&mut self) {
        let ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for id in ids {
            let report = self.end_session_now(id, false, "gputune is stopping: put back");
            for line in report_lines(&report) {
                tracing::warn!("{line}");
            }
        }
    }
}

/// Lines for people about a session's end: one per GPU restored, one per setting left.
pub fn report_lines(report: &SessionReport) -> Vec<String> {
    let mut lines = Vec::new();
    for gpu in &report.restored {
        if !gpu.restored.is_empty() {
            lines.push(format!(
                "{} GPU {} ({}).",
                report.message,
                gpu.gpu_index,
                crate::tuning::describe_all(&gpu.restored)
            ));
        }
        for (setting, reason) in &gpu.left {
            lines.push(format!(
                "Could not put back the {} on GPU {} ({}): {reason}",
                setting.describe(),
                gpu.gpu_index,
                gpu.gpu_uuid
            ));
        }
        if !gpu.exact {
            lines.push(format!("GPU {}: {UNKNOWN_LOCK_RESET}", gpu.gpu_index));
        }
    }
    if lines.is_empty() {
        lines.push(format!("{}.", report.message));
    }
    lines
}
