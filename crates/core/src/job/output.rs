//! The job's output: read from its pipes on threads of their own, passed on at once (to the
//! terminal, or nowhere in the window) and read for progress by the one parser.

use std::io::{Read, Write};
use std::process::{ChildStderr, ChildStdout};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use crate::job::JobClock;
use crate::job::feed::{FeedMessage, read_stream};
use crate::job::progress::ProgressParser;

/// Where each of the job's streams is passed on.
pub struct JobStreams {
    pub stdout: Box<dyn Write + Send>,
    pub stderr: Box<dyn Write + Send>,
}

/// One of the job's pipes: its reading thread's name, the pipe, where it is passed on.
type Pipe = (
    &'static str,
    Option<Box<dyn Read + Send>>,
    Box<dyn Write + Send>,
);

/// [`super::Job::read_output`]'s work on the job's two pipes.
pub(super) fn read_pipes(
    (stdout, stderr): (Option<ChildStdout>, Option<ChildStderr>),
    streams: JobStreams,
    parser: &dyn Fn() -> Option<ProgressParser>,
    clock: JobClock,
    sender: &Sender<FeedMessage>,
) -> (Vec<JoinHandle<()>>, Vec<String>) {
    let pipes: [Pipe; 2] = [
        (
            "job-stdout",
            stdout.map(|stream| Box::new(stream) as Box<dyn Read + Send>),
            streams.stdout,
        ),
        (
            "job-stderr",
            stderr.map(|stream| Box::new(stream) as Box<dyn Read + Send>),
            streams.stderr,
        ),
    ];
    let mut readers = Vec::new();
    let mut problems = Vec::new();
    for (name, pipe, echo) in pipes {
        let Some(pipe) = pipe else { continue };
        match read_stream(name, pipe, echo, parser(), clock, sender.clone()) {
            Ok(reader) => readers.push(reader),
            Err(error) => problems.push(format!("the job's output cannot be read ({error}).")),
        }
    }
    (readers, problems)
}
