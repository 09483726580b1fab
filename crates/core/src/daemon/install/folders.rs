//! The folders `daemon install` and `uninstall` write in or remove from, opened one component
//! at a time from the install root with `openat(O_NOFOLLOW | O_DIRECTORY)`: a symbolic link
//! anywhere on the way is refused, never followed, and each folder must be a real folder of
//! this user's (root's) that nobody else can write. Every later step (the copy, the unit, a
//! removal) acts relative to the open folder, so nothing can be swapped in between the check
//! and the use.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::bail;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

use crate::fsafe;
use crate::text;

/// Deeper than this, a purge refuses rather than opening folder after folder.
const PURGE_DEPTH_LIMIT: usize = 32;

const OPEN_FOLDER: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// A folder opened without following links, every folder above it (to the root) checked.
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
    /// Where it is, as seen from here: for messages only, never opened again.
    pub path: PathBuf,
}

/// Opens `absolute` (a path on the target machine) below `root`. With `create`, missing
/// folders are made (root's, mode 0755); without, `Ok(None)` says one is missing (every
/// folder that exists on the way was checked). `done` ends a refusal: what was left undone.
pub fn open(
    root: &Path,
    absolute: &str,
    create: bool,
    done: &str,
) -> anyhow::Result<Option<Folder>> {
    // The root itself is the administrator's choice (`/`, or GPUTUNE_INSTALL_ROOT): opened as
    // named, then checked like every folder below it.
    let fd = match nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(errno) => bail!("{} cannot be opened ({errno}); {done}.", text::path(root)),
    };
    let mut folder = Folder {
        fd,
        path: root.to_path_buf(),
    };
    folder.check(done)?;
    for component in Path::new(absolute).components() {
        let Component::Normal(name) = component else {
            continue;
        };
        match folder.child(name, create, done)? {
            Some(child) => folder = child,
            None => return Ok(None),
        }
    }
    Ok(Some(folder))
}

impl Folder {
    /// The folder `name` in this one, opened and checked as [`open`] does.
    pub fn child(&self, name: &OsStr, create: bool, done: &str) -> anyhow::Result<Option<Folder>> {
        let path = self.path.join(name);
        let fd = match nix::fcntl::openat(self.fd.as_fd(), name, OPEN_FOLDER, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if create => {
                match nix::sys::stat::mkdirat(
                    self.fd.as_fd(),
                    name,
                    Mode::from_bits_truncate(0o755),
                ) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(errno) => bail!(
                        "{} could not be created ({errno}); {done}.",
                        text::path(&path)
                    ),
                }
                let fd = match nix::fcntl::openat(self.fd.as_fd(), name, OPEN_FOLDER, Mode::empty())
                {
                    Ok(fd) => fd,
                    Err(errno) => return Err(self.refusal(name, errno, done)),
                };
                // The umask may have taken bits away; the folder is everyone's to read.
                if let Err(errno) =
                    nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(0o755))
                {
                    bail!(
                        "{} could not be set to mode 0755 ({errno}); {done}.",
                        text::path(&path)
                    );
                }
                fd
            }
            Err(Errno::ENOENT) => return Ok(None),
            Err(errno) => return Err(self.refusal(name, errno, done)),
        };
        let folder = Folder { fd, path };
        folder.check(done)?;
        Ok(Some(folder))
    }

    /// Why `name` could not be opened as a folder: a link, something else, or the error.
    fn refusal(&self, name: &OsStr, errno: Errno, done: &str) -> anyhow::Error {
        let path = self.path.join(name);
        let shown = text::path(&path);
        match self.entry_kind(name) {
            Some(kind) if kind == nix::libc::S_IFLNK => {
                let target = nix::fcntl::readlinkat(self.fd.as_fd(), name)
                    .map(|target| text::path(Path::new(&target)))
                    .unwrap_or_else(|_| "somewhere".to_string());
                anyhow::anyhow!(
                    "{shown} is a symbolic link (to {target}): the installer never follows links in the folders it writes or removes from, as whoever planted it could steer root elsewhere; replace it with a real folder of root's, then run again; {done}."
                )
            }
            Some(kind) if kind != nix::libc::S_IFDIR => {
                anyhow::anyhow!("{shown} is not a folder; move it away and run again; {done}.")
            }
            _ => anyhow::anyhow!("{shown} cannot be opened ({errno}); {done}."),
        }
    }

    /// The file type bits of `name` in this folder (a link itself, never its target).
    fn entry_kind(&self, name: &OsStr) -> Option<nix::libc::mode_t> {
        nix::sys::stat::fstatat(self.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .ok()
            .map(|stat| stat.st_mode & nix::libc::S_IFMT)
    }

    /// A folder root can trust: this user's, and nobody else may write it (else whoever can
    /// could replace what the daemon runs as root, or what uninstall removes).
    fn check(&self, done: &str) -> anyhow::Result<()> {
        let shown = text::path(&self.path);
        let metadata = match self.file().and_then(|file| file.metadata()) {
            Ok(metadata) => metadata,
            Err(error) => bail!("{shown} cannot be checked ({error}); {done}."),
        };
        let owner = fsafe::effective_uid();
        if metadata.uid() != owner {
            bail!(
                "{shown} belongs to user {}, who could swap what root writes, runs or removes there; give it to root (`chown root: {shown}`) and run again; {done}.",
                metadata.uid()
            );
        }
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & 0o022 != 0 {
            bail!(
                "{shown} can be written by others (mode {mode:o}), who could swap what root writes, runs or removes there; `chmod go-w {shown}` and run again; {done}."
            );
        }
        Ok(())
    }

    /// A second descriptor of this folder as a `File` (for metadata and sync).
    fn file(&self) -> std::io::Result<File> {
        Ok(File::from(self.fd.try_clone()?))
    }

    /// Reads the regular file `name` of at most `limit_bytes`; `None` when absent. A link, a
    /// FIFO or a device there is refused without being followed or blocking.
    pub fn read(&self, name: &str, limit_bytes: u64) -> anyhow::Result<Option<Vec<u8>>> {
        let path = self.path.join(name);
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let file = match nix::fcntl::openat(self.fd.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => bail!(
                "{} is a symbolic link, which the installer never follows; remove it and run again.",
                text::path(&path)
            ),
            Err(errno) => bail!("{} cannot be read ({errno}).", text::path(&path)),
        };
        let metadata = file.metadata()?;
        if !metadata.is_file() {
            bail!(
                "{} is not a regular file; move it away and run again.",
                text::path(&path)
            );
        }
        let mut bytes = Vec::new();
        file.take(limit_bytes + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > limit_bytes {
            bail!(
                "{} is larger than {limit_bytes} bytes; it was not read.",
                text::path(&path)
            );
        }
        Ok(Some(bytes))
    }

    /// Replaces `name` with what `source` holds, atomically: a new file in this folder
    /// (created exclusively, never through a link), `mode`, root's when this runs as root,
    /// synced, then renamed over whatever was there (a planted link is replaced, not followed).
    pub fn replace(&self, name: &str, source: &mut dyn Read, mode: u32) -> anyhow::Result<()> {
        let path = self.path.join(name);
        let temporary = format!(".{name}.{}.new", std::process::id());
        let failed = |error: &dyn std::fmt::Display| {
            anyhow::anyhow!("{} could not be written ({error}).", text::path(&path))
        };
        // A leftover of an install killed halfway: ours to replace (the folder is root's alone).
        match nix::unistd::unlinkat(
            self.fd.as_fd(),
            temporary.as_str(),
            UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(errno) => return Err(failed(&errno)),
        }
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut file = match nix::fcntl::openat(
            self.fd.as_fd(),
            temporary.as_str(),
            flags,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => File::from(fd),
            Err(errno) => return Err(failed(&errno)),
        };
        let written = std::io::copy(source, &mut file)
            .and_then(|_| file.set_permissions(std::fs::Permissions::from_mode(mode)))
            .and_then(|()| {
                if fsafe::effective_uid() == 0 {
                    std::os::unix::fs::fchown(&file, Some(0), Some(0))
                } else {
                    Ok(())
                }
            })
            .and_then(|()| file.flush())
            .and_then(|()| file.sync_all())
            .and_then(|()| {
                nix::fcntl::renameat(self.fd.as_fd(), temporary.as_str(), self.fd.as_fd(), name)
                    .map_err(std::io::Error::from)
            });
        if let Err(error) = written {
            let _ = nix::unistd::unlinkat(
                self.fd.as_fd(),
                temporary.as_str(),
                UnlinkatFlags::NoRemoveDir,
            );
            return Err(failed(&error));
        }
        // The rename is durable once the folder is: best effort.
        if let Ok(folder) = self.file() {
            let _ = folder.sync_all();
        }
        Ok(())
    }

    /// Removes the file (or link itself) `name`; `false` when there was none.
    pub fn remove_file(&self, name: &str) -> anyhow::Result<bool> {
        match nix::unistd::unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(errno) => bail!(
                "{} could not be removed ({errno}).",
                text::path(&self.path.join(name))
            ),
        }
    }

    /// Removes `name` when it is a symbolic link (what `systemctl enable` leaves).
    pub fn remove_link(&self, name: &str) -> anyhow::Result<()> {
        if self.entry_kind(OsStr::new(name)) == Some(nix::libc::S_IFLNK) {
            self.remove_file(name)?;
        }
        Ok(())
    }

    /// Removes the folder `name` when it is empty: whatever else is there is not ours.
    pub fn remove_empty_folder(&self, name: &str) {
        let _ = nix::unistd::unlinkat(self.fd.as_fd(), name, UnlinkatFlags::RemoveDir);
    }

    /// Removes the folder `child` (opened from this one) and everything in it: every entry
    /// is removed relative to its open folder, a link is removed itself and never followed,
    /// and another file system mounted inside is refused.
    pub fn remove_tree(&self, child: Folder) -> anyhow::Result<()> {
        let device = child.file()?.metadata()?.dev();
        empty_folder(&child, device, 0)?;
        let name = child.path.file_name().unwrap_or(OsStr::new(""));
        if let Err(errno) = nix::unistd::unlinkat(self.fd.as_fd(), name, UnlinkatFlags::RemoveDir) {
            bail!(
                "{} could not be removed ({errno}).",
                text::path(&child.path)
            );
        }
        Ok(())
    }
}

fn empty_folder(folder: &Folder, device: u64, depth: usize) -> anyhow::Result<()> {
    if depth > PURGE_DEPTH_LIMIT {
        bail!(
            "{} lies more than {PURGE_DEPTH_LIMIT} folders deep; it was left as it is: remove it yourself.",
            text::path(&folder.path)
        );
    }
    let names: Vec<OsString> = {
        let mut listing = nix::dir::Dir::from_fd(folder.fd.try_clone()?)?;
        listing
            .iter()
            .filter_map(Result::ok)
            .map(|entry| OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string())
            .filter(|name| name != "." && name != "..")
            .collect()
    };
    for name in names {
        let path = folder.path.join(&name);
        if folder.entry_kind(&name) == Some(nix::libc::S_IFDIR) {
            let fd = match nix::fcntl::openat(
                folder.fd.as_fd(),
                name.as_os_str(),
                OPEN_FOLDER,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(errno) => bail!("{} cannot be opened ({errno}).", text::path(&path)),
            };
            let child = Folder {
                fd,
                path: path.clone(),
            };
            if child.file()?.metadata()?.dev() != device {
                bail!(
                    "{} is another file system mounted there; it was left as it is: unmount it and run again.",
                    text::path(&path)
                );
            }
            empty_folder(&child, device, depth + 1)?;
            if let Err(errno) = nix::unistd::unlinkat(
                folder.fd.as_fd(),
                name.as_os_str(),
                UnlinkatFlags::RemoveDir,
            ) {
                bail!("{} could not be removed ({errno}).", text::path(&path));
            }
        } else if let Err(errno) = nix::unistd::unlinkat(
            folder.fd.as_fd(),
            name.as_os_str(),
            UnlinkatFlags::NoRemoveDir,
        ) {
            bail!("{} could not be removed ({errno}).", text::path(&path));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        root
    }

    #[test]
    fn folders_others_can_change_or_links_are_refused_and_missing_ones_made_0755() {
        let root = root();
        let folder = "/usr/local/libexec/gputune";
        assert!(open(root.path(), folder, false, "x").unwrap().is_none());
        let made = open(root.path(), folder, true, "x").unwrap().unwrap();
        assert_eq!(made.path, root.path().join("usr/local/libexec/gputune"));
        let mode = std::fs::metadata(&made.path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        // Group-writable on the way: refused, whatever lies below.
        let local = root.path().join("usr/local");
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o2775)).unwrap();
        let refusal = open(root.path(), folder, true, "x").unwrap_err();
        assert!(refusal.to_string().contains("chmod go-w"), "{refusal}");
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A link in place of a folder: refused, never followed, even to a good folder.
        let libexec = root.path().join("usr/local/libexec");
        std::fs::rename(&libexec, root.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(root.path().join("elsewhere"), &libexec).unwrap();
        let refusal = open(root.path(), folder, true, "nothing was done").unwrap_err();
        let said = refusal.to_string();
        assert!(said.contains("is a symbolic link (to "), "{said}");
        assert!(said.ends_with("; nothing was done."), "{said}");
        // A file in place of a folder.
        std::fs::remove_file(&libexec).unwrap();
        std::fs::write(&libexec, b"").unwrap();
        let refusal = open(root.path(), folder, true, "x").unwrap_err();
        assert!(refusal.to_string().contains("is not a folder"), "{refusal}");
    }

    #[test]
    fn a_replacement_replaces_a_planted_link_instead_of_writing_through_it() {
        let root = root();
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let destination = root.path().join("gputune");
        std::os::unix::fs::symlink(&victim, &destination).unwrap();
        let folder = open(root.path(), "/", false, "x").unwrap().unwrap();
        folder
            .replace("gputune", &mut &b"\x7fELF and the rest"[..], 0o755)
            .unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        let metadata = std::fs::symlink_metadata(&destination).unwrap();
        assert!(metadata.is_file());
        assert_eq!(metadata.permissions().mode() & 0o7777, 0o755);
        assert_eq!(metadata.uid(), fsafe::effective_uid());
        assert_eq!(
            std::fs::read(&destination).unwrap(),
            b"\x7fELF and the rest"
        );
        // Reading refuses a link; removing a link removes the link only.
        std::os::unix::fs::symlink(&victim, root.path().join("link")).unwrap();
        assert!(folder.read("link", 100).is_err());
        assert_eq!(folder.read("none", 100).unwrap(), None);
        folder.remove_link("link").unwrap();
        folder.remove_link("gputune").unwrap();
        assert!(destination.is_file());
        assert!(!root.path().join("link").exists());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    }

    #[test]
    fn a_tree_is_removed_without_following_its_links() {
        let root = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), b"keep me").unwrap();
        let state = root.path().join("state");
        std::fs::create_dir_all(state.join("a/b")).unwrap();
        std::fs::write(state.join("a/b/file"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), state.join("a/folder-link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("victim"), state.join("file-link")).unwrap();
        let parent = open(root.path(), "/", false, "x").unwrap().unwrap();
        let child = parent
            .child(OsStr::new("state"), false, "x")
            .unwrap()
            .unwrap();
        parent.remove_tree(child).unwrap();
        assert!(!state.exists());
        assert_eq!(
            std::fs::read(outside.path().join("victim")).unwrap(),
            b"keep me"
        );
    }
}
