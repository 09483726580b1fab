//! One GPU's setting changes, as JSON lines appended to a file: when, what, who. The newest
//! [`CHANGES_KEPT`] are held in memory; the file is rewritten down to them when it grows past
//! [`MAX_FILE_BYTES`]. A damaged line is skipped, never the file.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::fsafe::{self, FileError, Links};
use gputune_formats::tuning::ChangeNote;

/// Changes kept per GPU (the window marks as many).
pub const CHANGES_KEPT: usize = 500;
/// The file is rewritten to the kept changes past this size.
const MAX_FILE_BYTES: u64 = 256 * 1024;
/// The most of the file read when the daemon starts (its end: the newest changes).
const MAX_READ_BYTES: u64 = 1024 * 1024;
/// Longer texts are cut (a client's label is at most 200 characters already).
const MAX_TEXT_CHARS: usize = 400;

pub struct ChangeLog {
    path: PathBuf,
    notes: VecDeque<ChangeNote>,
    file_bytes: u64,
}

impl ChangeLog {
    /// Reads the newest changes back from `path` (none when it is missing). A file that cannot
    /// be used is reported and left alone; changes are then kept in memory only.
    pub fn open(path: &Path) -> (ChangeLog, Option<String>) {
        let mut log = ChangeLog {
            path: path.to_path_buf(),
            notes: VecDeque::new(),
            file_bytes: 0,
        };
        let notice = match read_tail(path) {
            Ok((text, file_bytes)) => {
                log.file_bytes = file_bytes;
                let mut damaged = 0;
                for line in text.lines().filter(|line| !line.trim().is_empty()) {
                    match serde_json::from_str::<ChangeNote>(line) {
                        Ok(note) => log.keep(note),
                        Err(_) => damaged += 1,
                    }
                }
                (damaged > 0).then(|| {
                    format!(
                        "{}: {damaged} damaged line(s) were skipped.",
                        path.display()
                    )
                })
            }
            Err(error) if error.is_not_found() => None,
            Err(error) => Some(format!(
                "{error} Setting changes are kept in memory only until it is removed."
            )),
        };
        (log, notice)
    }

    /// The newest change kept.
    pub fn last(&self) -> Option<&ChangeNote> {
        self.notes.back()
    }

    /// The changes with `from_ms <= at_ms <= to_ms`, oldest first.
    /// When the first change kept from `from_ms` to `to_ms` was made.
    pub fn first_between(&self, from_ms: u64, to_ms: u64) -> Option<u64> {
        self.notes
            .iter()
            .map(|note| note.at_ms)
            .filter(|at_ms| (from_ms..=to_ms).contains(at_ms))
            .min()
    }

    pub fn between(&self, from_ms: u64, to_ms: u64) -> Vec<ChangeNote> {
        self.notes
            .iter()
            .filter(|note| (from_ms..=to_ms).contains(&note.at_ms))
            .cloned()
            .collect()
    }

    /// Keeps `note` and appends it to the file, unless it is the last change kept (the engine
    /// says a card's last change again with every news about the card). It is compared as it
    /// is stored: made printable and cut.
    pub fn append_if_new(&mut self, note: &ChangeNote) -> Result<(), FileError> {
        let note = ChangeNote {
            at_ms: note.at_ms,
            by: cut(&note.by),
            what: cut(&note.what),
        };
        if self.notes.back() == Some(&note) {
            return Ok(());
        }
        self.keep(note.clone());
        if self.file_bytes > MAX_FILE_BYTES {
            return self.rewrite();
        }
        let mut line = serde_json::to_string(&note).map_err(|error| self.write_error(error))?;
        line.push('\n');
        let mut file = fsafe::open_for_update(&self.path, 0o600, true)?;
        file.write_all(line.as_bytes())
            .map_err(|error| self.write_error(error))?;
        self.file_bytes += line.len() as u64;
        Ok(())
    }

    fn keep(&mut self, note: ChangeNote) {
        if self.notes.len() >= CHANGES_KEPT {
            self.notes.pop_front();
        }
        self.notes.push_back(note);
    }

    /// Replaces the file with the kept changes (atomically: a crash leaves the old or the new).
    fn rewrite(&mut self) -> Result<(), FileError> {
        let mut text = String::new();
        for note in &self.notes {
            let line = serde_json::to_string(note).map_err(|error| self.write_error(error))?;
            text.push_str(&line);
            text.push('\n');
        }
        fsafe::write_atomically(&self.path, text.as_bytes(), 0o600)?;
        self.file_bytes = text.len() as u64;
        Ok(())
    }

    fn write_error(&self, error: impl std::fmt::Display) -> FileError {
        FileError::Write {
            path: self.path.clone(),
            detail: error.to_string(),
        }
    }
}

/// The last [`MAX_READ_BYTES`] of the file (from its first whole line) and the file's size.
fn read_tail(path: &Path) -> Result<(String, u64), FileError> {
    let mut file = fsafe::open_regular(path, Links::Refuse)?;
    let read_error = |error: std::io::Error| FileError::Read {
        path: path.to_path_buf(),
        detail: error.to_string(),
    };
    let size = file.metadata().map_err(read_error)?.len();
    let start = size.saturating_sub(MAX_READ_BYTES);
    file.seek(SeekFrom::Start(start)).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if start > 0 {
        // Starting mid-line: drop the partial first line.
        let first_line_end = bytes
            .iter()
            .position(|byte| *byte == b'\n')
            .map_or(bytes.len(), |at| at + 1);
        bytes.drain(..first_line_end);
    }
    Ok((String::from_utf8_lossy(&bytes).into_owned(), size))
}

fn cut(text: &str) -> String {
    crate::text::printable(text)
        .chars()
        .take(MAX_TEXT_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(at_ms: u64) -> ChangeNote {
        ChangeNote {
            at_ms,
            by: "another program".to_string(),
            what: format!("the power limit changed ({at_ms})"),
        }
    }

    #[test]
    fn changes_survive_a_reopen_and_damaged_lines_are_skipped() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("GPU-1.changes");
        let (mut log, notice) = ChangeLog::open(&path);
        assert_eq!(notice, None);
        log.append_if_new(&note(1_000)).unwrap();
        log.append_if_new(&note(2_000)).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"{\"at_ms\": not json\n").unwrap();
        drop(file);
        let (mut log, notice) = ChangeLog::open(&path);
        assert!(notice.unwrap().contains("1 damaged line"));
        assert_eq!(log.between(0, 1_500), vec![note(1_000)]);
        assert_eq!(log.last(), Some(&note(2_000)));
        log.append_if_new(&note(3_000)).unwrap();
        assert_eq!(ChangeLog::open(&path).0.between(0, u64::MAX).len(), 3);
    }

    #[test]
    fn a_change_said_again_is_kept_once_even_when_its_text_was_cleaned() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("GPU-1.changes");
        let (mut log, _) = ChangeLog::open(&path);
        let raw = ChangeNote {
            at_ms: 5,
            by: "a client\u{7}".to_string(),
            what: "x".repeat(1_000),
        };
        log.append_if_new(&raw).unwrap();
        log.append_if_new(&raw).unwrap();
        assert_eq!(log.between(0, u64::MAX).len(), 1);
        assert_eq!(ChangeLog::open(&path).0.between(0, u64::MAX).len(), 1);
    }

    #[test]
    fn the_file_stays_bounded_and_keeps_the_newest() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("GPU-1.changes");
        let (mut log, _) = ChangeLog::open(&path);
        for at_ms in 0..3_000u64 {
            log.append_if_new(&note(at_ms)).unwrap();
        }
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= MAX_FILE_BYTES + 1024, "{size}");
        let (log, _) = ChangeLog::open(&path);
        let kept = log.between(0, u64::MAX);
        assert_eq!(kept.len(), CHANGES_KEPT);
        assert_eq!(kept.last(), Some(&note(2_999)));
    }

    #[test]
    fn a_huge_file_is_read_only_at_its_end() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("GPU-1.changes");
        let mut text = String::new();
        for at_ms in 0..60_000u64 {
            text.push_str(&serde_json::to_string(&note(at_ms)).unwrap());
            text.push('\n');
        }
        assert!(text.len() as u64 > 4 * MAX_READ_BYTES);
        std::fs::write(&path, text).unwrap();
        let (log, notice) = ChangeLog::open(&path);
        assert_eq!(notice, None, "the cut first line is dropped, not reported");
        assert_eq!(log.last(), Some(&note(59_999)));
        assert_eq!(log.between(0, u64::MAX).len(), CHANGES_KEPT);
    }
}
