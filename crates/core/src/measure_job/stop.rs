//! The job's processes: its process tree from /proc, and stopping its process group (SIGTERM,
//! a grace, then SIGKILL).

use std::process::{Child, ExitStatus};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// How long a job has to end after SIGTERM before it is killed (a training script may save a
/// checkpoint on SIGTERM; a few seconds is enough to end without one).
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The pids of `root` and every process below it, from /proc.
pub(super) fn process_tree(root: u32) -> Vec<u32> {
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

/// `signal` to the job's process group: its children (a launcher's workers) too. Only the
/// group: the job's own pid may belong to another process once it has been waited for.
pub(super) fn signal_group(group: i32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group), signal);
}

/// Stops the job: SIGTERM to its group, [`STOP_GRACE`] to end (cut short by another Ctrl-C),
/// then SIGKILL; whatever of its group is left is killed once it has ended.
pub(super) fn stop_job(child: &mut Child, stop: &Receiver<()>) -> Option<ExitStatus> {
    let Ok(group) = i32::try_from(child.id()) else {
        let _ = child.kill();
        return child.wait().ok();
    };
    signal_group(group, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline && stop.try_recv().is_err() {
        match child.try_wait() {
            Ok(Some(status)) => {
                // Its children too, if any ignored the SIGTERM.
                signal_group(group, nix::sys::signal::Signal::SIGKILL);
                return Some(status);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break,
        }
    }
    signal_group(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.kill();
    child.wait().ok()
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
}
