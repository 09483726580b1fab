//! A user's job with its whole process tree tracked, so nothing it starts outlives it.
//!
//! The command is started in a process group of its own, under a guard ([`super::guard`]): the spawned child forks the job
//! and stays its parent, as the subreaper of every process below it (PR_SET_CHILD_SUBREAPER:
//! an orphan, one that called setsid() included, is reparented to the guard, not to init).
//! The guard holds one end of a socket pair whose other end only gputune holds; when the job
//! ends, when gputune asks, or when gputune dies (SIGKILL included: the kernel closes its
//! end), the guard SIGKILLs its children until it has none, then ends as the job ended.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus};

use nix::sys::signal::Signal;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use nix::unistd::Pid;

/// A running job under its guard.
pub struct TrackedJob {
    guard: Child,
    job_pid: u32,
    /// gputune's end: shut down to end the tree; closed with gputune, whatever kills it.
    lifeline: UnixStream,
    ended: Option<ExitStatus>,
}

impl TrackedJob {
    /// Starts `command` under a guard. Its other settings (stdio, environment, the user it
    /// runs as) are kept; the guard's closure runs after any already set on it.
    pub fn spawn(mut command: Command) -> std::io::Result<TrackedJob> {
        let (gputune_end, guard_end): (OwnedFd, OwnedFd) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let (guard_fd, gputune_fd) = (guard_end.as_raw_fd(), gputune_end.as_raw_fd());
        // SAFETY: the closure only makes async-signal-safe system calls (guard.rs).
        unsafe {
            command.pre_exec(move || super::guard::fork_job_under_guard(guard_fd, gputune_fd));
        }
        let spawned = command.spawn();
        drop(guard_end);
        let guard = spawned?;
        let mut lifeline = UnixStream::from(gputune_end);
        let mut pid_bytes = [0u8; 4];
        let job_pid = match lifeline.read_exact(&mut pid_bytes) {
            Ok(()) => u32::try_from(i32::from_le_bytes(pid_bytes)).ok(),
            Err(_) => None,
        };
        let mut job = TrackedJob {
            guard,
            job_pid: 0,
            lifeline,
            ended: None,
        };
        match job_pid {
            Some(pid) if pid > 0 => {
                job.job_pid = pid;
                Ok(job)
            }
            _ => {
                let _ = job.end_tree();
                Err(std::io::Error::other(
                    "its guard process ended before naming it",
                ))
            }
        }
    }

    /// The job's own pid (the command gputune was asked to run).
    pub fn pid(&self) -> u32 {
        self.job_pid
    }

    /// The root of every process of the job (the guard): a tree read from /proc from here
    /// holds them all, those that left the job's session included.
    pub fn tree_root(&self) -> u32 {
        self.guard.id()
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.guard.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.guard.stderr.take()
    }

    /// How the job ended, once it has and every process it started has been killed.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.ended.is_none() {
            self.ended = self.guard.try_wait()?;
        }
        Ok(self.ended)
    }

    /// `signal` to the job's process group (what it started there too), not to the guard.
    /// Nothing once it has ended: its pid may belong to another process.
    pub fn signal(&mut self, signal: Signal) {
        if !matches!(self.try_wait(), Ok(None)) {
            return;
        }
        let Ok(pid) = i32::try_from(self.job_pid) else {
            return;
        };
        let _ = nix::sys::signal::killpg(Pid::from_raw(pid), signal);
    }

    /// Kills the job and every process it started, and waits for them.
    pub fn end_tree(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.ended {
            return Ok(status);
        }
        let _ = self.lifeline.shutdown(std::net::Shutdown::Both);
        let status = self.guard.wait()?;
        self.ended = Some(status);
        Ok(status)
    }
}

impl Drop for TrackedJob {
    /// A job gputune lets go of (an error on the way, a panic) does not outlive it either.
    fn drop(&mut self) {
        let _ = self.end_tree();
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use super::*;

    fn is_running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        })
    }

    fn read_pid(path: &Path) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(path)
                && let Ok(pid) = text.trim().parse()
                && text.ends_with('\n')
            {
                return pid;
            }
            assert!(
                Instant::now() < deadline,
                "{} never written",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn shell(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]).stdin(Stdio::null());
        command
    }

    #[test]
    fn a_job_ending_takes_its_setsid_child_with_it_and_its_status_is_the_jobs() {
        let folder = tempfile::tempdir().unwrap();
        let pid_file = folder.path().join("escaped.pid");
        let script = format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 300' >/dev/null 2>&1 & \
             while [ ! -s {} ]; do sleep 0.05; done; exit 7",
            pid_file.display(),
            pid_file.display()
        );
        let mut job = TrackedJob::spawn(shell(&script)).unwrap();
        let escaped = read_pid(&pid_file);
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = job.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the job never ended");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(7));
        assert!(
            !is_running(escaped),
            "the setsid child {escaped} outlived the job"
        );
    }

    #[test]
    fn ending_the_tree_kills_the_job_and_a_signal_reaches_the_job_not_the_guard() {
        let folder = tempfile::tempdir().unwrap();
        let pid_file = folder.path().join("escaped.pid");
        let script = format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 300' >/dev/null 2>&1 & exec sleep 300",
            pid_file.display()
        );
        let mut job = TrackedJob::spawn(shell(&script)).unwrap();
        assert_ne!(job.pid(), job.tree_root());
        let escaped = read_pid(&pid_file);
        job.signal(Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = job.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "SIGTERM never ended the job");
            std::thread::sleep(Duration::from_millis(20));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc_sigterm()), "{status:?}");
        assert!(!is_running(escaped));

        let mut job = TrackedJob::spawn(shell("exec sleep 300")).unwrap();
        let pid = job.pid();
        assert!(is_running(pid));
        let status = job.end_tree().unwrap();
        assert_eq!(status.signal(), Some(9));
        assert!(!is_running(pid));
    }

    #[test]
    fn a_job_whose_guard_is_killed_dies_with_it() {
        let mut job = TrackedJob::spawn(shell("exec sleep 300")).unwrap();
        let pid = job.pid();
        let guard = Pid::from_raw(i32::try_from(job.tree_root()).unwrap());
        nix::sys::signal::kill(guard, Signal::SIGKILL).unwrap();
        let _ = job.end_tree();
        let deadline = Instant::now() + Duration::from_secs(30);
        while is_running(pid) {
            assert!(Instant::now() < deadline, "the job outlived its guard");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_command_that_cannot_start_is_an_error() {
        let command = Command::new("/nonexistent/gputune-job");
        assert!(TrackedJob::spawn(command).is_err());
    }

    fn libc_sigterm() -> i32 {
        Signal::SIGTERM as i32
    }
}
