//! The user's command as gputune starts it: the words, the user it runs as, where its input
//! and output go.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::{Command, Stdio};

use super::as_user::{InvokingUser, run_as};

/// Where the job's output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutput {
    /// gputune's own stdout and stderr (`gputune run`).
    Inherited,
    /// Pipes gputune reads for progress and passes on ([`super::Job::read_output`]).
    Piped,
}

/// The user's command, checked and ready to start.
#[derive(Debug, Clone)]
pub struct JobCommand {
    /// The program, then its arguments.
    pub words: Vec<OsString>,
    /// The user it runs as (the one who ran sudo), `None` for gputune's own.
    pub run_as: Option<InvokingUser>,
    pub output: JobOutput,
    /// Whether it reads gputune's stdin. Never a terminal: the job runs in a process group of
    /// its own, which the terminal would stop (SIGTTIN) at its first read instead of answering.
    pub reads_stdin: bool,
}

impl JobCommand {
    /// The program as a message shows it.
    pub(super) fn program_name(&self) -> String {
        self.words.first().map_or_else(
            || "the command".to_string(),
            |program| crate::text::printable(&program.to_string_lossy()),
        )
    }

    /// The process to spawn (`tree` puts it under the guard, which gives it its own process
    /// group: `guard.rs`).
    pub(super) fn build(&self) -> Result<Command, String> {
        let Some((program, arguments)) = self.words.split_first() else {
            return Err("There is no command to run.".to_string());
        };
        let mut command = Command::new(program);
        command.args(arguments);
        let stdin_is_terminal = std::io::stdin().is_terminal();
        command.stdin(if self.reads_stdin && !stdin_is_terminal {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
        match self.output {
            JobOutput::Inherited => {
                command.stdout(Stdio::inherit()).stderr(Stdio::inherit());
            }
            JobOutput::Piped => {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
                // Python buffers a pipe by the block: its log lines would arrive minutes late.
                if std::env::var_os("PYTHONUNBUFFERED").is_none() {
                    command.env("PYTHONUNBUFFERED", "1");
                }
            }
        }
        if let Some(user) = &self.run_as {
            run_as(&mut command, user);
        }
        Ok(command)
    }
}
