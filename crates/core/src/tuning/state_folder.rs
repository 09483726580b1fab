//! The engine's folder: per GPU, a lock (one engine changes a card at a time; the locks are
//! `gpu_locks`), a journal of what puts the card back (written before every temporary change),
//! and the record of the clock locks gputune set (NVML cannot read them back). Every file is small, read through `fsafe` (no FIFO, no
//! symlink, no huge file) and written atomically; a damaged one is set aside and reported,
//! never a reason to stall.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::clock::wall_clock_ms;
use crate::fsafe::{self, FileError, Links};
use gputune_formats::card::{BackendKind, Setting};
use gputune_formats::files::{GpuJournal, JOURNAL_FORMAT, LOCK_RECORD_FORMAT};
use gputune_formats::files::{JournalUnread, RecordFile, parse_journal, parse_record};
use gputune_formats::tuning::LockRecord;

/// The daemon's state folder under systemd (`RuntimeDirectory=gputune`, then `state`): an
/// engine running as root without the daemon records its clock locks here too, so the daemon
/// knows them (NVML cannot read locks back) and restores them rather than resetting them.
pub const SHARED_RECORD_DIR: &str = "/run/gputune/state";
/// A journal lists one setting per control; a few dozen at most. More is not a journal.
const MAX_RESTORE_ENTRIES: usize = 64;
/// The largest journal or record read: a real one is a few hundred bytes.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// The longest wait for another process to finish rewriting a journal (one small file write).
pub const JOURNAL_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A journal this engine writes, stamped with the wall clock.
pub trait EngineJournal {
    /// A journal of this engine's making.
    fn new(backend: BackendKind, uuid: &str, index: u32, restore: Vec<Setting>, by: &str) -> Self;
}

impl EngineJournal for GpuJournal {
    fn new(backend: BackendKind, uuid: &str, index: u32, restore: Vec<Setting>, by: &str) -> Self {
        GpuJournal {
            format_version: JOURNAL_FORMAT,
            backend,
            uuid: uuid.to_string(),
            index,
            restore,
            by: by.to_string(),
            written_at_ms: wall_clock_ms(),
        }
    }
}

/// A problem with a file in the state folder, reported to the user; the engine carries on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderProblem {
    pub message: String,
}

/// The engine's state folder.
#[derive(Debug, Clone)]
pub struct StateFolder {
    dir: PathBuf,
    /// Where the clock-lock records are: this folder, or the record folder every engine on the
    /// machine shares (see [`StateFolder::with_record_folder`]).
    records: PathBuf,
}

impl StateFolder {
    /// Opens (creating it when missing) a folder only this user can write.
    pub fn open(dir: &Path) -> Result<StateFolder, FileError> {
        fsafe::ensure_private_folder(dir, 0o700)?;
        Ok(StateFolder {
            dir: dir.to_path_buf(),
            records: dir.to_path_buf(),
        })
    }

    /// Keeps the clock-lock records in `records` (created when missing: its parents readable by
    /// all, like `/run/gputune`, and itself private), which must be a real folder of this user
    /// that nobody else may write.
    pub fn with_record_folder(mut self, records: &Path) -> Result<StateFolder, FileError> {
        if let Some(parent) = records.parent().filter(|parent| !parent.exists()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|error| FileError::Write {
                    path: parent.to_path_buf(),
                    detail: error.to_string(),
                })?;
        }
        fsafe::ensure_private_folder(records, 0o700)?;
        self.records = records.to_path_buf();
        Ok(self)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the clock-lock records are.
    pub fn record_dir(&self) -> &Path {
        &self.records
    }

    pub(super) fn path(&self, prefix: &str, uuid: &str, extension: &str) -> PathBuf {
        self.dir
            .join(format!("{prefix}-{}.{extension}", file_safe(uuid)))
    }

    fn record_path(&self, uuid: &str) -> PathBuf {
        self.records
            .join(format!("record-{}.json", file_safe(uuid)))
    }

    /// The journal waiting for GPU `uuid`, if any. A damaged, oversized or unknown journal is set
    /// aside (renamed, never deleted) and reported; so is one that names another card than the
    /// one its file is named for: which card it was meant for cannot be known, so it is applied
    /// to neither.
    pub fn read_journal(&self, uuid: &str) -> Result<Option<GpuJournal>, FolderProblem> {
        self.read_journal_at(&self.path("journal", uuid, "json"), uuid)
    }

    fn read_journal_at(
        &self,
        path: &Path,
        uuid: &str,
    ) -> Result<Option<GpuJournal>, FolderProblem> {
        let bytes = match fsafe::read_limited(path, MAX_FILE_BYTES, Links::Refuse) {
            Ok(bytes) => bytes,
            Err(error) if error.is_not_found() => return Ok(None),
            Err(error) => return Err(self.set_aside(path, &error.to_string())),
        };
        let journal = match parse_journal(&bytes) {
            Ok(journal) => journal,
            Err(JournalUnread::Damaged(error)) => {
                return Err(self.set_aside(path, &format!("it is damaged ({error})")));
            }
            Err(JournalUnread::UnknownFormat(version)) => {
                let version = version.map_or_else(|| "none".to_string(), |v| v.to_string());
                return Err(self.set_aside(
                    path,
                    &format!("it has format version {version}, which this gputune does not know"),
                ));
            }
        };
        // File names carry the UUID made file-safe (`journal_uuids` lists them so), so the
        // names are compared in that form.
        if file_safe(&journal.uuid) != file_safe(uuid) {
            return Err(self.set_aside(
                path,
                &format!(
                    "it is in the name of GPU {} but names GPU {} inside, so it was applied to neither card",
                    shown_uuid(uuid),
                    shown_uuid(&journal.uuid)
                ),
            ));
        }
        if journal.restore.len() > MAX_RESTORE_ENTRIES {
            return Err(self.set_aside(
                path,
                &format!(
                    "it lists {} settings, more than a card has (at most {MAX_RESTORE_ENTRIES})",
                    journal.restore.len()
                ),
            ));
        }
        Ok(Some(journal))
    }

    /// Writes GPU `journal.uuid`'s journal (removing it when there is nothing to restore).
    pub fn write_journal(&self, journal: &GpuJournal) -> Result<(), FileError> {
        let path = self.path("journal", &journal.uuid, "json");
        if journal.restore.is_empty() {
            return match std::fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(FileError::Write {
                    path,
                    detail: error.to_string(),
                }),
            };
        }
        let text = serde_json::to_vec_pretty(journal).map_err(|error| FileError::Write {
            path: path.clone(),
            detail: error.to_string(),
        })?;
        fsafe::write_atomically(&path, &text, 0o600)
    }

    /// The UUIDs with a journal file in the folder (for restoring at start).
    pub fn journal_uuids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut uuids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().to_str()?.to_string();
                let uuid = name.strip_prefix("journal-")?.strip_suffix(".json")?;
                Some(uuid.to_string())
            })
            .collect();
        uuids.sort();
        uuids
    }

    /// Renames a bad file to `<name>.set-aside-<ms>` so it stops blocking anything, and says so.
    fn set_aside(&self, path: &Path, why: &str) -> FolderProblem {
        let aside = path.with_extension(format!("json.set-aside-{}", wall_clock_ms()));
        let moved = std::fs::rename(path, &aside);
        FolderProblem {
            message: match moved {
                Ok(()) => format!(
                    "The journal {} could not be used: {why}. It was moved to {}; check the GPU's settings with `gputune status`.",
                    path.display(),
                    aside.display()
                ),
                Err(error) => format!(
                    "The journal {} could not be used: {why}; it could not be moved aside either ({error}).",
                    path.display()
                ),
            },
        }
    }

    /// The clock locks gputune recorded for GPU `uuid` in this boot; `None` when there is no
    /// record of this boot. Only a record this user wrote is believed (no symbolic link, no
    /// file of another user, no second hard link): a record only ever says which value to put
    /// back, and that value still goes through the gate.
    pub fn read_locks(&self, uuid: &str) -> Option<LockRecord> {
        let path = self.record_path(uuid);
        let record = match fsafe::read_private(&path, MAX_FILE_BYTES) {
            Ok(bytes) => parse_record(&bytes),
            Err(error) if error.is_not_found() => None,
            Err(error) => {
                tracing::warn!("the clock-lock record is not used: {error}");
                None
            }
        };
        match (record, boot_id()) {
            (Some(record), Some(boot)) if record.boot_id == boot => Some(record.locks),
            _ => None,
        }
    }

    /// Records the clock locks gputune set on GPU `uuid`. When that fails, an older record is
    /// removed (best effort), so it is never taken for the newer value.
    pub fn write_locks(&self, uuid: &str, locks: LockRecord) -> Result<(), FileError> {
        let path = self.record_path(uuid);
        let record = RecordFile {
            format_version: LOCK_RECORD_FORMAT,
            boot_id: boot_id().unwrap_or_default(),
            locks,
        };
        let text = serde_json::to_vec_pretty(&record).map_err(|error| FileError::Write {
            path: path.clone(),
            detail: error.to_string(),
        })?;
        fsafe::write_atomically(&path, &text, 0o600).inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })
    }
}

/// This boot's id: clock locks do not survive a reboot, so neither does their record.
pub(crate) fn boot_id() -> Option<String> {
    fsafe::read_limited(
        Path::new("/proc/sys/kernel/random/boot_id"),
        64,
        Links::Follow,
    )
    .ok()
    .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string())
}

/// A UUID read from a file, as a message shows it: escaped, and cut short when it is longer
/// than any card's.
fn shown_uuid(uuid: &str) -> String {
    crate::text::printable(&uuid.chars().take(96).collect::<String>())
}

/// A UUID as part of a file name: letters, digits and '-' only.
pub fn file_safe(uuid: &str) -> String {
    let safe: String = uuid
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() || character == '-' {
                character
            } else {
                '_'
            }
        })
        .take(96)
        .collect();
    if safe.is_empty() {
        "_".to_string()
    } else {
        safe
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A state folder in a temporary directory (the room's unit tests share it).
    pub(crate) fn folder() -> (tempfile::TempDir, StateFolder) {
        let dir = tempfile::tempdir().unwrap();
        let folder = StateFolder::open(&dir.path().join("state")).unwrap();
        (dir, folder)
    }

    #[test]
    fn a_journal_round_trips_and_an_empty_one_is_removed() {
        let (_dir, folder) = folder();
        let journal = GpuJournal::new(
            BackendKind::Nvml,
            "GPU-1234",
            0,
            vec![Setting::PowerLimit {
                power_limit_mw: 450_000,
            }],
            "test",
        );
        folder.write_journal(&journal).unwrap();
        assert_eq!(folder.journal_uuids(), vec!["GPU-1234".to_string()]);
        assert_eq!(
            folder.read_journal("GPU-1234").unwrap(),
            Some(journal.clone())
        );
        folder
            .write_journal(&GpuJournal {
                restore: Vec::new(),
                ..journal
            })
            .unwrap();
        assert_eq!(folder.read_journal("GPU-1234").unwrap(), None);
        assert!(folder.journal_uuids().is_empty());
    }

    #[test]
    fn damaged_huge_and_oversized_journals_are_set_aside_and_reported() {
        let (_dir, folder) = folder();
        let path = folder.path("journal", "GPU-bad", "json");
        std::fs::write(&path, "{ not json").unwrap();
        let problem = folder.read_journal("GPU-bad").unwrap_err();
        assert!(problem.message.contains("damaged"), "{}", problem.message);
        assert!(!path.exists());
        assert!(folder.journal_uuids().is_empty());

        let many = GpuJournal::new(
            BackendKind::Nvml,
            "GPU-many",
            0,
            vec![Setting::ResetGpuClocks; 20_000],
            "test",
        );
        std::fs::write(
            folder.path("journal", "GPU-many", "json"),
            serde_json::to_vec(&many).unwrap(),
        )
        .unwrap();
        let problem = folder.read_journal("GPU-many").unwrap_err();
        assert!(
            problem.message.contains("could not be used"),
            "{}",
            problem.message
        );
        assert_eq!(folder.read_journal("GPU-many").unwrap(), None);
    }

    #[test]
    fn a_journal_in_one_card_s_name_that_names_another_is_set_aside_for_both() {
        let (_dir, folder) = folder();
        let theirs = GpuJournal::new(
            BackendKind::Nvml,
            "GPU-other",
            1,
            vec![Setting::PowerLimit {
                power_limit_mw: 200_000,
            }],
            "test",
        );
        let path = folder.path("journal", "GPU-mine", "json");
        std::fs::write(&path, serde_json::to_vec(&theirs).unwrap()).unwrap();
        let problem = folder.read_journal("GPU-mine").unwrap_err();
        assert!(
            problem
                .message
                .contains("in the name of GPU GPU-mine but names GPU GPU-other"),
            "{}",
            problem.message
        );
        assert!(!path.exists());
        assert!(folder.journal_uuids().is_empty());
        assert_eq!(folder.read_journal("GPU-other").unwrap(), None);
        let aside: Vec<_> = std::fs::read_dir(folder.dir())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().contains("set-aside"))
            .collect();
        assert_eq!(aside.len(), 1, "moved aside, not deleted");
    }

    #[test]
    fn a_planted_symlink_is_never_followed() {
        let (dir, folder) = folder();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, folder.path("lock", "GPU-1", "lock")).unwrap();
        assert!(folder.try_lock("GPU-1", "me").is_err());
        std::os::unix::fs::symlink(&victim, folder.path("journal", "GPU-2", "json")).unwrap();
        assert!(folder.read_journal("GPU-2").is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn a_record_in_the_shared_folder_is_read_only_when_it_is_ours_alone() {
        let (dir, folder) = folder();
        let shared = dir.path().join("run").join("gputune").join("state");
        let folder = folder.with_record_folder(&shared).unwrap();
        let locks = LockRecord {
            gpu_clock_lock: gputune_formats::tuning::ClockLockInForce::Locked {
                min_mhz: 210,
                max_mhz: 2520,
            },
            memory_clock_lock: gputune_formats::tuning::ClockLockInForce::Unknown,
        };
        folder.write_locks("GPU-1", locks).unwrap();
        assert!(shared.join("record-GPU-1.json").exists());
        assert!(!folder.dir().join("record-GPU-1.json").exists());
        if boot_id().is_some() {
            assert_eq!(folder.read_locks("GPU-1"), Some(locks));
        }
        std::fs::hard_link(shared.join("record-GPU-1.json"), dir.path().join("planted")).unwrap();
        assert_eq!(folder.read_locks("GPU-1"), None);
    }

    #[test]
    fn locks_are_recorded_for_this_boot() {
        let (_dir, folder) = folder();
        let locks = LockRecord {
            gpu_clock_lock: gputune_formats::tuning::ClockLockInForce::Locked {
                min_mhz: 210,
                max_mhz: 2520,
            },
            memory_clock_lock: gputune_formats::tuning::ClockLockInForce::Unlocked,
        };
        assert_eq!(folder.read_locks("GPU-1"), None);
        folder.write_locks("GPU-1", locks).unwrap();
        if boot_id().is_some() {
            assert_eq!(folder.read_locks("GPU-1"), Some(locks));
        }
        assert_eq!(file_safe("GPU-ab/../x"), "GPU-ab____x");
    }
}
