//! The job's processes: its process tree from /proc, and stopping it (SIGTERM to its process
//! group, a grace, then SIGKILL to its whole tree).

use std::process::ExitStatus;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use super::tree::TrackedJob;

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

/// Stops the job: SIGTERM to its group, [`STOP_GRACE`] to end (cut short by another Ctrl-C),
/// then SIGKILL to every process it started; once it has ended, its guard has killed what
/// was left of them.
pub(super) fn stop_job(job: &mut TrackedJob, stop: &Receiver<()>) -> Option<ExitStatus> {
    job.signal(nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline && stop.try_recv().is_err() {
        match job.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break,
        }
    }
    job.end_tree().ok()
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
