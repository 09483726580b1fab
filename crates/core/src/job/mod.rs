//! The user's job: the one place that starts, watches and stops the user's own command, for
//! `gputune run`, `gputune sweep`, `gputune plan --measure` and the Plan tab's "Measure my
//! job". The front ends keep what is theirs (the profile session, the sweep's steps, the
//! micro-batch runs and their fit); everything about the process is here:
//!
//! - starting it ([`JobCommand`]): as the user who ran sudo ([`as_user`]), in a process group
//!   of its own, under a guard that ends every process it starts (`tree`, `guard`);
//! - its output ([`Job::read_output`], [`feed`]): passed on, and read for progress by the one
//!   parser (`job::progress`, with the user's `--progress-regex` where the known formats do
//!   not match); or its log file followed like `tail -F` (a job already running);
//! - its processes ([`Job::pids`]: the tree, as NVML's process list shows them);
//! - stopping it, one policy ([`Job::stop`]): SIGTERM to its group (then SIGCONT, so a stopped
//!   job gets it), [`STOP_GRACE`] to end, then SIGKILL to its whole tree; a second stop kills
//!   at once. A job whose process stays stopped (the terminal's SIGTTIN/SIGTTOU: it is not the
//!   terminal's foreground group) is stopped by that policy, and said once ([`Job::take_notice`]);
//! - how it ended, in one sentence ([`ended_sentence`]) and one exit code ([`exit_code_of`]).
//!
//! The rule: nothing outside this room spawns, signals or waits on the user's command.
//! (`job_energy` is another thing: the daemon's energy and cost per scheduler job.)

pub mod as_user;
mod clock;
mod exit;
pub mod feed;
mod guard;
mod output;
pub mod progress;
mod spawn;
mod stop;
mod tree;

use std::io::Write;
use std::process::ExitStatus;
use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use clock::JobClock;
pub use exit::{EXIT_NOT_STARTED, describe_status, ended_sentence, exit_code_of};
pub use output::JobStreams;
pub use spawn::{JobCommand, JobOutput};
pub use stop::{STOP_GRACE, Stopping, process_tree};

use feed::FeedMessage;
use tree::TrackedJob;

use crate::job::progress::ProgressParser;

/// The user's command, running in its own process group under its guard.
pub struct Job {
    tracked: TrackedJob,
    /// Set by the first [`Job::stop`]: when what is left of the job is killed.
    kill_at: Option<Instant>,
    /// Since when the job's process has been seen stopped.
    stopped_since: Option<Instant>,
    /// What the front end says once ([`Job::take_notice`]).
    notice: Option<&'static str>,
}

impl Job {
    /// Starts `command`; the error is the one sentence that says why it could not start.
    pub fn start(command: &JobCommand) -> Result<Job, String> {
        let program = command.program_name();
        match TrackedJob::spawn(command.build()?) {
            Ok(tracked) => Ok(Job {
                tracked,
                kill_at: None,
                stopped_since: None,
                notice: None,
            }),
            Err(error) => Err(start_failure(&program, &error)),
        }
    }

    /// The command's own pid (the one the service marks as the session's job).
    pub fn pid(&self) -> u32 {
        self.tracked.pid()
    }

    /// Every process of the job now (its guard's tree, those that left its session included),
    /// to find among a GPU's processes.
    pub fn pids(&self) -> Vec<u32> {
        process_tree(self.tracked.tree_root())
    }

    /// Reads its output (started with [`JobOutput::Piped`]) on threads of their own until it
    /// ends: every byte passed on to `streams`, the progress a parser from `parser` finds sent
    /// on `sender` (`parser` gives `None`: passed on only). The reading threads, and what could
    /// not be read, in words.
    pub fn read_output(
        &mut self,
        streams: JobStreams,
        parser: &dyn Fn() -> Option<ProgressParser>,
        clock: JobClock,
        sender: &Sender<FeedMessage>,
    ) -> (Vec<JoinHandle<()>>, Vec<String>) {
        let pipes = (self.tracked.take_stdout(), self.tracked.take_stderr());
        output::read_pipes(pipes, streams, parser, clock, sender)
    }

    /// Whether a stop was asked for.
    pub fn is_stopping(&self) -> bool {
        self.kill_at.is_some()
    }

    /// Asks the job to end: the first time SIGTERM to its whole group (a training script may
    /// save a checkpoint), then SIGCONT, as a shell does, so a stopped job gets it; the second
    /// time SIGKILL to its whole tree at once. What is left after [`STOP_GRACE`] is killed by
    /// [`Job::poll`].
    pub fn stop(&mut self) -> Stopping {
        if self.kill_at.is_some() {
            let _ = self.tracked.end_tree();
            return Stopping::Killed;
        }
        self.tracked.signal(nix::sys::signal::Signal::SIGTERM);
        self.tracked.signal(nix::sys::signal::Signal::SIGCONT);
        self.kill_at = Some(Instant::now() + STOP_GRACE);
        Stopping::Terminating
    }

    /// How the job ended, once it has and nothing it started is left; kills it when a stop's
    /// grace is over. A job whose process stays stopped for [`stop::STOPPED_FOR`] is stopped
    /// by the policy, and [`Job::take_notice`] then says so.
    pub fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if let Some(status) = self.tracked.try_wait()? {
            return Ok(Some(status));
        }
        if self.kill_at.is_some_and(|at| Instant::now() >= at) {
            return self.tracked.end_tree().map(Some);
        }
        self.stop_if_stopped();
        Ok(None)
    }

    /// The sentence a front end says once, when the job did something it cannot be left to
    /// (its process stayed stopped) and is being stopped for it.
    pub fn take_notice(&mut self) -> Option<&'static str> {
        self.notice.take()
    }

    /// Stops the job by the policy when its process has been stopped (the terminal's SIGTTIN or
    /// SIGTTOU, a SIGSTOP) for [`stop::STOPPED_FOR`]: nothing else would end it, and gputune
    /// would wait forever with the card at the profile.
    fn stop_if_stopped(&mut self) {
        if self.is_stopping() {
            return;
        }
        if !stop::is_stopped(self.tracked.pid()) {
            self.stopped_since = None;
            return;
        }
        let since = *self.stopped_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= stop::STOPPED_FOR {
            self.notice = Some(stop::STOPPED_SENTENCE);
            self.stop();
        }
    }

    /// [`Job::poll`] for a terminal's front end: a job that cannot be waited on is said so on
    /// `messages` and killed (its status then is the kill's); its notice ([`Job::take_notice`])
    /// is said there too.
    pub fn poll_or_end(&mut self, messages: &mut dyn Write) -> anyhow::Result<Option<ExitStatus>> {
        let polled = self.poll();
        if let Some(notice) = self.take_notice() {
            let _ = writeln!(messages, "gputune: {notice}");
        }
        match polled {
            Ok(status) => Ok(status),
            Err(error) => {
                let _ = writeln!(
                    messages,
                    "gputune: the command cannot be waited on ({error})."
                );
                Ok(Some(self.tracked.end_tree()?))
            }
        }
    }

    /// Stops the job and waits for it: SIGTERM to its group, then SIGKILL after the grace or
    /// at once when `more_stops` gets another stop (a second Ctrl-C, the window closing).
    pub fn stop_and_wait(&mut self, more_stops: &Receiver<()>) -> Option<ExitStatus> {
        if !self.is_stopping() {
            self.stop();
        }
        loop {
            match self.poll() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if more_stops.try_recv().is_ok() => {
                    return self.tracked.end_tree().ok();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => return self.tracked.end_tree().ok(),
            }
        }
    }

    /// Kills the job and everything it started at once, and waits for them.
    pub fn kill(&mut self) -> std::io::Result<ExitStatus> {
        self.tracked.end_tree()
    }
}

/// Why `program` could not be started, in one sentence: its path and mode are worth checking
/// only when the exec failed on them (not when the step before it, the guard's fork or taking
/// the invoking user's ids, did).
fn start_failure(program: &str, error: &std::io::Error) -> String {
    let hint = match error.raw_os_error() {
        Some(nix::libc::ENOENT | nix::libc::EACCES) => {
            ": check its path and that it is executable."
        }
        _ => ".",
    };
    format!("{program} could not be started ({error}){hint}")
}

#[cfg(test)]
mod tests;
