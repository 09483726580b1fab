//! Reading and writing small files safely: every file gputune reads (profiles, journals,
//! records, config.json, safetensors headers) and writes (profiles, journals, records) goes
//! through here, so a FIFO, a device such as `/dev/zero`, a huge file or a planted symlink is
//! refused quickly with a message instead of hanging, eating memory or writing through a link.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a file could not be read or written. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{} does not exist.", path.display())]
    NotFound { path: PathBuf },
    #[error("{} is {kind}, not a regular file; it was not read.", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{} is {bytes} bytes or more, larger than the {limit_bytes} bytes such a file can be; it was not read.", path.display())]
    TooLarge {
        path: PathBuf,
        bytes: u64,
        limit_bytes: u64,
    },
    #[error("{} is a symbolic link, which gputune does not follow here; it was left as it is.", path.display())]
    Symlink { path: PathBuf },
    #[error("{} is not safe to use: {reason}.", path.display())]
    Unsafe { path: PathBuf, reason: String },
    #[error("{} could not be read ({detail}).", path.display())]
    Read { path: PathBuf, detail: String },
    #[error("{} could not be written ({detail}).", path.display())]
    Write { path: PathBuf, detail: String },
}

impl FileError {
    /// Whether the file simply is not there (often not an error for the caller).
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::NotFound { .. })
    }
}

/// How a file may be opened for reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Follow a symbolic link (a user's own files: Hugging Face caches link config.json).
    Follow,
    /// Refuse a symbolic link at the last component (files a privileged process owns).
    Refuse,
}

/// Reads a whole regular file of at most `limit_bytes`. A FIFO or device is refused without
/// blocking (it is opened non-blocking and checked before any read), a larger file is refused
/// before it is read.
pub fn read_limited(path: &Path, limit_bytes: u64, links: Links) -> Result<Vec<u8>, FileError> {
    let file = open_regular(path, links)?;
    read_open(file, path, limit_bytes)
}

/// Reads a whole regular file of at most `limit_bytes` that this process's user made and
/// nobody else could have planted: a symbolic link, a file of another user or one with a second
/// hard link is refused, as are FIFOs and devices (see [`read_limited`]). For records a
/// privileged process acts on.
pub fn read_private(path: &Path, limit_bytes: u64) -> Result<Vec<u8>, FileError> {
    let file = open_regular(path, Links::Refuse)?;
    let metadata = file.metadata().map_err(|error| read_error(path, &error))?;
    check_private(path, &metadata)?;
    read_open(file, path, limit_bytes)
}

/// Reads an open file of at most `limit_bytes`.
fn read_open(mut file: File, path: &Path, limit_bytes: u64) -> Result<Vec<u8>, FileError> {
    let size = file
        .metadata()
        .map_err(|error| read_error(path, &error))?
        .len();
    if size > limit_bytes {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            bytes: size,
            limit_bytes,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // The size can change under us (a file still being written): never read past the limit.
    (&mut file)
        .take(limit_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| read_error(path, &error))?;
    if bytes.len() as u64 > limit_bytes {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            bytes: bytes.len() as u64,
            limit_bytes,
        });
    }
    Ok(bytes)
}

/// Opens a file for reading and checks that it is a regular file, without ever blocking on a
/// FIFO or a device.
pub fn open_regular(path: &Path, links: Links) -> Result<File, FileError> {
    let mut flags = libc_flags::NONBLOCK;
    if links == Links::Refuse {
        flags |= libc_flags::NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|error| match error.kind() {
            ErrorKind::NotFound => FileError::NotFound {
                path: path.to_path_buf(),
            },
            // ELOOP: the last component is a symlink and O_NOFOLLOW was given.
            _ if error.raw_os_error() == Some(libc_flags::ELOOP) => FileError::Symlink {
                path: path.to_path_buf(),
            },
            _ => read_error(path, &error),
        })?;
    let metadata = file.metadata().map_err(|error| read_error(path, &error))?;
    let file_type = metadata.file_type();
    if !file_type.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(&file_type),
        });
    }
    Ok(file)
}

fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a folder"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn read_error(path: &Path, error: &std::io::Error) -> FileError {
    FileError::Read {
        path: path.to_path_buf(),
        detail: error.to_string(),
    }
}

/// Tells temporary files of one process apart.
static TEMPORARY_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically: a new temporary file beside it (created exclusively,
/// so a planted file or symlink of the same name is never written through), flushed to disk,
/// then renamed over `path` (a rename replaces a symlink at `path`, it never follows it). The
/// temporary file is removed on any failure. `mode` is the new file's permission bits.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), FileError> {
    let failed = |detail: String| FileError::Write {
        path: path.to_path_buf(),
        detail,
    };
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| failed("the path names no file".to_string()))?
        .to_string_lossy()
        .into_owned();
    let (temporary, mut file) = create_temporary(folder, &name, mode).map_err(failed)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(failed(error.to_string()));
    }
    // The rename is durable once the folder is: best effort, a crash here only loses the
    // newest version, never leaves half a file.
    if let Ok(folder) = File::open(folder) {
        let _ = folder.sync_all();
    }
    Ok(())
}

/// A new, exclusively created temporary file in `folder` for `name`.
fn create_temporary(folder: &Path, name: &str, mode: u32) -> Result<(PathBuf, File), String> {
    let mut last_error = String::new();
    for _ in 0..16 {
        let unique = TEMPORARY_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let temporary = folder.join(format!(
            ".{name}.{}.{unique}.{nanos:x}.tmp",
            std::process::id()
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc_flags::NOFOLLOW)
            .open(&temporary)
        {
            Ok(file) => return Ok((temporary, file)),
            Err(error) if error.kind() == ErrorKind::AlreadyExists => {
                last_error = error.to_string();
            }
            Err(error) => return Err(error.to_string()),
        }
    }
    Err(format!("no free temporary name ({last_error})"))
}

/// Creates `folder` (and its parents) if needed, and checks that it is a real folder, not a
/// symbolic link, owned by this user and writable by nobody else: the checks a privileged
/// process makes before it keeps state there. New folders get `mode`.
pub fn ensure_private_folder(folder: &Path, mode: u32) -> Result<(), FileError> {
    match std::fs::symlink_metadata(folder) {
        Err(error) if error.kind() == ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(folder)
                .map_err(|error| FileError::Write {
                    path: folder.to_path_buf(),
                    detail: error.to_string(),
                })?;
        }
        Err(error) => {
            return Err(FileError::Read {
                path: folder.to_path_buf(),
                detail: error.to_string(),
            });
        }
        Ok(_) => {}
    }
    check_private_folder(folder)
}

/// Checks that `folder` is a real folder, not a symbolic link, owned by this user and writable
/// by nobody else (what [`ensure_private_folder`] checks, without making it): a folder a
/// privileged process reads instructions from.
pub fn check_private_folder(folder: &Path) -> Result<(), FileError> {
    let metadata = std::fs::symlink_metadata(folder).map_err(|error| FileError::Read {
        path: folder.to_path_buf(),
        detail: error.to_string(),
    })?;
    let unsafe_folder = |reason: String| FileError::Unsafe {
        path: folder.to_path_buf(),
        reason,
    };
    if metadata.file_type().is_symlink() {
        return Err(FileError::Symlink {
            path: folder.to_path_buf(),
        });
    }
    if !metadata.is_dir() {
        return Err(unsafe_folder("it is not a folder".to_string()));
    }
    let euid = effective_uid();
    if metadata.uid() != euid {
        return Err(unsafe_folder(format!(
            "it belongs to user {} rather than {euid}",
            metadata.uid()
        )));
    }
    if metadata.permissions().mode() & 0o022 != 0 {
        return Err(unsafe_folder(format!(
            "others may write to it (mode {:o})",
            metadata.permissions().mode() & 0o7777
        )));
    }
    Ok(())
}

/// Opens (creating with `mode` when missing) a file this process keeps and updates in place,
/// in one of its private folders: a symbolic link, a FIFO, a device, a file of another user or
/// one with a second hard link is refused before any byte is read or written. `append` opens it
/// for appending only.
pub fn open_for_update(path: &Path, mode: u32, append: bool) -> Result<File, FileError> {
    // Read access too when appending: a FIFO then opens without a reader and is refused
    // below by its type, with a clear message, rather than failing to open with ENXIO.
    let file = OpenOptions::new()
        .read(true)
        .write(!append)
        .append(append)
        .create(true)
        .mode(mode)
        .custom_flags(libc_flags::NONBLOCK | libc_flags::NOFOLLOW)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(code) if code == libc_flags::ELOOP => FileError::Symlink {
                path: path.to_path_buf(),
            },
            _ => FileError::Write {
                path: path.to_path_buf(),
                detail: error.to_string(),
            },
        })?;
    let metadata = file.metadata().map_err(|error| read_error(path, &error))?;
    if !metadata.file_type().is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(&metadata.file_type()),
        });
    }
    check_private(path, &metadata)?;
    Ok(file)
}

/// Refuses a file of another user, or one with a second hard link (another name for it, which
/// could make a write land elsewhere or a planted file pass for ours).
fn check_private(path: &Path, metadata: &std::fs::Metadata) -> Result<(), FileError> {
    let unsafe_file = |reason: String| FileError::Unsafe {
        path: path.to_path_buf(),
        reason,
    };
    if metadata.uid() != effective_uid() {
        return Err(unsafe_file(format!(
            "it belongs to user {} rather than {}",
            metadata.uid(),
            effective_uid()
        )));
    }
    if metadata.nlink() != 1 {
        return Err(unsafe_file(format!(
            "it has {} hard links (another name could make a write land elsewhere)",
            metadata.nlink()
        )));
    }
    Ok(())
}

/// Whether anything is at `path`, a dangling symbolic link included; a path that cannot be
/// looked at (no permission, a file where a folder should be) counts as taken, so nothing is
/// written over what could not be seen.
pub fn occupied(path: &Path) -> bool {
    !matches!(std::fs::symlink_metadata(path), Err(error) if error.kind() == ErrorKind::NotFound)
}

/// This process's effective user id.
pub fn effective_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The open(2) flags std does not name.
mod libc_flags {
    pub const NONBLOCK: i32 = nix::fcntl::OFlag::O_NONBLOCK.bits();
    pub const NOFOLLOW: i32 = nix::fcntl::OFlag::O_NOFOLLOW.bits();
    pub const ELOOP: i32 = nix::errno::Errno::ELOOP as i32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupied_counts_dangling_links_and_what_cannot_be_looked_at() {
        let folder = tempfile::tempdir().unwrap();
        let free = folder.path().join("free.toml");
        assert!(!occupied(&free));
        let dangling = folder.path().join("dangling.toml");
        std::os::unix::fs::symlink(folder.path().join("nowhere"), &dangling).unwrap();
        assert!(occupied(&dangling));
        let file = folder.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(occupied(&file));
        // A file where a folder should be: not "nothing there".
        assert!(occupied(&file.join("below.toml")));
    }

    #[test]
    fn reads_a_small_file_and_refuses_a_large_one() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("small.toml");
        std::fs::write(&path, b"name = 1").unwrap();
        assert_eq!(
            read_limited(&path, 100, Links::Follow).unwrap(),
            b"name = 1"
        );
        let error = read_limited(&path, 4, Links::Follow).unwrap_err();
        assert!(matches!(error, FileError::TooLarge { .. }), "{error}");
        let missing = read_limited(&folder.path().join("none"), 4, Links::Follow).unwrap_err();
        assert!(missing.is_not_found());
    }

    #[test]
    fn a_fifo_a_device_and_a_folder_are_refused_at_once() {
        let folder = tempfile::tempdir().unwrap();
        let fifo = folder.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let started = std::time::Instant::now();
        let error = read_limited(&fifo, 1024, Links::Follow).unwrap_err();
        assert!(error.to_string().contains("FIFO"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let error = read_limited(Path::new("/dev/zero"), 1024, Links::Follow).unwrap_err();
        assert!(error.to_string().contains("character device"), "{error}");
        let error = read_limited(folder.path(), 1024, Links::Follow).unwrap_err();
        assert!(error.to_string().contains("folder"), "{error}");
    }

    #[test]
    fn symlinks_are_refused_when_asked() {
        let folder = tempfile::tempdir().unwrap();
        let target = folder.path().join("target");
        std::fs::write(&target, b"secret").unwrap();
        let link = folder.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(read_limited(&link, 100, Links::Follow).unwrap(), b"secret");
        let error = read_limited(&link, 100, Links::Refuse).unwrap_err();
        assert!(matches!(error, FileError::Symlink { .. }), "{error}");
    }

    #[test]
    fn an_atomic_write_replaces_a_planted_symlink_instead_of_following_it() {
        let folder = tempfile::tempdir().unwrap();
        let victim = folder.path().join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let path = folder.path().join("journal.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_atomically(&path, b"{}", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(folder.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_private_read_refuses_a_second_hard_link_and_a_symlink() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("record.json");
        std::fs::write(&path, b"{}").unwrap();
        assert_eq!(read_private(&path, 100).unwrap(), b"{}");
        std::fs::hard_link(&path, folder.path().join("other-name")).unwrap();
        let error = read_private(&path, 100).unwrap_err();
        assert!(error.to_string().contains("2 hard links"), "{error}");
        let link = folder.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(
            read_private(&link, 100),
            Err(FileError::Symlink { .. })
        ));
    }

    #[test]
    fn a_private_folder_must_not_be_a_link_or_open_to_others() {
        let folder = tempfile::tempdir().unwrap();
        let state = folder.path().join("a").join("state");
        ensure_private_folder(&state, 0o700).unwrap();
        assert!(state.is_dir());
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = ensure_private_folder(&state, 0o700).unwrap_err();
        assert!(error.to_string().contains("others may write"), "{error}");
        let link = folder.path().join("link");
        std::os::unix::fs::symlink(folder.path(), &link).unwrap();
        assert!(matches!(
            ensure_private_folder(&link, 0o700),
            Err(FileError::Symlink { .. })
        ));
    }
}
