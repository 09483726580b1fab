//! One profile file, read and written safely: read with `fsafe` (a symbolic link followed to
//! its target, but a FIFO, a device or a folder refused without waiting, a huge file refused
//! before it is read), written atomically over nothing but a profile. Its text is
//! `toml_text.rs`; the folder of them, `store.rs`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::fsafe::{self, FileError, Links};
use crate::profiles::store::StoreError;
use crate::profiles::toml_text::{MAX_FILE_BYTES, parse_profile, profile_to_toml};
use gputune_formats::profile::Profile;

/// The permissions of a new profile file (an existing file keeps its own).
const NEW_FILE_MODE: u32 = 0o644;

/// Reads and checks one profile file. Any problem is an error naming the file; nothing here
/// writes. The file may be a symbolic link (its target is checked), but a FIFO, a device or a
/// folder is refused without being read or waited on, and a file over [`MAX_FILE_BYTES`] is
/// refused before it is read.
pub(crate) fn read_profile_file(path: &Path) -> Result<Profile, StoreError> {
    let content = fsafe::read_limited(path, MAX_FILE_BYTES, Links::Follow)
        .map_err(|error| read_failure(path, error))?;
    parse_profile(&content).map_err(|problem| problem.at(path))
}

/// The store's error for a file `fsafe` would not read.
fn read_failure(path: &Path, error: FileError) -> StoreError {
    let path = path.to_path_buf();
    match error {
        FileError::TooLarge { bytes, .. } => StoreError::TooLarge { path, bytes },
        FileError::NotRegular { kind, .. } => StoreError::NotRegular { path, kind },
        FileError::NotFound { .. } => StoreError::Read {
            path,
            detail: "it does not exist".to_string(),
        },
        FileError::Symlink { .. } => StoreError::Read {
            path,
            detail: "it is a symbolic link".to_string(),
        },
        FileError::Unsafe { reason: detail, .. }
        | FileError::Read { detail, .. }
        | FileError::Write { detail, .. } => StoreError::Read { path, detail },
    }
}

/// Writes a profile atomically with `fsafe::write_atomically`: an exclusively created temporary
/// file in the same folder (never a planted file or link), synced, then renamed over `path`. A
/// crash leaves the old file or the new one, never half of one; a symbolic link at `path` is
/// replaced, never written through. Whatever is at `path` must read as a profile, else it stays.
/// A new file gets mode 0644, a replaced one keeps its permissions.
pub(crate) fn write_profile_file(path: &Path, profile: &Profile) -> Result<(), StoreError> {
    let failed = |detail: String| StoreError::Write {
        path: path.to_path_buf(),
        detail,
    };
    if fsafe::occupied(path) {
        // The last guard: whatever the caller thought, a file that is not a profile stays
        // (a dangling link, a FIFO or a device included).
        if read_profile_file(path).is_err() {
            return Err(StoreError::WouldOverwrite {
                path: path.to_path_buf(),
            });
        }
    }
    let mode = std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map_or(NEW_FILE_MODE, |metadata| {
            metadata.permissions().mode() & 0o777
        });
    let text = profile_to_toml(profile).map_err(failed)?;
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(folder).map_err(|error| failed(error.to_string()))?;
    fsafe::write_atomically(path, text.as_bytes(), mode).map_err(|error| match error {
        FileError::Write { detail, .. } | FileError::Read { detail, .. } => failed(detail),
        other => failed(other.to_string()),
    })
}
