//! The trial journal: before a trial writes anything, what would put each GPU back is written
//! to `journal.json` in the state folder. A trial that ends normally restores from it and
//! removes it; after a crash or `kill -9`, the next start of gputune finds it and restores
//! first ([`restore_pending`]).

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::device::gate::validate;
use crate::device::{Backend, BackendKind, CurrentSettings, DeviceError, Setting};

/// Environment variable that overrides the state folder (tests, unusual set-ups).
pub const STATE_DIR_ENV: &str = "GPUTUNE_STATE_DIR";
/// The journal's file name inside the state folder.
pub const JOURNAL_FILE_NAME: &str = "journal.json";
/// Bumped when the file's meaning changes; an unknown version is not restored blindly.
const FORMAT_VERSION: u32 = 1;

/// What to restore after a trial, per GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub format_version: u32,
    /// The backend the trial ran on: a simulated GPU's journal is never applied to real ones.
    pub backend: BackendKind,
    /// The process running the trial, so another gputune does not revert a trial in progress.
    #[serde(default)]
    pub owner: Option<JournalOwner>,
    pub gpus: Vec<JournalEntry>,
}

/// The process that wrote a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalOwner {
    pub pid: u32,
    /// Start time of the process (Linux clock ticks since boot), to tell a reused pid apart.
    pub started_at_ticks: Option<u64>,
}

/// One GPU's restore list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// How the GPU is found again: indices can change, UUIDs do not.
    pub uuid: String,
    /// The GPU's index when the journal was written, for messages only.
    pub index: u32,
    /// Settings that put the GPU back as it was, written in this order.
    pub restore: Vec<Setting>,
}

/// Why the journal could not be read or written. The file is never deleted on an error.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(
        "No state folder for the trial journal could be found: set {STATE_DIR_ENV} to a writable folder."
    )]
    NoStateFolder,
    #[error("The trial journal {} could not be written ({detail}).", path.display())]
    Write { path: PathBuf, detail: String },
    #[error("The trial journal {} could not be read ({detail}); it was left as it is.", path.display())]
    Read { path: PathBuf, detail: String },
    #[error(
        "The trial journal {} is damaged ({detail}); it was left as it is: check your GPUs' settings with `gputune status`, then delete the file.",
        path.display()
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "The trial journal {} has format version {found}, which this gputune does not know; it was left as it is.",
        path.display()
    )]
    UnknownVersion { path: PathBuf, found: u32 },
    #[error(
        "A previous trial's settings are still waiting to be restored (journal {}); run `gputune status` to restore them before starting another trial.",
        path.display()
    )]
    Pending { path: PathBuf },
}

/// The state folder: `GPUTUNE_STATE_DIR`, else the platform's state (or local data) folder.
pub fn state_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(STATE_DIR_ENV).filter(|dir| !dir.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let dirs = directories::ProjectDirs::from("", "", "gputune")?;
    Some(
        dirs.state_dir()
            .unwrap_or_else(|| dirs.data_local_dir())
            .to_path_buf(),
    )
}

/// Where the journal lives; `None` when there is no state folder.
pub fn journal_path() -> Option<PathBuf> {
    state_dir().map(|dir| dir.join(JOURNAL_FILE_NAME))
}

/// The settings that undo `changes` on a card whose readable settings were `current` before.
/// Clock locks cannot be read back, so they are undone by a reset; fans go back to automatic.
pub fn restore_settings_for(current: &CurrentSettings, changes: &[Setting]) -> Vec<Setting> {
    let mut restore = Vec::new();
    let mut push = |setting: Setting| {
        if !restore.contains(&setting) {
            restore.push(setting);
        }
    };
    for change in changes {
        match *change {
            Setting::PowerLimit { .. } => {
                if let Some(power_limit_mw) = current.power_limit_mw {
                    push(Setting::PowerLimit { power_limit_mw });
                }
            }
            Setting::LockGpuClocks { .. } => push(Setting::ResetGpuClocks),
            Setting::LockMemoryClocks { .. } => push(Setting::ResetMemoryClocks),
            Setting::GpuClockOffset { .. } => {
                if let Some(offset_mhz) = current.gpu_clock_offset_mhz {
                    push(Setting::GpuClockOffset { offset_mhz });
                }
            }
            Setting::MemoryClockOffset { .. } => {
                if let Some(offset_mhz) = current.memory_clock_offset_mhz {
                    push(Setting::MemoryClockOffset { offset_mhz });
                }
            }
            Setting::FanSpeed { fan_index, .. } => push(Setting::FanAutomatic { fan_index }),
            // A reset or "automatic" cannot be undone (the old lock or manual speed is not
            // readable), and restoring it would only repeat it.
            Setting::ResetGpuClocks | Setting::ResetMemoryClocks | Setting::FanAutomatic { .. } => {
            }
        }
    }
    restore
}

impl Journal {
    /// A journal owned by this process.
    pub fn new(backend: BackendKind, gpus: Vec<JournalEntry>) -> Journal {
        Journal {
            format_version: FORMAT_VERSION,
            backend,
            owner: Some(JournalOwner::this_process()),
            gpus,
        }
    }

    /// Whether any GPU has something to restore.
    pub fn is_empty(&self) -> bool {
        self.gpus.iter().all(|gpu| gpu.restore.is_empty())
    }

    /// Reads the journal at `path`; `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Journal>, JournalError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(JournalError::Read {
                    path: path.to_path_buf(),
                    detail: error.to_string(),
                });
            }
        };
        let journal: Journal =
            serde_json::from_slice(&bytes).map_err(|error| JournalError::Corrupt {
                path: path.to_path_buf(),
                detail: error.to_string(),
            })?;
        if journal.format_version != FORMAT_VERSION {
            return Err(JournalError::UnknownVersion {
                path: path.to_path_buf(),
                found: journal.format_version,
            });
        }
        Ok(Some(journal))
    }

    /// Writes the journal atomically (a temporary file in the same folder, then a rename), so
    /// a crash mid-write leaves the old journal or the new one, never half of one.
    pub fn write(&self, path: &Path) -> Result<(), JournalError> {
        let failed = |detail: String| JournalError::Write {
            path: path.to_path_buf(),
            detail,
        };
        let folder = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(folder).map_err(|error| failed(error.to_string()))?;
        let text = serde_json::to_vec_pretty(self).map_err(|error| failed(error.to_string()))?;
        let temporary = folder.join(format!(".{JOURNAL_FILE_NAME}.{}.tmp", std::process::id()));
        let written = std::fs::File::create(&temporary).and_then(|mut file| {
            file.write_all(&text)?;
            file.sync_all()
        });
        if let Err(error) = written.and_then(|()| std::fs::rename(&temporary, path)) {
            // Best effort: a stray temporary file is harmless, the old journal is untouched.
            let _ = std::fs::remove_file(&temporary);
            return Err(failed(error.to_string()));
        }
        Ok(())
    }

    /// Whether the process that wrote this journal is still running (and is not this one):
    /// its trial is in progress and will restore by itself.
    pub fn owner_is_another_running_process(&self) -> bool {
        let Some(owner) = self.owner else {
            return false;
        };
        if owner.pid == std::process::id() {
            return false;
        }
        match process_state(owner.pid) {
            None => false,
            Some((state, started_at_ticks)) => {
                // A zombie or dead process restores nothing; a reused pid is another program.
                !matches!(state, 'Z' | 'X' | 'x')
                    && owner
                        .started_at_ticks
                        .is_none_or(|ticks| ticks == started_at_ticks)
            }
        }
    }
}

impl JournalOwner {
    fn this_process() -> JournalOwner {
        let pid = std::process::id();
        JournalOwner {
            pid,
            started_at_ticks: process_state(pid).map(|(_, ticks)| ticks),
        }
    }
}

/// A process's state letter and start time from `/proc/PID/stat`; `None` when it does not
/// exist (or there is no /proc).
fn process_state(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold spaces or ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 22 of the file is the start time; `fields` began at field 3 and field 3 is taken.
    let started_at_ticks = fields.nth(18)?.parse().ok()?;
    Some((state, started_at_ticks))
}

impl JournalEntry {
    /// Reads GPU `index`'s identity and current settings and records what undoes `changes`.
    pub fn record(
        backend: &mut dyn Backend,
        index: u32,
        changes: &[Setting],
    ) -> Result<JournalEntry, DeviceError> {
        let uuid = backend.identity(index)?.uuid;
        let current = backend.current_settings(index)?;
        Ok(JournalEntry {
            uuid,
            index,
            restore: restore_settings_for(&current, changes),
        })
    }
}

/// What restoring a journal did, per GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    pub journal_path: PathBuf,
    pub gpus: Vec<GpuRestore>,
    /// Whether the journal was removed (everything restored) or kept (something is left).
    pub journal_removed: bool,
}

/// One GPU's part of a [`RestoreReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRestore {
    pub uuid: String,
    /// The index the GPU has now; `None` when no GPU with this UUID answered.
    pub index: Option<u32>,
    /// The index recorded in the journal.
    pub journal_index: u32,
    /// Settings written successfully.
    pub restored: Vec<Setting>,
    /// Settings not restored, each with the reason.
    pub left: Vec<(Setting, String)>,
}

impl GpuRestore {
    /// "GPU 0" (its index now, else the one the journal recorded).
    pub fn name(&self) -> String {
        format!("GPU {}", self.index.unwrap_or(self.journal_index))
    }
}

impl RestoreReport {
    /// Whether every setting was restored.
    pub fn is_complete(&self) -> bool {
        self.gpus.iter().all(|gpu| gpu.left.is_empty())
    }

    /// Lines for people: one per GPU restored, one per setting left. `restored_verb` reads
    /// e.g. "restored the settings a previous run left applied on" or "reverted".
    pub fn lines(&self, restored_verb: &str) -> Vec<String> {
        let mut lines = Vec::new();
        for gpu in &self.gpus {
            if !gpu.restored.is_empty() {
                lines.push(format!(
                    "{restored_verb} {} ({}).",
                    gpu.name(),
                    describe_all(&gpu.restored)
                ));
            }
            for (setting, reason) in &gpu.left {
                lines.push(format!(
                    "Could not restore the {} on {} ({}): {reason}",
                    setting.describe(),
                    gpu.name(),
                    gpu.uuid
                ));
            }
        }
        if !self.journal_removed {
            lines.push(format!(
                "The journal {} is kept, so the next start of gputune tries again.",
                self.journal_path.display()
            ));
        }
        lines
    }
}

/// "power limit 450 W, GPU clock reset".
pub fn describe_all(settings: &[Setting]) -> String {
    settings
        .iter()
        .map(Setting::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

/// If a journal is waiting in the state folder, restores it (see [`restore_pending_at`]).
pub fn restore_pending(backend: &mut dyn Backend) -> Result<Option<RestoreReport>, JournalError> {
    match journal_path() {
        Some(path) => restore_pending_at(&path, backend),
        None => Ok(None),
    }
}

/// If the journal at `path` was left by a run that is no longer running, restores it on
/// `backend` (GPUs found by UUID, every setting through `device::gate`), then removes it,
/// or, when something could not be restored, keeps only what is left. `None` when there is
/// nothing to do: no journal, one whose trial is still running, or one for another backend
/// (a simulator's journal, stale by then, is removed).
pub fn restore_pending_at(
    path: &Path,
    backend: &mut dyn Backend,
) -> Result<Option<RestoreReport>, JournalError> {
    let Some(journal) = Journal::read(path)? else {
        return Ok(None);
    };
    if journal.owner_is_another_running_process() {
        tracing::info!(
            "the trial journal {} belongs to a trial still running; leaving it",
            path.display()
        );
        return Ok(None);
    }
    if journal.backend == BackendKind::Sim && backend.kind() != BackendKind::Sim {
        // A simulated GPU ends with its process: what its trial changed is gone already, and a
        // stale journal must not block trials on real GPUs.
        let _ = std::fs::remove_file(path);
        return Ok(None);
    }
    if journal.backend != backend.kind() {
        tracing::info!(
            "the trial journal {} is for the {} backend; leaving it for that backend",
            path.display(),
            journal.backend.as_str()
        );
        return Ok(None);
    }
    restore_journal(path, backend, &journal).map(Some)
}

/// Writes every restore setting of `journal`, then removes the journal at `path` when all
/// succeeded; otherwise rewrites it with only what is left.
pub fn restore_journal(
    path: &Path,
    backend: &mut dyn Backend,
    journal: &Journal,
) -> Result<RestoreReport, JournalError> {
    let gpus: Vec<GpuRestore> = journal
        .gpus
        .iter()
        .map(|entry| restore_entry(backend, entry))
        .collect();
    let left: Vec<JournalEntry> = gpus
        .iter()
        .filter(|gpu| !gpu.left.is_empty())
        .map(|gpu| JournalEntry {
            uuid: gpu.uuid.clone(),
            index: gpu.index.unwrap_or(gpu.journal_index),
            restore: gpu.left.iter().map(|(setting, _)| *setting).collect(),
        })
        .collect();
    let journal_removed = if left.is_empty() {
        match std::fs::remove_file(path) {
            Ok(()) => true,
            Err(error) if error.kind() == ErrorKind::NotFound => true,
            Err(error) => {
                return Err(JournalError::Write {
                    path: path.to_path_buf(),
                    detail: format!("restored, but the file could not be removed: {error}"),
                });
            }
        }
    } else {
        // The remaining writes are for the next start: no owner, so it does not wait on us.
        let remaining = Journal {
            owner: None,
            gpus: left,
            ..journal.clone()
        };
        remaining.write(path)?;
        false
    };
    Ok(RestoreReport {
        journal_path: path.to_path_buf(),
        gpus,
        journal_removed,
    })
}

fn restore_entry(backend: &mut dyn Backend, entry: &JournalEntry) -> GpuRestore {
    let mut restore = GpuRestore {
        uuid: entry.uuid.clone(),
        index: None,
        journal_index: entry.index,
        restored: Vec::new(),
        left: Vec::new(),
    };
    let leave_all = |restore: &mut GpuRestore, settings: &[Setting], reason: &str| {
        restore.left.extend(
            settings
                .iter()
                .map(|setting| (*setting, reason.to_string())),
        );
    };
    let index = match find_by_uuid(backend, &entry.uuid) {
        Ok(index) => index,
        Err(reason) => {
            leave_all(&mut restore, &entry.restore, &reason);
            return restore;
        }
    };
    restore.index = Some(index);
    let constraints = match backend.constraints(index) {
        Ok(constraints) => constraints,
        Err(error) => {
            leave_all(&mut restore, &entry.restore, &error.to_string());
            return restore;
        }
    };
    for (position, setting) in entry.restore.iter().enumerate() {
        let result = match validate(&constraints, *setting) {
            Ok(validated) => backend.apply(index, &validated),
            Err(refused) => {
                restore.left.push((*setting, refused.to_string()));
                continue;
            }
        };
        match result {
            Ok(()) => restore.restored.push(*setting),
            Err(error @ (DeviceError::GpuLost { .. } | DeviceError::DriverNotLoaded { .. })) => {
                // Nothing more will get through to this GPU.
                leave_all(&mut restore, &entry.restore[position..], &error.to_string());
                break;
            }
            Err(error) => restore.left.push((*setting, error.to_string())),
        }
    }
    restore
}

/// The index of the GPU with this UUID, or why it cannot be found.
fn find_by_uuid(backend: &mut dyn Backend, uuid: &str) -> Result<u32, String> {
    let count = backend.gpu_count().map_err(|error| error.to_string())?;
    let mut last_error = None;
    for index in 0..count {
        match backend.identity(index) {
            Ok(identity) if identity.uuid.eq_ignore_ascii_case(uuid) => return Ok(index),
            Ok(_) => {}
            Err(error) => last_error = Some(error.to_string()),
        }
    }
    Err(last_error.unwrap_or_else(|| "no GPU with this UUID is present.".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::gate::validate;
    use crate::device::sim::{SimBackend, SimOptions, SimScenario};

    fn apply(backend: &mut SimBackend, index: u32, setting: Setting) {
        let constraints = backend.constraints(index).unwrap();
        let validated = validate(&constraints, setting).unwrap();
        backend.apply(index, &validated).unwrap();
    }

    #[test]
    fn restore_lists_undo_what_a_trial_changes() {
        let current = CurrentSettings {
            power_limit_mw: Some(450_000),
            gpu_clock_offset_mhz: Some(0),
            memory_clock_offset_mhz: None,
            fans: None,
        };
        let changes = [
            Setting::PowerLimit {
                power_limit_mw: 315_000,
            },
            Setting::LockGpuClocks {
                min_mhz: 210,
                max_mhz: 2500,
            },
            Setting::GpuClockOffset { offset_mhz: 150 },
            Setting::MemoryClockOffset { offset_mhz: 500 },
            Setting::FanSpeed {
                fan_index: 0,
                speed_pct: 60,
            },
            Setting::FanSpeed {
                fan_index: 1,
                speed_pct: 60,
            },
        ];
        assert_eq!(
            restore_settings_for(&current, &changes),
            vec![
                Setting::PowerLimit {
                    power_limit_mw: 450_000
                },
                Setting::ResetGpuClocks,
                Setting::GpuClockOffset { offset_mhz: 0 },
                Setting::FanAutomatic { fan_index: 0 },
                Setting::FanAutomatic { fan_index: 1 },
            ]
        );
    }

    #[test]
    fn a_journal_restores_by_uuid_and_is_removed() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("state").join(JOURNAL_FILE_NAME);
        let mut backend = SimBackend::new(&SimOptions {
            scenario: SimScenario::EightRtx4090,
            ..SimOptions::default()
        });
        let changes = [Setting::PowerLimit {
            power_limit_mw: 300_000,
        }];
        let mut entry = JournalEntry::record(&mut backend, 3, &changes).unwrap();
        // The index recorded is for display; the UUID is what finds the GPU.
        entry.index = 5;
        let mut journal = Journal::new(BackendKind::Sim, vec![entry]);
        journal.owner = None;
        journal.write(&path).unwrap();
        apply(&mut backend, 3, changes[0]);

        let report = restore_pending_at(&path, &mut backend).unwrap().unwrap();
        assert!(report.is_complete() && report.journal_removed);
        assert_eq!(report.gpus[0].index, Some(3));
        assert_eq!(
            backend.current_settings(3).unwrap().power_limit_mw,
            Some(450_000)
        );
        assert!(!path.exists());
        assert_eq!(
            report.lines("Restored"),
            vec!["Restored GPU 3 (power limit 450 W).".to_string()]
        );
        assert_eq!(restore_pending_at(&path, &mut backend).unwrap(), None);
    }

    #[test]
    fn what_cannot_be_restored_stays_in_the_journal() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join(JOURNAL_FILE_NAME);
        let mut backend = SimBackend::new(&SimOptions::default());
        let uuid = backend.identity(0).unwrap().uuid;
        let journal = Journal {
            owner: None,
            ..Journal::new(
                BackendKind::Sim,
                vec![
                    JournalEntry {
                        uuid,
                        index: 0,
                        restore: vec![
                            Setting::PowerLimit {
                                power_limit_mw: 1_000_000,
                            },
                            Setting::ResetGpuClocks,
                        ],
                    },
                    JournalEntry {
                        uuid: "GPU-gone".to_string(),
                        index: 1,
                        restore: vec![Setting::ResetMemoryClocks],
                    },
                ],
            )
        };
        journal.write(&path).unwrap();
        let report = restore_pending_at(&path, &mut backend).unwrap().unwrap();
        assert!(!report.is_complete() && !report.journal_removed);
        assert_eq!(report.gpus[0].restored, vec![Setting::ResetGpuClocks]);
        let kept = Journal::read(&path).unwrap().unwrap();
        assert_eq!(kept.gpus.len(), 2);
        assert_eq!(
            kept.gpus[0].restore,
            vec![Setting::PowerLimit {
                power_limit_mw: 1_000_000
            }]
        );
        let lines = report.lines("Restored").join("\n");
        assert!(lines.contains("outside this GPU's range"), "{lines}");
        assert!(lines.contains("GPU-gone"), "{lines}");
        assert!(lines.contains("is kept"), "{lines}");
    }

    #[test]
    fn a_damaged_journal_is_reported_and_kept() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join(JOURNAL_FILE_NAME);
        std::fs::write(&path, "{ not json").unwrap();
        let mut backend = SimBackend::new(&SimOptions::default());
        let error = restore_pending_at(&path, &mut backend).unwrap_err();
        assert!(matches!(error, JournalError::Corrupt { .. }));
        assert!(error.to_string().contains(&path.display().to_string()));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{ not json");
    }

    #[test]
    fn a_running_trial_and_another_backend_are_left_alone() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join(JOURNAL_FILE_NAME);
        let mut backend = SimBackend::new(&SimOptions::default());
        let entry = JournalEntry::record(&mut backend, 0, &[Setting::ResetGpuClocks]).unwrap();
        let mut journal = Journal::new(BackendKind::Nvml, vec![entry.clone()]);
        journal.owner = None;
        journal.write(&path).unwrap();
        assert_eq!(restore_pending_at(&path, &mut backend).unwrap(), None);
        assert!(path.exists(), "a real GPU's journal waits for the real GPU");

        // PID 1 (init) is running and is not us.
        journal.backend = BackendKind::Sim;
        journal.owner = Some(JournalOwner {
            pid: 1,
            started_at_ticks: process_state(1).map(|(_, ticks)| ticks),
        });
        journal.write(&path).unwrap();
        if process_state(1).is_some() {
            assert!(journal.owner_is_another_running_process());
            assert_eq!(restore_pending_at(&path, &mut backend).unwrap(), None);
        }
        // This process's own journal, as after a trial: restored.
        journal.owner = Some(JournalOwner::this_process());
        assert!(!journal.owner_is_another_running_process());
        assert!(path.exists());
    }
}
