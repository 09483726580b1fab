//! A GPU's locks in the engine's folder: one engine changes a card at a time (the card lock),
//! one process changes a control at a time (a control lock), one rewrites a journal at a time.
//! A lock is a `flock` on a small file, so it dies with its process: a `kill -9` never leaves
//! a card blocked.

use std::fs::File;
use std::io::{Seek, Write};
use std::path::Path;

use crate::fsafe::{self, Links};
use crate::tuning::state_folder::{JOURNAL_LOCK_WAIT, StateFolder, file_safe};
use gputune_formats::tuning::Hold;

/// The largest lock-holder description read.
const MAX_HOLDER_BYTES: u64 = 4096;

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

impl StateFolder {
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
            .dir()
            .join(format!("lock-{}.{}.lock", file_safe(uuid), hold.as_str()));
        lock_at(&path, holder, LockMode::Exclusive)
    }

    /// Takes the lock that makes rewriting GPU `uuid`'s journal one process at a time (each
    /// process rewrites the entries of the controls it holds and keeps the others'). It is held
    /// for one file write, so waiting is short; a holder stuck longer than
    /// [`JOURNAL_LOCK_WAIT`] is said, never waited for.
    pub fn lock_journal(&self, uuid: &str) -> Result<GpuLock, LockRefused> {
        let path = self
            .dir()
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
}

/// Takes the lock at `path` alone, without waiting, and writes `holder` into it: a lock that is
/// not a card's (the box check's, held for the check's life). Refused like a card's lock.
pub fn try_lock_file(path: &Path, holder: &str) -> Result<GpuLock, LockRefused> {
    lock_at(path, holder, LockMode::Exclusive)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::state_folder::tests::folder;

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
}
