//! The one tuning engine. Every write to a card — the window, `apply`, `apply --try`, `run`,
//! `profile apply`, boot defaults, sweeps — goes through an [`Engine`], owned by the daemon or,
//! without one, by the process that may write. It validates through `device::gate`, journals
//! what puts a card back before any temporary change, keeps what each card runs
//! ([`SettingsInForce`](gputune_formats::tuning::SettingsInForce)), holds one session per card, follows fan curves with a safety net, ends
//! trials by the clock and puts back exactly what was there when a session ends or its client
//! goes away.
//!
//! The engine is single-threaded: the service's engine thread calls it, and it talks to the
//! driver through a [`DeviceWorker`], where every call has a deadline. Its time comes from the
//! [`Clock`] it is opened with (the wall clock in the service, a manual clock in tests).
//!
//! # Map: every way in, and where it is handled
//!
//! Requests come from clients through `service::routing` (`Router::answer`); events from the
//! service's threads (`Router::handle`) or its loop (`service::run_engine`).
//!
//! | way in | method | file, then where it leads |
//! |---|---|---|
//! | plain apply (`apply`, `profile apply`) | `apply_changes` | `apply.rs` (rollback on a refused write) |
//! | start a session (`run`, sweep, window) | `start_session` | `session.rs` (its bounds: `session_bounds.rs`, `requests.rs`) |
//! | apply inside a session | `session_apply` | `session.rs` |
//! | name a session's job | `set_session_job` | `job.rs` |
//! | a scheduler's job (Slurm, root only): its steps join one session, handed over as they go | `start_session`, `end_session`, `client_gone` | `scheduler_job.rs` (`check_job_request`, `join_job`, `leave_job`, `hand_over_job`) |
//! | end a session (keep / put back) | `end_session` | `session_end.rs` → `end_session_now` → `restore.rs::restore_map` |
//! | start a trial on one GPU | `start_trial` | `trial.rs` (baseline, then `apply_trial`) |
//! | keep / revert a trial | `finish_trial` | `trial.rs` → `trial_end.rs::finish_trial_with` |
//! | trial over several GPUs | `start_group_trial` | `group_trial.rs` (one session, ended together in `trial_end.rs`) |
//! | follow a fan curve while connected (or stop) | `set_fan_curve` | `fan_curves.rs` |
//! | keep / clear a curve with no client (daemon) | `keep_fan_curve` | `fan_curves.rs` |
//! | keep / clear a temperature hold (daemon) | `keep_temperature_hold` | `temperature_hold.rs` (the control: `tuning::temperature_control`; paused while a session holds the power limit) |
//! | boot defaults, at daemon start | `tuning::boot_defaults::BootDefaultStore::apply_all` | → `apply_changes` + `keep_fan_curve` |
//! | check a boot default before storing it | `check_settings`, `check_fan_curve` | `mod.rs`, `apply.rs` |
//! | a round of readings | `on_samples` | `card_events.rs` → `session.rs::record_in_sessions`, `fan_safety_net.rs::drive_fans` (the fan safety net, then the curve), `temperature_hold.rs::drive_temperature_hold`, `trial.rs::trial_progress` |
//! | settings read back by the sampler | `on_settings` | `card_events.rs` (a change nobody here made) |
//! | critical error (Xid) | `on_critical_event` | `crash.rs` (by the Xid's class, `device::xid`: clock offsets and locks → `restore.rs::restore_settings`, never fans; its one sentence in `crash_sentence.rs`) → `session_end.rs::end_session_now` / `trial_end.rs::finish_trial_with` for their holders |
//! | GPU lost (off the bus, driver gone) | `gpu_lost` (from `on_samples`; `write` marks it) | `card_events.rs` → every session on it ends, what cannot be written kept in its journal |
//! | client gone (closed window, killed `run`) | `client_gone` (from `Router::drop_client`) | `session_end.rs` → `end_session_now` → `restore.rs` |
//! | time passing: baselines, deadlines, retries | `tick` (when `next_wakeup` says) | `trial.rs` → `apply_trial`, `trial_end.rs`, `restore.rs::retry_unrestored` |
//! | start, with journals left behind | `Engine::open` | `open.rs` → `journals_left.rs::restore_pending`, `box_journal.rs::box_check_left` (a box check the machine went down in) |
//! | a box check (purpose `box_check`) | `start_session`, `on_samples`, `end_session_now` | `box_journal.rs`: journal written before the load, updated each second, removed at the end |
//! | a gputune without the daemon, at start | `restore_left_changes` | `open.rs` → `Engine::open` |
//! | the service stops | `shutdown` | `mod.rs` → `end_session_now` for every session |
//! | a job's energy and cost (sessions of purpose `job`) | `record_in_sessions` → `tally_job`; `end_session_now` → `job_record`; the service takes them with `take_job_records` | `job_record.rs` (the figures: `job_energy::tally`) |
//!
//! Shared by all of them: `mod.rs` (the `Engine`, writes through the gate, change notes),
//! `apply.rs::write_temporary` (journal first, then write), `journal.rs` (a card's journal),
//! `locks.rs` (cards' and controls' locks), `restore.rs` (put-backs and their retries).
//!
//! The files import in a line, never in a circle: `types.rs` (what crosses to clients: the
//! types are defined in `formats::tuning`, their methods and `ClientInfo` here) ←
//! `requests.rs` (the bounds on requests), `state.rs` (what the engine keeps: `Gpu`,
//! `Session`, `SessionGpu`, `Trial`, `FanFollower`) ← `mod.rs` (the `Engine`) ← the files
//! above. The rule: a file imports only from `mod.rs` (which re-exports `types.rs` and
//! `requests.rs`), `state.rs`, and `restore.rs`'s two put-back sentences (`describe_left`,
//! `retry_sentence`, which `apply.rs`, `trial_end.rs` and `journals_left.rs` tell); nothing
//! else is imported from a sibling. The files reach each other's steps only through the
//! `Engine`'s `pub(super)` methods, one type's `impl` split by what each step does.
//! `mod.rs` names each file and re-exports what clients use.

use crate::tuning::in_force::ControlsInForce;
mod apply;
mod box_journal;
mod card_events;
mod crash;
mod crash_sentence;
mod fan_curves;
mod fan_safety_net;
mod group_trial;
mod job;
mod job_record;
mod journal;
mod journals_left;
mod locks;
mod open;
mod requests;
mod restore;
mod scheduler_job;
mod session;
mod session_bounds;
mod session_end;
mod state;
mod temperature_hold;
mod trial;
mod trial_end;
mod types;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use box_journal::{BOX_JOURNAL_FILE, WENT_DOWN};
use gputune_formats::tuning::{
    ChangeNote, EngineEvent, GpuInfo, GpuTuning, SessionId, SessionReport, SettingLeft, TuneError,
    TuneErrorKind,
};
pub use open::{EngineOptions, held_elsewhere, recorded_locks, restore_left_changes};
pub use requests::*;
use requests::{check_change_count, check_settings_count};
pub use temperature_hold::HOLD_REFUSED_WAIT;
pub use types::*;

use crate::clock::Clock;
use crate::device::gate::{ValidatedSetting, validate};
use crate::device::worker::DeviceWorker;
use crate::tuning::in_force::Control;
use crate::tuning::state_folder::StateFolder;
use gputune_formats::card::{BackendKind, DeviceError, Setting};
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::Notice;

use state::{Gpu, Session};
pub(crate) use state::{Layer, RestoreEntry, RestoreMap};

/// Said when a put-back reset a clock lock instead of restoring it. What happened, and only
/// what gputune knows: the card may have been unlocked, or locked by another tool.
pub const UNKNOWN_LOCK_RESET: &str = "its clocks were reset to the driver's default range (unlocked). gputune had no earlier lock on record to put back: NVML cannot read clock locks, and none was set through gputune since the driver started (if another tool had locked them, lock them again there).";

/// How often the engine tries again to put back what the driver refused to take back: a fan
/// left at a fixed speed or a limit left raised must not wait for the next command.
pub const UNRESTORED_RETRY: Duration = Duration::from_secs(10);

/// Who owns the engine, which decides how it holds the cards' locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The daemon: it holds every card's lock for as long as it runs.
    Daemon,
    /// A gputune process without a daemon: a card's lock is taken for an apply or a session
    /// and given back after, so the next gputune process can change the card too.
    InProcess,
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
    /// Where the engine's time comes from: trials' deadlines, baselines, retries, and the
    /// dates it records. The wall clock in the service; a manual clock in tests.
    clock: Arc<dyn Clock>,
    /// The price a job record's cost is worked out at (the daemon's cost.toml).
    job_price: Option<crate::job_energy::cost::Price>,
    /// Records of the jobs ended since the service last took them ([`Engine::take_job_records`]).
    ended_jobs: Vec<gputune_formats::jobs::JobRecord>,
    /// The box check journaled now (`box_journal.rs`).
    box_check: Option<box_journal::BoxCheckKept>,
    /// The folder of the box-check journal ([`EngineOptions::box_journal_dir`]).
    box_folder: std::path::PathBuf,
    /// A box check ended with the machine up ([`Engine::take_box_check_ended`]).
    box_check_ended_up: bool,
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
            last_critical: gpu.last_critical.clone(),
            temperature_hold: self.temperature_hold_status(index),
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
        // Real time, not the engine's clock: the sampler stamps its reads with `Instant::now()`.
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

    /// Notes who changed what on GPU `index`, and tells every client.
    fn note_change(&mut self, index: u32, by: &str, what: String) {
        if what.is_empty() {
            return;
        }
        self.gpu_mut(index).last_change = Some(ChangeNote {
            at_ms: self.clock.now_ms(),
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

    /// Reverts every session and temperature hold (the daemon or the window is stopping).
    /// Kept settings stay.
    pub fn shutdown(&mut self) {
        let ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for id in ids {
            let report = self.end_session_now(id, false, "gputune is stopping: put back");
            for line in report_lines(&report) {
                tracing::warn!("{line}");
            }
        }
        // After the sessions: what a paused hold's session put back is the hold's to undo.
        self.clear_temperature_holds();
    }
}

/// Lines for people about a session's end: one per GPU restored, one per setting left.
pub fn report_lines(report: &SessionReport) -> Vec<String> {
    let mut lines = Vec::new();
    for gpu in &report.restored {
        if !gpu.restored.is_empty() {
            let restored = crate::tuning::describe_all(&gpu.restored);
            lines.push(match report.critical_event {
                // The message is the crash's whole sentence.
                Some(_) => format!(
                    "{} Put back on GPU {}: {restored}.",
                    report.message, gpu.gpu_index
                ),
                None => format!("{} GPU {} ({restored}).", report.message, gpu.gpu_index),
            });
        }
        for SettingLeft { setting, reason } in &gpu.left {
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
        let message = report.message.trim_end_matches('.');
        lines.push(format!("{message}."));
    }
    lines
}
