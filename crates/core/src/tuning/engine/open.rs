//! Starting an engine: the GPUs, what they run, the locks, and the journals left to restore.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::state::{FanFollower, Gpu};
use super::{Engine, Ownership};
use crate::clock::Clock;
use crate::device::worker::DeviceWorker;
use crate::device::{Backend, CurrentSettings};
use crate::folders::Folders;
use crate::tuning::gpu_locks::LockRefused;
use crate::tuning::in_force::ControlsInForce;
use crate::tuning::lock_evidence::borne_out;
use crate::tuning::state_folder::{SHARED_RECORD_DIR, StateFolder};
use gputune_formats::card::BackendKind;
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::SettingsInForce;
use gputune_formats::tuning::{GpuInfo, TuneError, TuneErrorKind};

/// How an engine is set up.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Where its locks, journals and clock-lock records live.
    pub state_dir: PathBuf,
    /// Where an engine other than the daemon records the clock locks it sets, when named
    /// (`Folders::record_dir`); `None`: see [`shared_record_dir`].
    pub record_dir: Option<PathBuf>,
    pub ownership: Ownership,
    /// The deadline of one driver call.
    pub call_timeout: Duration,
    /// Describes the owner in the locks it holds ("the gputune daemon (pid 1)").
    pub owner_label: String,
    /// Where the box-check journal goes: a folder that survives a reboot, since the journal
    /// exists to say a power cut at the next start (the daemon's `/var/lib/gputune/box-check`;
    /// its state folder is on `/run`, a tmpfs emptied at boot). `None`: the state folder (an
    /// engine without the daemon, whose state folder is in the user's home).
    pub box_journal_dir: Option<PathBuf>,
}

impl Engine {
    /// Opens the engine on `backend`: reads every GPU, takes the locks (the daemon holds them
    /// all), and restores what journals left by a gputune that ended badly say. The notices say
    /// what was restored or could not be. Trials end, baselines and retries wait, and changes
    /// are dated by `clock` (the service passes the wall clock; tests a manual one).
    pub fn open(
        backend: Box<dyn Backend>,
        options: &EngineOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<(Engine, Vec<Notice>), TuneError> {
        let mut folder = StateFolder::open(&options.state_dir).map_err(|error| {
            TuneError::new(
                TuneErrorKind::State,
                format!("gputune's state folder cannot be used: {error}"),
            )
        })?;
        let backend_kind = backend.kind();
        let mut early_notices = Vec::new();
        if let Some(records) =
            shared_record_dir(options.ownership, backend_kind, options.record_dir.as_ref())
                .filter(|records| records.as_path() != folder.dir())
        {
            match folder.clone().with_record_folder(&records) {
                Ok(shared) => folder = shared,
                Err(error) => early_notices.push(Notice::Warning(format!(
                    "The clock locks this gputune sets are recorded in {} only, so the gputune daemon will not know them: {error}",
                    folder.dir().display()
                ))),
            }
        }
        let box_folder = box_folder(options, &folder, &mut early_notices);
        let mut worker = DeviceWorker::start(backend, "gputune-engine");
        let timeout = options.call_timeout;
        let device = |error: gputune_formats::card::DeviceError| TuneError::device(&error, "");
        let count = worker
            .call("counting the GPUs", timeout, |backend| backend.gpu_count())
            .map_err(device)?;
        let mut gpus = Vec::new();
        for index in 0..count {
            let what = format!("reading GPU {index}");
            let (identity, constraints, current, reading) = worker
                .call(&what, timeout, move |backend| {
                    let identity = backend.identity(index)?;
                    let constraints = backend.constraints(index)?;
                    // A card that cannot report its settings is still one to monitor.
                    let current = backend.current_settings(index).unwrap_or_else(|error| {
                        tracing::warn!("GPU {index}: its settings cannot be read: {error}");
                        CurrentSettings::default()
                    });
                    // Its clocks now: a recorded lock they contradict is not believed.
                    let reading = backend.telemetry(index).ok();
                    Ok((identity, constraints, current, reading))
                })
                .map_err(device)?;
            let recorded = folder.read_locks(&identity.uuid).unwrap_or_default();
            let locks = match &reading {
                Some(reading) => borne_out(recorded, reading),
                None => recorded,
            };
            gpus.push(Gpu {
                info: GpuInfo {
                    identity,
                    constraints,
                },
                in_force: SettingsInForce::from_card(&current, locks),
                card_lock: None,
                control_locks: BTreeMap::new(),
                recent: VecDeque::new(),
                fans: FanFollower::default(),
                last_change: None,
                last_critical: None,
                last_write: None,
                lost: None,
                unrestored: BTreeMap::new(),
                unrestored_tried: None,
                unrestored_said: None,
                temperature_hold: None,
            });
        }
        let mut engine = Engine {
            worker,
            backend_kind,
            call_timeout: timeout,
            ownership: options.ownership,
            folder,
            gpus,
            sessions: BTreeMap::new(),
            next_session: 1,
            events: Vec::new(),
            clock,
            job_price: None,
            ended_jobs: Vec::new(),
            box_check: None,
            box_folder,
            box_check_ended_up: false,
        };
        if options.ownership == Ownership::Daemon {
            for index in 0..count {
                let uuid = engine.gpu(index).info.identity.uuid.clone();
                let lock = engine
                    .folder
                    .try_lock(&uuid, &options.owner_label)
                    .map_err(|refused| {
                        let kind = match refused {
                            LockRefused::Held { .. } => TuneErrorKind::Held,
                            LockRefused::Unusable { .. } => TuneErrorKind::State,
                        };
                        TuneError::new(
                            kind,
                            refused.message(index, "start the daemon once it has finished."),
                        )
                    })?;
                engine.gpu_mut(index).card_lock = Some(lock);
            }
        }
        let mut notices = early_notices;
        notices.extend(engine.restore_pending());
        notices.extend(engine.box_check_left());
        Ok((engine, notices))
    }
}

/// The box-check journal's folder (made private when missing): `options.box_journal_dir`, else
/// the state folder. When it cannot be used a notice says so; monitoring and tuning go on, and
/// a box check refuses to start unjournaled.
fn box_folder(options: &EngineOptions, folder: &StateFolder, notices: &mut Vec<Notice>) -> PathBuf {
    let box_folder = options
        .box_journal_dir
        .clone()
        .unwrap_or_else(|| folder.dir().to_path_buf());
    if let Err(error) = crate::fsafe::ensure_private_folder(&box_folder, 0o700) {
        notices.push(Notice::Warning(format!(
            "Box checks cannot be journaled, so they will not start: {error}"
        )));
    }
    box_folder
}

/// Where an engine other than the daemon records the clock locks it sets, when not in its own
/// state folder: `named` (`GPUTUNE_RECORD_DIR`) when set; else, for an engine running as root on the
/// real driver (only root can lock a real card's clocks), the daemon's state folder
/// (`/run/gputune/state`), so the daemon restores what it set rather than resetting it. The
/// daemon keeps its records in its own folder and believes only files of its own user there
/// (`StateFolder::read_locks`); a record only ever names a value to put back, which still goes
/// through the gate.
fn shared_record_dir(
    ownership: Ownership,
    backend: BackendKind,
    named: Option<&PathBuf>,
) -> Option<PathBuf> {
    if ownership == Ownership::Daemon {
        return None;
    }
    if let Some(dir) = named {
        return Some(dir.clone());
    }
    (backend == BackendKind::Nvml && crate::fsafe::effective_uid() == 0)
        .then(|| PathBuf::from(SHARED_RECORD_DIR))
}

/// The clock locks gputune recorded for GPU `uuid` this boot, read where an engine of this
/// process would keep them (in `folders`: its state folder, or the shared record folder): for
/// `status` without a daemon. `None` when none was recorded or the folder cannot be used.
pub fn recorded_locks(
    folders: &Folders,
    backend: BackendKind,
    uuid: &str,
) -> Option<gputune_formats::tuning::LockRecord> {
    let folder = StateFolder::open(folders.state_dir.as_ref()?).ok()?;
    let folder = match shared_record_dir(Ownership::InProcess, backend, folders.record_dir.as_ref())
    {
        Some(records) => folder.with_record_folder(&records).ok()?,
        None => folder,
    };
    folder.read_locks(uuid)
}

/// Which of `holds` on GPU `uuid` another gputune process's own engine holds now (no daemon:
/// each such engine holds a lock file per control it changes), and who: lets a sweep refuse
/// before it starts its job rather than at its first setting. Looking takes and at once
/// gives back each free lock. The locks are in `folders`' state folder.
pub fn held_elsewhere(folders: &Folders, uuid: &str, holds: &[Hold]) -> Option<(Hold, String)> {
    let folder = StateFolder::open(folders.state_dir.as_ref()?).ok()?;
    holds.iter().find_map(|hold| {
        match folder.try_lock_control(uuid, *hold, "gputune sweep (looking)") {
            Err(LockRefused::Held { holder }) => Some((*hold, holder)),
            Ok(_) | Err(LockRefused::Unusable { .. }) => None,
        }
    })
}

/// At the start of a command that only reads: puts back what a gputune that ended badly (a
/// crash, `kill -9`, a power cut mid-trial) left changed, as its journals in the user's state
/// folder (in `folders`) say. Costs one folder listing when there is nothing to do.
pub fn restore_left_changes(
    options: &crate::device::BackendOptions,
    folders: &Folders,
) -> Vec<Notice> {
    let Some(dir) = folders.state_dir.clone() else {
        return Vec::new();
    };
    let has_journal = std::fs::read_dir(&dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|entry| {
            entry.file_name().to_str().is_some_and(|name| {
                (name.starts_with("journal-") && name.ends_with(".json"))
                    || name == "journal.json"
                    || name == super::BOX_JOURNAL_FILE
            })
        })
    });
    if !has_journal {
        return Vec::new();
    }
    let opened = match crate::device::open_backend(options) {
        Ok(opened) => opened,
        Err(error) => {
            return vec![Notice::Warning(format!(
                "Settings a previous gputune left changed (journals in {}) could not be restored: {error}",
                dir.display()
            ))];
        }
    };
    if opened.fallback_reason.is_some() {
        // The journals are for real GPUs, which are not reachable now; they wait for them.
        return Vec::new();
    }
    let options = EngineOptions {
        state_dir: dir,
        record_dir: folders.record_dir.clone(),
        ownership: Ownership::InProcess,
        call_timeout: crate::device::worker::call_timeout_from_env(),
        owner_label: format!("gputune (pid {}, restoring)", std::process::id()),
        box_journal_dir: None,
    };
    match Engine::open(opened.backend, &options, Arc::new(crate::clock::WallClock)) {
        Ok((_, notices)) => notices,
        Err(error) => vec![Notice::Error(error.message)],
    }
}
