//! Where `daemon install` and `daemon uninstall` act: the machine's root (or, for tests and
//! image builds, a folder standing for it), the programs that change users, groups and
//! services (or stand-ins for them), and the safe copy of the binary the unit runs.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, bail};

use crate::fsafe;
use crate::text;

/// Installs everything under this folder instead of `/` (tests, building a system image):
/// the binary, the unit, and the `run/systemd/system` that says whether systemd runs.
pub const INSTALL_ROOT_ENV: &str = "GPUTUNE_INSTALL_ROOT";
/// A folder holding the programs install runs (`getent`, `groupadd`, `usermod`, `systemctl`),
/// used instead of the system's: tests run stand-ins that record what they were asked.
pub const INSTALL_COMMANDS_ENV: &str = "GPUTUNE_INSTALL_COMMANDS";

/// A program larger than this is not gputune (a debug build is ~75 MB).
const BINARY_LIMIT_BYTES: u64 = 1 << 30;

/// How the user, group and service steps are carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tools {
    /// The system's programs, found on root's `PATH`.
    System,
    /// The programs in this folder.
    StandIns(PathBuf),
    /// Not run: an install into a folder (`GPUTUNE_INSTALL_ROOT`) without stand-ins; the
    /// commands are printed for the target machine.
    Skipped,
}

/// The root an install acts on and the programs it runs.
#[derive(Debug, Clone)]
pub struct Target {
    pub root: PathBuf,
    pub tools: Tools,
}

impl Target {
    /// From `GPUTUNE_INSTALL_ROOT` and `GPUTUNE_INSTALL_COMMANDS`; `/` and the system's programs
    /// when they are not set.
    pub fn from_env() -> anyhow::Result<Target> {
        let folder = |name: &str| -> anyhow::Result<Option<PathBuf>> {
            match std::env::var_os(name).filter(|value| !value.is_empty()) {
                None => Ok(None),
                Some(value) => {
                    let path = PathBuf::from(value);
                    if !path.is_absolute() {
                        bail!(
                            "{name} must be an absolute path, not {}.",
                            text::path(&path)
                        );
                    }
                    Ok(Some(path))
                }
            }
        };
        let root = folder(INSTALL_ROOT_ENV)?;
        let commands = folder(INSTALL_COMMANDS_ENV)?;
        let tools = match (&root, commands) {
            (_, Some(commands)) => Tools::StandIns(commands),
            (Some(_), None) => Tools::Skipped,
            (None, None) => Tools::System,
        };
        Ok(Target {
            root: root.unwrap_or_else(|| PathBuf::from("/")),
            tools,
        })
    }

    /// Whether this acts on the machine itself (not a folder standing for its root).
    pub fn is_system(&self) -> bool {
        self.root == Path::new("/")
    }

    /// `absolute` (a path on the target machine) as seen from here.
    pub fn path(&self, absolute: &str) -> PathBuf {
        self.root.join(absolute.trim_start_matches('/'))
    }

    /// Whether systemd runs the target machine (what `sd_booted()` checks).
    pub fn systemd_runs(&self) -> bool {
        std::fs::symlink_metadata(self.path("/run/systemd/system"))
            .is_ok_and(|metadata| metadata.is_dir())
    }

    /// Runs one of the install's programs; `Ok(None)` when they are skipped. A program that
    /// cannot be started is an error that names it.
    pub fn run(&self, program: &str, arguments: &[&str]) -> anyhow::Result<Option<Output>> {
        let mut command = match &self.tools {
            Tools::Skipped => return Ok(None),
            Tools::System => Command::new(program),
            Tools::StandIns(folder) => Command::new(folder.join(program)),
        };
        command
            .args(arguments)
            .stdin(Stdio::null())
            .env("LC_ALL", "C");
        let output = command.output().with_context(|| {
            format!(
                "`{program} {}` could not be run; run it yourself",
                arguments.join(" ")
            )
        })?;
        Ok(Some(output))
    }

    /// Runs a program that must succeed: its error output is part of the message.
    pub fn run_checked(&self, program: &str, arguments: &[&str]) -> anyhow::Result<bool> {
        let Some(output) = self.run(program, arguments)? else {
            return Ok(false);
        };
        if !output.status.success() {
            bail!(
                "`{program} {}` failed ({}{}).",
                arguments.join(" "),
                output.status,
                said(&output)
            );
        }
        Ok(true)
    }
}

/// ": what the program said on stderr", short and safe to print, or nothing.
pub fn said(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr.trim();
    if line.is_empty() {
        return String::new();
    }
    let short: String = line.chars().take(300).collect();
    format!(": {}", text::printable(&short))
}

/// A group as `getent group NAME` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    pub members: Vec<String>,
}

/// Parses a `name:password:gid:member,member` line.
pub fn parse_group_line(line: &str) -> Option<GroupEntry> {
    let fields: Vec<&str> = line.trim_end().split(':').collect();
    if fields.len() != 4 {
        return None;
    }
    Some(GroupEntry {
        members: fields[3]
            .split(',')
            .filter(|member| !member.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

/// Checks that `folder` (below `root`) and every folder from `root` down to it is a real
/// folder (no symlink) that only this process's user (root, on a real install) owns and can
/// write: else whoever can write one of them could replace what root runs. With `create`,
/// missing folders are made (mode 0755); without, a missing one ends the walk.
pub fn trusted_folder(root: &Path, folder: &Path, create: bool) -> anyhow::Result<bool> {
    let relative = folder.strip_prefix(root).unwrap_or(folder);
    let mut path = root.to_path_buf();
    check_folder(&path)?;
    for component in relative.components() {
        if matches!(component, std::path::Component::RootDir) {
            continue;
        }
        path.push(component);
        match std::fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(error) if error.kind() == ErrorKind::NotFound && create => {
                std::fs::DirBuilder::new()
                    .mode(0o755)
                    .create(&path)
                    .with_context(|| format!("{} could not be created", text::path(&path)))?;
                // The umask may have taken bits away; the folder is everyone's to read.
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    .with_context(|| format!("{} could not be set to 0755", text::path(&path)))?;
            }
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(false),
            Err(error) => bail!("{} cannot be checked ({error}).", text::path(&path)),
        }
        check_folder(&path)?;
    }
    Ok(true)
}

fn check_folder(path: &Path) -> anyhow::Result<()> {
    let metadata = std::fs::symlink_metadata(path)
        .with_context(|| format!("{} cannot be checked", text::path(path)))?;
    let owner = fsafe::effective_uid();
    if metadata.file_type().is_symlink() {
        bail!(
            "{} is a symbolic link: the daemon's binary must lie in real folders only root can change; remove the link and install again.",
            text::path(path)
        );
    }
    if !metadata.is_dir() {
        bail!(
            "{} is not a folder; move it away and install again.",
            text::path(path)
        );
    }
    if metadata.uid() != owner {
        bail!(
            "{} belongs to user {}, who could change what the daemon runs as root; give it to root (`chown root: {}`) and install again, or install the Debian package.",
            text::path(path),
            metadata.uid(),
            text::path(path)
        );
    }
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        bail!(
            "{} can be written by others (mode {mode:o}), who could change what the daemon runs as root; `chmod go-w {}` and install again, or install the Debian package.",
            text::path(path),
            text::path(path)
        );
    }
    Ok(())
}

/// The program to copy, opened: this very binary (`/proc/self/exe`, the file that runs even
/// if its name was replaced since) or `path`. It must be a regular ELF file.
pub fn open_binary(path: Option<&Path>) -> anyhow::Result<(File, PathBuf)> {
    let shown = match path {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")),
    };
    let opened = match path {
        // Non-blocking: a FIFO named by mistake must not hang the install.
        Some(path) => OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path),
        None => File::open("/proc/self/exe"),
    };
    let mut file = opened.with_context(|| format!("{} cannot be opened", text::path(&shown)))?;
    let metadata = file
        .metadata()
        .with_context(|| format!("{} cannot be checked", text::path(&shown)))?;
    if !metadata.is_file() || metadata.len() > BINARY_LIMIT_BYTES {
        bail!(
            "{} is not a gputune program (not a regular file of at most 1 GiB).",
            text::path(&shown)
        );
    }
    let mut magic = [0_u8; 4];
    let is_elf = file.read_exact(&mut magic).is_ok() && magic == *b"\x7fELF";
    if !is_elf {
        bail!(
            "{} is not a program (no ELF header); give --binary the gputune you built.",
            text::path(&shown)
        );
    }
    file.rewind()
        .with_context(|| format!("{} cannot be read", text::path(&shown)))?;
    Ok((file, shown))
}

/// Copies `source` to `destination` atomically: a new file in the same folder (created
/// exclusively, never through a link), mode 0755, owned by root when this runs as root,
/// synced, then renamed over whatever was there. A symlink planted at `destination` is
/// replaced, never followed.
pub fn copy_binary(source: &mut File, destination: &Path) -> anyhow::Result<()> {
    let folder = destination.parent().unwrap_or(Path::new("/"));
    let name = destination
        .file_name()
        .unwrap_or(OsStr::new("gputune"))
        .to_string_lossy();
    let temporary = folder.join(format!(".{name}.{}.new", std::process::id()));
    let failed = |what: &str, error: std::io::Error| {
        anyhow::anyhow!("{} could not be {what} ({error}).", text::path(destination))
    };
    // A leftover of an install killed halfway: ours to replace (the folder is root's alone).
    match std::fs::remove_file(&temporary) {
        Ok(()) => {}
        Err(error) if error.kind() == ErrorKind::NotFound => {}
        Err(error) => return Err(failed("written", error)),
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&temporary)
        .map_err(|error| failed("written", error))?;
    let written = std::io::copy(source, &mut file)
        .and_then(|_| file.set_permissions(std::fs::Permissions::from_mode(0o755)))
        .and_then(|()| {
            if fsafe::effective_uid() == 0 {
                std::os::unix::fs::fchown(&file, Some(0), Some(0))
            } else {
                Ok(())
            }
        })
        .and_then(|()| file.flush())
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temporary, destination));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(failed("written", error));
    }
    if let Ok(folder) = File::open(folder) {
        let _ = folder.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_line_gives_its_members() {
        assert_eq!(
            parse_group_line("gputune:x:998:alice,bob\n"),
            Some(GroupEntry {
                members: vec!["alice".to_string(), "bob".to_string()]
            })
        );
        assert_eq!(
            parse_group_line("gputune:x:998:"),
            Some(GroupEntry { members: vec![] })
        );
        assert_eq!(parse_group_line("nonsense"), None);
    }

    #[test]
    fn folders_others_can_change_or_links_are_refused_and_missing_ones_made_private() {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let folder = root.path().join("usr/local/libexec/gputune");
        assert!(!trusted_folder(root.path(), &folder, false).unwrap());
        assert!(trusted_folder(root.path(), &folder, true).unwrap());
        let mode = std::fs::metadata(&folder).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        // Group-writable on the way: refused, whatever lies below.
        let local = root.path().join("usr/local");
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o2775)).unwrap();
        let refusal = trusted_folder(root.path(), &folder, true).unwrap_err();
        assert!(refusal.to_string().contains("chmod go-w"), "{refusal}");
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A link in place of a folder: refused, never followed.
        let libexec = root.path().join("usr/local/libexec");
        std::fs::rename(&libexec, root.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(root.path().join("elsewhere"), &libexec).unwrap();
        let refusal = trusted_folder(root.path(), &folder, true).unwrap_err();
        assert!(refusal.to_string().contains("symbolic link"), "{refusal}");
    }

    #[test]
    fn the_copy_replaces_a_planted_link_instead_of_writing_through_it() {
        let root = tempfile::tempdir().unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let destination = root.path().join("gputune");
        std::os::unix::fs::symlink(&victim, &destination).unwrap();
        let source_path = root.path().join("source");
        std::fs::write(&source_path, b"\x7fELF and the rest").unwrap();
        let (mut source, _) = open_binary(Some(&source_path)).unwrap();
        copy_binary(&mut source, &destination).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        let metadata = std::fs::symlink_metadata(&destination).unwrap();
        assert!(metadata.is_file());
        assert_eq!(metadata.permissions().mode() & 0o7777, 0o755);
        assert_eq!(metadata.uid(), fsafe::effective_uid());
        assert_eq!(
            std::fs::read(&destination).unwrap(),
            b"\x7fELF and the rest"
        );
        // Not a program: refused before anything is written.
        std::fs::write(&source_path, b"#!/bin/sh\n").unwrap();
        assert!(open_binary(Some(&source_path)).is_err());
        // A FIFO is refused without hanging.
        let fifo = root.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open_binary(Some(&fifo)).is_err());
    }
}
