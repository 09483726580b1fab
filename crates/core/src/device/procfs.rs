//! Who a process that NVML lists is: its owner (the real uid in `/proc/PID/status`, named
//! through the system's user database) and its command line (`/proc/PID/cmdline`, made printable
//! and cut short). A process can end between NVML's list and these reads: it then reads as
//! exited, never as an error.
//!
//! NVML gives pids of the host's pid namespace: inside a container that does not share it, /proc
//! knows other processes (or none) under those numbers.

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use super::process::{ListedProcess, MAX_COMMAND_CHARS};
use crate::text::printable;
use gputune_formats::card::GpuProcess;

/// How many bytes of a command line are read: enough for `MAX_COMMAND_CHARS` characters of
/// four bytes each. The rest of a long command line is never read.
const MAX_CMDLINE_BYTES: u64 = (MAX_COMMAND_CHARS * 4) as u64;
/// `/proc/PID/status` is about 1.5 KiB; the Uid line is near its top.
const MAX_STATUS_BYTES: u64 = 8 * 1024;
/// `/proc/PID/comm` is at most 16 bytes; a little more in case that changes.
const MAX_COMM_BYTES: u64 = 64;
/// User names kept; the cache is emptied when it is full.
const MAX_CACHED_USERS: usize = 1024;
/// Ancestors read above a listed process: deeper than any launcher chain (a shell, accelerate,
/// torchrun, a worker), and a bound on the reads a sample makes.
pub const MAX_ANCESTORS: usize = 16;

/// Reads processes' owners and command lines; remembers user names, so a slow user database
/// (LDAP) is asked once per uid.
#[derive(Debug)]
pub struct ProcReader {
    root: PathBuf,
    user_names: HashMap<u32, String>,
}

impl Default for ProcReader {
    fn default() -> ProcReader {
        ProcReader::with_root("/proc")
    }
}

/// What reading a /proc file found.
enum ProcRead {
    Bytes(Vec<u8>),
    /// The process is gone (the file or its folder no longer exists).
    Gone,
    /// Not readable (permissions, a hidepid mount): the process may well run.
    Unreadable,
}

impl ProcReader {
    /// A reader of another folder laid out like /proc (for tests).
    pub fn with_root(root: impl Into<PathBuf>) -> ProcReader {
        ProcReader {
            root: root.into(),
            user_names: HashMap::new(),
        }
    }

    /// The process NVML listed, with its user and command as far as /proc tells them.
    pub fn describe(&mut self, listed: ListedProcess) -> GpuProcess {
        let folder = self.root.join(listed.pid.to_string());
        let mut process = GpuProcess {
            pid: listed.pid,
            kind: listed.kind,
            used_memory_bytes: listed.used_memory_bytes,
            user: None,
            command: None,
            exited: false,
            ancestor_pids: Vec::new(),
        };
        match read_bounded(&folder.join("status"), MAX_STATUS_BYTES) {
            ProcRead::Gone => {
                process.exited = true;
                return process;
            }
            ProcRead::Unreadable => {}
            ProcRead::Bytes(status) => {
                process.user = real_uid(&status).map(|uid| self.user_name(uid));
                process.ancestor_pids = self.ancestors(listed.pid, &status);
            }
        }
        match command_line(&folder) {
            Ok(command) => process.command = command,
            Err(Gone) => process.exited = true,
        }
        process
    }

    /// The parent chain above `pid` (whose /proc status is `status`), nearest first, up to
    /// init (left out) or [`MAX_ANCESTORS`]; it stops where a parent is gone or unreadable, and
    /// at a pid already seen (a chain /proc changed while it was read).
    fn ancestors(&self, pid: u32, status: &[u8]) -> Vec<u32> {
        let mut ancestors = Vec::new();
        let mut next = parent_pid(status);
        while let Some(parent) = next {
            if parent <= 1
                || parent == pid
                || ancestors.len() >= MAX_ANCESTORS
                || ancestors.contains(&parent)
            {
                break;
            }
            ancestors.push(parent);
            let path = self.root.join(parent.to_string()).join("status");
            next = match read_bounded(&path, MAX_STATUS_BYTES) {
                ProcRead::Bytes(status) => parent_pid(&status),
                ProcRead::Gone | ProcRead::Unreadable => None,
            };
        }
        ancestors
    }

    /// The name of `uid`, or the number when it has none (as `ps` shows it).
    fn user_name(&mut self, uid: u32) -> String {
        if let Some(name) = self.user_names.get(&uid) {
            return name.clone();
        }
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(found) => {
                let name = found.map_or_else(|| uid.to_string(), |user| printable(&user.name));
                if self.user_names.len() >= MAX_CACHED_USERS {
                    self.user_names.clear();
                }
                self.user_names.insert(uid, name.clone());
                name
            }
            // The database could not be asked now (not cached: it may answer next time).
            Err(error) => {
                tracing::debug!("looking up uid {uid}: {error}");
                uid.to_string()
            }
        }
    }
}

/// The process ended while it was being read.
struct Gone;

/// The command line, printable and bounded; a process without one (a kernel thread, a zombie)
/// shows its name in brackets, as `ps` does. `Ok(None)` when it cannot be read.
fn command_line(folder: &Path) -> Result<Option<String>, Gone> {
    let bytes = match read_bounded(&folder.join("cmdline"), MAX_CMDLINE_BYTES) {
        ProcRead::Gone => return Err(Gone),
        ProcRead::Unreadable => return Ok(None),
        ProcRead::Bytes(bytes) => bytes,
    };
    let cut_short = bytes.len() as u64 >= MAX_CMDLINE_BYTES;
    let arguments: Vec<String> = bytes
        .split(|&byte| byte == 0)
        .map(|argument| String::from_utf8_lossy(argument).into_owned())
        .collect();
    let joined = arguments.join(" ");
    let joined = joined.trim_end();
    if joined.is_empty() {
        return match read_bounded(&folder.join("comm"), MAX_COMM_BYTES) {
            ProcRead::Gone => Err(Gone),
            ProcRead::Unreadable => Ok(None),
            ProcRead::Bytes(name) => {
                let name = String::from_utf8_lossy(&name).trim_end().to_string();
                Ok((!name.is_empty()).then(|| format!("[{}]", printable(&name))))
            }
        };
    }
    Ok(Some(shorten(&printable(joined), cut_short)))
}

/// `text` cut to `MAX_COMMAND_CHARS` characters, ending in "…" when anything was left out.
fn shorten(text: &str, already_cut: bool) -> String {
    if !already_cut && text.chars().count() <= MAX_COMMAND_CHARS {
        return text.to_string();
    }
    let mut shown: String = text.chars().take(MAX_COMMAND_CHARS - 1).collect();
    shown.push('…');
    shown
}

/// The real uid on the `Uid:` line of /proc/PID/status.
fn real_uid(status: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(status)
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
}

/// The parent's pid on the `PPid:` line of /proc/PID/status (0 for a process of another pid
/// namespace's init).
fn parent_pid(status: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(status)
        .lines()
        .find_map(|line| line.strip_prefix("PPid:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// At most `limit` bytes of a /proc file.
fn read_bounded(path: &Path, limit: u64) -> ProcRead {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) => return read_error(&error),
    };
    let mut bytes = Vec::new();
    match file.take(limit).read_to_end(&mut bytes) {
        Ok(_) => ProcRead::Bytes(bytes),
        Err(error) => read_error(&error),
    }
}

fn read_error(error: &std::io::Error) -> ProcRead {
    // ESRCH: the process ended between the open and the read.
    const ESRCH: i32 = 3;
    if error.kind() == ErrorKind::NotFound || error.raw_os_error() == Some(ESRCH) {
        ProcRead::Gone
    } else {
        ProcRead::Unreadable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::card::ProcessKind;

    fn listed(pid: u32) -> ListedProcess {
        ListedProcess {
            pid,
            kind: ProcessKind::Compute,
            used_memory_bytes: Some(1 << 30),
        }
    }

    fn fake_process(root: &Path, pid: u32, uid: u32, cmdline: &[u8], comm: &str) {
        fake_child(root, pid, 1, uid, cmdline, comm);
    }

    fn fake_child(root: &Path, pid: u32, ppid: u32, uid: u32, cmdline: &[u8], comm: &str) {
        let folder = root.join(pid.to_string());
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("status"),
            format!(
                "Name:\t{comm}\nUmask:\t0022\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
            ),
        )
        .unwrap();
        std::fs::write(folder.join("cmdline"), cmdline).unwrap();
        std::fs::write(folder.join("comm"), format!("{comm}\n")).unwrap();
    }

    #[test]
    fn reads_the_owner_and_the_command_line() {
        let root = tempfile::tempdir().unwrap();
        fake_process(
            root.path(),
            42,
            0,
            b"python\0train.py\0--lr\x001e-4\0",
            "python",
        );
        let process = ProcReader::with_root(root.path()).describe(listed(42));
        assert_eq!(process.user.as_deref(), Some("root"));
        assert_eq!(
            process.command.as_deref(),
            Some("python train.py --lr 1e-4")
        );
        assert!(!process.exited);
        assert_eq!(process.used_memory_bytes, Some(1 << 30));
    }

    #[test]
    fn a_vanished_process_reads_as_exited() {
        let root = tempfile::tempdir().unwrap();
        let process = ProcReader::with_root(root.path()).describe(listed(7));
        assert!(process.exited);
        assert_eq!(process.command_text(), "(exited)");
        assert_eq!(process.user, None);
    }

    #[test]
    fn control_characters_are_escaped_and_long_commands_cut() {
        let root = tempfile::tempdir().unwrap();
        fake_process(root.path(), 1, 0, b"evil\0\x1b[2J\0", "evil");
        let long = format!("python\0{}\0", "x".repeat(5_000));
        fake_process(root.path(), 2, 0, long.as_bytes(), "python");
        let mut reader = ProcReader::with_root(root.path());
        assert_eq!(
            reader.describe(listed(1)).command.as_deref(),
            Some("evil \\u{1b}[2J")
        );
        let command = reader.describe(listed(2)).command.unwrap_or_default();
        assert_eq!(command.chars().count(), MAX_COMMAND_CHARS);
        assert!(command.starts_with("python xxx") && command.ends_with('…'));
    }

    #[test]
    fn a_process_without_a_command_line_shows_its_name_and_an_unnamed_uid_its_number() {
        let root = tempfile::tempdir().unwrap();
        fake_process(root.path(), 3, 4_000_000_000, b"", "kworker/0:1");
        let process = ProcReader::with_root(root.path()).describe(listed(3));
        assert_eq!(process.command.as_deref(), Some("[kworker/0:1]"));
        assert_eq!(process.user.as_deref(), Some("4000000000"));
    }

    #[test]
    fn shortening_keeps_text_that_fits() {
        let exact = "y".repeat(MAX_COMMAND_CHARS);
        assert_eq!(shorten(&exact, false), exact);
        assert_eq!(shorten("short", false), "short");
        assert_eq!(shorten("short", true), "short…");
    }

    #[test]
    fn this_process_is_found_in_the_real_proc() {
        let pid = std::process::id();
        let process = ProcReader::default().describe(listed(pid));
        assert!(!process.exited);
        assert!(process.user.is_some());
        assert!(process.command.is_some());
    }

    #[test]
    fn a_worker_knows_its_launchers_up_to_init() {
        let root = tempfile::tempdir().unwrap();
        // bash (the job, 100) → torchrun (200) → a worker (300) using the GPU.
        fake_child(root.path(), 100, 1, 0, b"bash\0train.sh\0", "bash");
        fake_child(root.path(), 200, 100, 0, b"torchrun\0", "torchrun");
        fake_child(root.path(), 300, 200, 0, b"python\0train.py\0", "python");
        let worker = ProcReader::with_root(root.path()).describe(listed(300));
        assert_eq!(worker.ancestor_pids, vec![200, 100]);
        assert!(worker.belongs_to_job(Some(100)));
        assert!(worker.belongs_to_job(Some(300)));
        assert!(!worker.belongs_to_job(Some(7)));
        assert!(!worker.belongs_to_job(None));
    }

    #[test]
    fn a_chain_that_loops_or_runs_deep_or_breaks_is_cut_short() {
        let root = tempfile::tempdir().unwrap();
        // A loop (as /proc can show when pids are reused while it is read).
        fake_child(root.path(), 10, 11, 0, b"a\0", "a");
        fake_child(root.path(), 11, 12, 0, b"b\0", "b");
        fake_child(root.path(), 12, 11, 0, b"c\0", "c");
        let looping = ProcReader::with_root(root.path()).describe(listed(10));
        assert_eq!(looping.ancestor_pids, vec![11, 12]);
        // A chain deeper than the bound.
        for pid in 1_000..1_100 {
            fake_child(root.path(), pid, pid + 1, 0, b"x\0", "x");
        }
        let deep = ProcReader::with_root(root.path()).describe(listed(1_000));
        assert_eq!(deep.ancestor_pids.len(), MAX_ANCESTORS);
        assert_eq!(deep.ancestor_pids[0], 1_001);
        // A parent that is gone ends the chain; the process is still read.
        fake_child(root.path(), 20, 21, 0, b"orphaned\0", "orphaned");
        let broken = ProcReader::with_root(root.path()).describe(listed(20));
        assert_eq!(broken.ancestor_pids, vec![21]);
        assert_eq!(broken.command.as_deref(), Some("orphaned"));
    }
}
