//! The job's processes (its tree and its state from /proc) and the words of the one stop
//! policy: SIGTERM (then SIGCONT, so a stopped job gets it) to its process group,
//! [`STOP_GRACE`] to end, then SIGKILL to its whole tree.

use std::io::Read;
use std::time::Duration;

/// How long a job has to end after SIGTERM before it is killed (a training script may save a
/// checkpoint on SIGTERM; a few seconds is enough to end without one).
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long the job's process may stay stopped (state `T`: SIGTTIN or SIGTTOU from the
/// terminal, SIGSTOP) before it is stopped by the policy: a stopped job would hold the card at
/// the profile forever, and nothing else would say why.
pub(super) const STOPPED_FOR: Duration = Duration::from_secs(1);

/// What a front end says, once, when the job was stopped and is stopped by the policy.
pub(super) const STOPPED_SENTENCE: &str = "the command was stopped: it tried to use the terminal (a password prompt, stty, a read of it), which a command under gputune does not own as it runs in a process group of its own, or it was sent SIGSTOP. Stopping it; run it with its input from a file or without a terminal prompt.";

/// What a stop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopping {
    /// SIGTERM went to the job's process group; it is killed after the grace.
    Terminating,
    /// Asked again: the job and everything it started were killed.
    Killed,
}

impl Stopping {
    /// The sentence a front end says (after its own words about what it puts back).
    pub fn sentence(self) -> String {
        match self {
            Stopping::Terminating => format!(
                "stopping the command: SIGTERM to its processes, SIGKILL to what is left after {} s (Ctrl-C again kills it now).",
                STOP_GRACE.as_secs()
            ),
            Stopping::Killed => "killing the command.".to_string(),
        }
    }
}

/// Whether `pid` is stopped (state `T` in /proc/PID/stat); false for a process that is gone or
/// cannot be read. Reads at most a few KiB.
pub(super) fn is_stopped(pid: u32) -> bool {
    let mut stat = Vec::new();
    let read = std::fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|file| file.take(4096).read_to_end(&mut stat));
    read.is_ok() && state_of(&stat) == Some(b'T')
}

/// The state field of a /proc/PID/stat line: the first after the command, which may hold ") ".
fn state_of(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&byte| byte == b')')?;
    stat.get(close + 1..)?
        .iter()
        .copied()
        .find(|byte| !byte.is_ascii_whitespace())
}

/// The pids of `root` and every process below it, from /proc.
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<u32>().ok())
            else {
                continue;
            };
            // The parent is the second field after the command, which may hold ") ".
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|field| field.parse::<u32>().ok());
            if let Some(parent) = parent {
                parents.push((pid, parent));
            }
        }
    }
    let mut tree = vec![root];
    let mut index = 0;
    while index < tree.len() {
        let parent = tree[index];
        tree.extend(
            parents
                .iter()
                .filter(|(pid, ppid)| *ppid == parent && !tree.contains(pid))
                .map(|(pid, _)| *pid)
                .collect::<Vec<_>>(),
        );
        index += 1;
    }
    tree
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn the_process_tree_holds_the_root_and_its_children() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let tree = process_tree(std::process::id());
        assert_eq!(tree[0], std::process::id());
        assert!(tree.contains(&child.id()), "{tree:?}");
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn the_state_is_read_after_the_command_and_a_vanished_pid_is_not_stopped() {
        assert_eq!(state_of(b"42 (a) b) T 1 42 42"), Some(b'T'));
        assert_eq!(state_of(b"42 (sleep) S 1"), Some(b'S'));
        assert_eq!(state_of(b"42 (sleep"), None);
        assert!(!is_stopped(std::process::id()));
        assert!(!is_stopped(u32::MAX));
    }
}
