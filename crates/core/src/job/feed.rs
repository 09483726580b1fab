//! Where the job's progress comes from: its own output (read from a pipe and passed on to the
//! terminal unchanged) or a log file followed like `tail -F` (a job already running in tmux).
//! Each source runs on its own thread and sends parsed readings to whoever measures the job
//! (the sweep, `plan --measure`).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::job::JobClock;
use crate::job::progress::{ProgressParser, ProgressReading};

/// How often a followed file is looked at for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);
/// Bytes read at once.
const CHUNK_BYTES: usize = 16 * 1024;

/// What a source sends.
#[derive(Debug, Clone, PartialEq)]
pub enum FeedMessage {
    Reading(ProgressReading),
    /// Something the user should know (a file that is not there yet, a read error).
    Note(String),
}

/// Passes the job's output on and remembers whether it left a line open (a tqdm bar drawn
/// with `\r` and no newline), so gputune's own messages start on a line of their own.
pub struct Echo {
    inner: Box<dyn Write + Send>,
    line_open: Arc<AtomicBool>,
}

impl Echo {
    pub fn new(inner: Box<dyn Write + Send>, line_open: Arc<AtomicBool>) -> Echo {
        Echo { inner, line_open }
    }
}

impl Write for Echo {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(bytes)?;
        if let Some(last) = bytes[..written].last() {
            self.line_open.store(*last != b'\n', Ordering::SeqCst);
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Reads `stream` (a pipe from the job) until it ends, writing every byte to `echo` at once
/// and sending the progress `parser` finds in it.
pub fn read_stream(
    name: &str,
    mut stream: impl Read + Send + 'static,
    mut echo: Box<dyn Write + Send>,
    mut parser: Option<ProgressParser>,
    clock: JobClock,
    sender: Sender<FeedMessage>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("gputune-{name}"))
        .spawn(move || {
            let mut buffer = vec![0u8; CHUNK_BYTES];
            let mut echo_broken = false;
            loop {
                let read = match stream.read(&mut buffer) {
                    Ok(0) => return,
                    Ok(read) => read,
                    Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(error) => {
                        let _ = sender.send(FeedMessage::Note(format!(
                            "The job's output could not be read any more ({error})."
                        )));
                        return;
                    }
                };
                let bytes = &buffer[..read];
                // The terminal going away must not stop the reading, or the job blocks on a
                // full pipe.
                if !echo_broken && echo.write_all(bytes).and_then(|()| echo.flush()).is_err() {
                    echo_broken = true;
                }
                let Some(parser) = parser.as_mut() else {
                    continue;
                };
                for reading in parser.feed(bytes, clock.now_ms()) {
                    // The sweep may be over while the job goes on: keep passing its output.
                    let _ = sender.send(FeedMessage::Reading(reading));
                }
            }
        })
}

/// Follows `path` like `tail -F` until `stop` is set: new lines only (what is already in the
/// file is history), a file that appears later read from its start, a truncated file read
/// again from its start, a rotated one (a new file under the name) followed.
pub fn follow_file(
    path: PathBuf,
    mut parser: ProgressParser,
    clock: JobClock,
    sender: Sender<FeedMessage>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("gputune-follow".to_string())
        .spawn(move || {
            let mut follower = Follower::new(path);
            let mut buffer = vec![0u8; CHUNK_BYTES];
            while !stop.load(Ordering::SeqCst) {
                let (bytes, note) = follower.read_new(&mut buffer);
                if let Some(note) = note
                    && sender.send(FeedMessage::Note(note)).is_err()
                {
                    return;
                }
                if bytes == 0 {
                    std::thread::sleep(FOLLOW_INTERVAL);
                    continue;
                }
                for reading in parser.feed(&buffer[..bytes], clock.now_ms()) {
                    if sender.send(FeedMessage::Reading(reading)).is_err() {
                        return;
                    }
                }
            }
        })
}

/// The state of a followed file.
struct Follower {
    path: PathBuf,
    file: Option<File>,
    /// Device and inode of the open file, to notice a rotation.
    identity: Option<(u64, u64)>,
    position: u64,
    /// True until the first open: a file there from the start is read from its end.
    first_open: bool,
    said_missing: bool,
}

impl Follower {
    fn new(path: PathBuf) -> Follower {
        Follower {
            path,
            file: None,
            identity: None,
            position: 0,
            first_open: true,
            said_missing: false,
        }
    }

    /// Reads what was added since the last call into `buffer`; the byte count, and a note.
    fn read_new(&mut self, buffer: &mut [u8]) -> (usize, Option<String>) {
        let mut note = None;
        if self.file.is_none() {
            match open_regular(&self.path) {
                Ok((file, identity, length)) => {
                    self.position = if self.first_open { length } else { 0 };
                    self.file = Some(file);
                    self.identity = Some(identity);
                    if self.said_missing || !self.first_open {
                        note = Some(format!("Following {}.", self.path.display()));
                    }
                    self.first_open = false;
                }
                Err(error) => {
                    self.first_open = false;
                    if !self.said_missing {
                        self.said_missing = true;
                        return (
                            0,
                            Some(format!("Waiting for {} ({error}).", self.path.display())),
                        );
                    }
                    return (0, None);
                }
            }
        }
        let Some(file) = self.file.as_mut() else {
            return (0, note);
        };
        if file.seek(SeekFrom::Start(self.position)).is_err() {
            self.file = None;
            return (0, note);
        }
        match file.read(buffer) {
            Ok(0) => {
                // Nothing new: was the file truncated, or replaced by a new one?
                let replaced = match std::fs::metadata(&self.path) {
                    Ok(metadata) => Some((metadata.dev(), metadata.ino())) != self.identity,
                    Err(_) => false,
                };
                let truncated = file
                    .metadata()
                    .is_ok_and(|metadata| metadata.len() < self.position);
                if truncated {
                    self.position = 0;
                } else if replaced {
                    self.file = None;
                    self.identity = None;
                }
                (0, note)
            }
            Ok(read) => {
                self.position += read as u64;
                (read, note)
            }
            Err(error) => {
                self.file = None;
                (
                    0,
                    Some(format!(
                        "{} could not be read ({error}).",
                        self.path.display()
                    )),
                )
            }
        }
    }
}

/// Opens `path` for reading only if it is a regular file (a FIFO would block the follower,
/// a device would never end), without following it when it names a FIFO.
fn open_regular(path: &Path) -> std::io::Result<(File, (u64, u64), u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok((file, (metadata.dev(), metadata.ino()), metadata.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(follower: &mut Follower) -> String {
        let mut buffer = vec![0u8; CHUNK_BYTES];
        let mut text = String::new();
        loop {
            let (read, _) = follower.read_new(&mut buffer);
            if read == 0 {
                return text;
            }
            text.push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    }

    #[test]
    fn a_followed_file_gives_new_lines_through_truncation_and_rotation() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("train.log");
        std::fs::write(&path, "old line\n").unwrap();
        let mut follower = Follower::new(path.clone());
        assert_eq!(read_all(&mut follower), "", "history is skipped");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"step 1\n").unwrap();
        assert_eq!(read_all(&mut follower), "step 1\n");
        // Truncated (a job started again with `> train.log`).
        std::fs::write(&path, "").unwrap();
        assert_eq!(read_all(&mut follower), "");
        std::fs::write(&path, "step 1 again\n").unwrap();
        assert_eq!(read_all(&mut follower), "step 1 again\n");
        // Rotated: the old file moves away, a new one takes its name.
        std::fs::rename(&path, folder.path().join("train.log.1")).unwrap();
        std::fs::write(&path, "new file\n").unwrap();
        assert_eq!(read_all(&mut follower), "");
        assert_eq!(read_all(&mut follower), "new file\n");
    }

    #[test]
    fn a_missing_file_is_waited_for_and_a_fifo_is_refused() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("later.log");
        let mut follower = Follower::new(path.clone());
        let mut buffer = vec![0u8; 64];
        let (read, note) = follower.read_new(&mut buffer);
        assert_eq!(read, 0);
        assert!(note.unwrap().contains("Waiting for"));
        // A file that appears later is read from its start.
        std::fs::write(&path, "first\n").unwrap();
        assert_eq!(read_all(&mut follower), "first\n");

        let fifo = folder.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut follower = Follower::new(fifo);
        let (read, note) = follower.read_new(&mut buffer);
        assert_eq!(read, 0);
        assert!(note.unwrap().contains("not a regular file"));
    }
}
