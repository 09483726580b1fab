//! The engine's folder: per GPU, a lock (one engine changes a card at a time, and a lock dies
//! with its process, so a `kill -9` never leaves a card blocked), a journal of what puts the
//! card back (written before every temporary change), and the record of the clock locks gputune
//! set (NVML cannot read them back). Every file is small, read through `fsafe` (no FIFO, no
//! symlink, no huge file) and written atomically; a damaged one is set aside and reported,
//! never a reason to stall.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::clock::wall_clock_ms;
use crate::fsafe::{self, FileError, Links};
use gputune_formats::card::{BackendKind, Setting};
use gputune_formats::files::{GpuJournal, JOURNAL_FORMAT, LOCK_RECORD_FORMAT};
use gputune_formats::files::{JournalUnread, RecordFile, parse_journal, parse_record};
use gputune_formats::tuning::{Hold, LockRecord};

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
/// The largest lock-holder description read.
const MAX_HOLDER_BYTES: u64 = 4096;

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

/// A GPU's lock, held until dropped (or the process ends).
#[derive(Debug)]
pub struct GpuLock {
    _file: File,
}

/// Why a GPU's lock could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockRefused {
    /// Another process holds it; what the holder wrote about itself ("gputune apply --try 60
    /// (pid 4242, user alice)").
    Held { holder: String },
    /// The lock file itself cannot be used (a second hard link, another owner, not a regular
    /// file, an error of the file system): one sentence naming the file, ending with a period.
    Unusable { problem: String },
}

impl LockRefused {
    /// "GPU 0 is being changed by …" or "GPU 0 cannot be locked …", ending with `then`.
    pub fn message(&self, index: u32, then: &str) -> String {
        match self {
            LockRefused::Held { holder } => {
                format!("GPU {index} is being changed by {holder}: {then}")
            }
            LockRefused::Unusable { problem } => format!(
                "GPU {index} cannot be locked for changes: {problem} Remove that file when no gputune runs (gputune never removes it itself), then try again."
            ),
        }
    }
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

    fn path(&self, prefix: &str, uuid: &str, extension: &str) -> PathBuf {
        self.dir
            .join(format!("{prefix}-{}.{extension}", file_safe(uuid)))
    }

    fn record_path(&self, uuid: &str) -> PathBuf {
        self.records
            .join(format!("record-{}.json", file_safe(uuid)))
    }

    /// Takes GPU `uuid`'s card lock alone, without waiting (the daemon, for its life: no
    /// other engine changes the card meanwhile), and writes `holder` into it for others to
    /// read. A lock file that is a symbolic link, not a regular file, another user's or one
    /// with a second hard link is refused (and left as it is): the holder's text is never
    /// written through another name.
    pub fn try_lock(&self, uuid: &str, holder: &str) -> Result<GpuLock, LockRefused> {
        lock_at(
            &self.path("lock", uuid, "lock"),
            holder,
            LockMode::Exclusive,
        )
    }

    /// Takes GPU `uuid`'s card lock shared with other gputune processes (an engine without the
    /// daemon, beside its control locks): it keeps the daemon from starting over a change in
    /// progress, not another process changing another control.
    pub fn try_lock_shared(&self, uuid: &str, holder: &str) -> Result<GpuLock, LockRefused> {
        lock_at(&self.path("lock", uuid, "lock"), holder, LockMode::Shared)
    }

    /// Takes the lock of one control of GPU `uuid` (`lock-<uuid>.<control>.lock`): an engine
    /// without the daemon holds it while it changes that control, so two gputune processes
    /// change two controls of one card at once, never one control.
    pub fn try_lock_control(
        &self,
        uuid: &str,
        hold: Hold,
        holder: &str,
    ) -> Result<GpuLock, LockRefused> {
        let path = self
            .dir
            .join(format!("lock-{}.{}.lock", file_safe(uuid), hold.as_str()));
        lock_at(&path, holder, LockMode::Exclusive)
    }

    /// Takes the lock that makes rewriting GPU `uuid`'s journal one process at a time (each
    /// process rewrites the entries of the controls it holds and keeps the others'). It is held
    /// for one file write, so waiting is short; a holder stuck longer than
    /// [`JOURNAL_LOCK_WAIT`] is said, never waited for.
    pub fn lock_journal(&self, uuid: &str) -> Result<GpuLock, LockRefused> {
        let path = self
            .dir
            .join(format!("lock-{}.journal.lock", file_safe(uuid)));
        let deadline = std::time::Instant::now() + JOURNAL_LOCK_WAIT;
        loop {
            match lock_at(&path, "", LockMode::Exclusive) {
                Err(LockRefused::Held { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => return other,
            }
        }
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum LockMode {
    Exclusive,
    Shared,
}

/// Takes the `flock` of the file at `path` without waiting and writes `holder` into it (when
/// not empty) for others to read; see [`StateFolder::try_lock`].
fn lock_at(path: &Path, holder: &str, mode: LockMode) -> Result<GpuLock, LockRefused> {
    let mut file =
        fsafe::open_for_update(path, 0o600, false).map_err(|error| LockRefused::Unusable {
            problem: error.to_string(),
        })?;
    let taken = match mode {
        LockMode::Exclusive => file.try_lock(),
        LockMode::Shared => file.try_lock_shared(),
    };
    match taken {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = fsafe::read_limited(path, MAX_HOLDER_BYTES, Links::Refuse)
                .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string())
                .ok()
                .filter(|text| !text.is_empty())
                .unwrap_or_else(|| "another gputune".to_string());
            return Err(LockRefused::Held {
                holder: crate::text::printable(&holder),
            });
        }
        Err(std::fs::TryLockError::Error(error)) => {
            return Err(LockRefused::Unusable {
                problem: format!("{} cannot be locked ({error}).", path.display()),
            });
        }
    }
    if !holder.is_empty() {
        // Who holds it, for the message another process shows; best effort.
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(holder.as_bytes()));
    }
    Ok(GpuLock { _file: file })
}

/// This boot's id: clock locks do not survive a reboot, so neither does their record.
fn boot_id() -> Option<String> {
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
mod tests {
    use super::*;

    fn folder() -> (tempfile::TempDir, StateFolder) {
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
    fn a_lock_is_exclusive_names_its_holder_and_dies_with_its_owner() {
        let (_dir, folder) = folder();
        let held = folder.try_lock("GPU-1", "gputune apply (pid 1)").unwrap();
        let busy = folder.try_lock("GPU-1", "another").unwrap_err();
        assert_eq!(
            busy,
            LockRefused::Held {
                holder: "gputune apply (pid 1)".to_string()
            }
        );
        assert!(folder.try_lock("GPU-2", "another").is_ok());
        drop(held);
        assert!(folder.try_lock("GPU-1", "another").is_ok());
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
    fn a_hard_linked_or_unusable_lock_file_is_refused_and_left_alone() {
        let (dir, folder) = folder();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = folder.path("lock", "GPU-1", "lock");
        std::fs::hard_link(&victim, &path).unwrap();
        let refused = folder.try_lock("GPU-1", "me").unwrap_err();
        let message = refused.message(0, "wait.");
        assert!(message.contains("2 hard links"), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // A folder where the lock file should be: said as what it is, never "held by nobody".
        std::fs::create_dir(folder.path("lock", "GPU-2", "lock")).unwrap();
        let message = folder
            .try_lock("GPU-2", "me")
            .unwrap_err()
            .message(0, "wait.");
        assert!(!message.contains("nobody"), "{message}");
        assert!(message.contains("cannot be locked"), "{message}");
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
