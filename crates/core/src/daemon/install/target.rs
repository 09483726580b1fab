//! Where `daemon install` and `daemon uninstall` act: the machine's root (or, for tests and
//! image builds, a folder standing for it), the programs that change users, groups and
//! services (or stand-ins for them), and the program to copy.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, bail};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_elf_file_is_a_program_to_copy() {
        let root = tempfile::tempdir().unwrap();
        let source_path = root.path().join("source");
        std::fs::write(&source_path, b"\x7fELF and the rest").unwrap();
        assert!(open_binary(Some(&source_path)).is_ok());
        // Not a program: refused before anything is written.
        std::fs::write(&source_path, b"#!/bin/sh\n").unwrap();
        assert!(open_binary(Some(&source_path)).is_err());
        // A FIFO is refused without hanging.
        let fifo = root.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open_binary(Some(&fifo)).is_err());
    }
}
