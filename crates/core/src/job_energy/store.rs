//! The daemon's job records: one JSON file per ended job in `jobs/` of its state folder,
//! written atomically, the newest [`MAX_JOB_RECORDS`] kept. Every file is read through
//! `fsafe`: a symbolic link, a FIFO, a huge or damaged file is skipped with a message.

use std::path::{Path, PathBuf};

use crate::fsafe::{self, FileError};
use gputune_formats::jobs::{JOB_RECORD_FORMAT, JobRecord};

/// The newest records kept; older ones are removed as new ones are written.
pub const MAX_JOB_RECORDS: usize = 1_000;
/// A record is a few kilobytes (eight GPUs); anything larger was not written by gputune.
pub const MAX_JOB_RECORD_BYTES: u64 = 256 * 1024;
/// The folder's name in the daemon's state folder.
pub const JOBS_FOLDER: &str = "jobs";

/// The jobs folder of a daemon.
#[derive(Debug, Clone)]
pub struct JobStore {
    dir: PathBuf,
}

/// Records read, newest first, and what was skipped (one sentence each).
#[derive(Debug, Default)]
pub struct JobsRead {
    pub records: Vec<JobRecord>,
    pub skipped: Vec<String>,
}

impl JobStore {
    pub fn new(dir: PathBuf) -> JobStore {
        JobStore { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `record` (the folder made private first), then removes the oldest past the bound.
    pub fn write(&self, record: &JobRecord) -> Result<PathBuf, FileError> {
        fsafe::ensure_private_folder(&self.dir, 0o700)?;
        let path = self.dir.join(file_name(record));
        let bytes = serde_json::to_vec_pretty(record).map_err(|error| FileError::Write {
            path: path.clone(),
            detail: error.to_string(),
        })?;
        fsafe::write_atomically(&path, &bytes, 0o600)?;
        self.prune(MAX_JOB_RECORDS);
        Ok(path)
    }

    /// Removes the oldest record files past `keep`.
    pub fn prune(&self, keep: usize) {
        let names = self.names();
        let excess = names.len().saturating_sub(keep);
        for name in names.iter().rev().take(excess) {
            let path = self.dir.join(name);
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(
                    "an old job record {} was not removed: {error}",
                    path.display()
                );
            }
        }
    }

    /// The record files' names, newest first (names begin with the end's time).
    fn names(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| is_record_name(name))
            .collect();
        names.sort_unstable_by(|a, b| b.cmp(a));
        names
    }

    /// The newest `limit` records that read, newest first.
    pub fn newest(&self, limit: usize) -> JobsRead {
        let mut read = JobsRead::default();
        for name in self.names() {
            if read.records.len() >= limit {
                break;
            }
            match self.read_one(&name) {
                Ok(record) => read.records.push(record),
                Err(why) => read.skipped.push(why),
            }
        }
        read
    }

    /// The newest record of job `job_id`, or what was skipped looking for it.
    pub fn find(&self, job_id: &str) -> (Option<JobRecord>, Vec<String>) {
        let mut skipped = Vec::new();
        let wanted = format!("-{}-", file_safe(job_id));
        for name in self
            .names()
            .into_iter()
            .filter(|name| name.contains(&wanted))
        {
            match self.read_one(&name) {
                Ok(record) if record.job.job_id == job_id => return (Some(record), skipped),
                Ok(_) => {}
                Err(why) => skipped.push(why),
            }
        }
        (None, skipped)
    }

    fn read_one(&self, name: &str) -> Result<JobRecord, String> {
        let path = self.dir.join(name);
        let bytes = fsafe::read_limited(&path, MAX_JOB_RECORD_BYTES, fsafe::Links::Refuse)
            .map_err(|error| format!("A job record was skipped: {error}"))?;
        let record: JobRecord = serde_json::from_slice(&bytes).map_err(|error| {
            format!(
                "A job record was skipped: {} could not be read ({error}).",
                path.display()
            )
        })?;
        if record.format_version != JOB_RECORD_FORMAT {
            return Err(format!(
                "A job record was skipped: {} is of format {}, this gputune reads format {JOB_RECORD_FORMAT}.",
                path.display(),
                record.format_version
            ));
        }
        Ok(record)
    }
}

/// "job-<end ms, 15 digits>-<job id>-<session>.json": sorted by name is sorted by end.
fn file_name(record: &JobRecord) -> String {
    format!(
        "job-{:015}-{}-{}.json",
        record.ended_at_ms,
        file_safe(&record.job.job_id),
        record.session
    )
}

fn is_record_name(name: &str) -> bool {
    name.starts_with("job-") && name.ends_with(".json")
}

/// A job id as a file name's part: letters, digits, `_` and `.` kept (Slurm's "4242_7"),
/// anything else `+`, at most 64 characters.
fn file_safe(job_id: &str) -> String {
    job_id
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '+'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::tuning::JobInfo;

    fn record(job_id: &str, ended_at_ms: u64) -> JobRecord {
        JobRecord {
            format_version: JOB_RECORD_FORMAT,
            job: JobInfo {
                scheduler: "slurm".to_string(),
                job_id: job_id.to_string(),
                step: "0".to_string(),
                user: "alice".to_string(),
                uid: 1000,
            },
            node: "node1".to_string(),
            session: 3,
            started_at_ms: ended_at_ms - 60_000,
            ended_at_ms,
            ended: "Put back".to_string(),
            gpus: Vec::new(),
            energy_j: 0.0,
            energy_kwh: 0.0,
            energy_estimated: false,
            cost: None,
        }
    }

    #[test]
    fn the_newest_thousand_records_are_kept_and_the_oldest_removed() {
        let folder = tempfile::tempdir().unwrap();
        let store = JobStore::new(folder.path().join("jobs"));
        store.write(&record("first", 1_000_000)).unwrap();
        // Records of earlier jobs, placed as the daemon would have left them.
        let bytes = std::fs::read(
            store
                .names()
                .iter()
                .map(|name| store.dir.join(name))
                .next()
                .unwrap(),
        )
        .unwrap();
        for n in 0..MAX_JOB_RECORDS as u64 + 2 {
            let old = record(&format!("old{n}"), 2_000_000 + n);
            std::fs::write(store.dir.join(file_name(&old)), &bytes).unwrap();
        }
        store.write(&record("newest", 9_000_000)).unwrap();
        let names = store.names();
        assert_eq!(names.len(), MAX_JOB_RECORDS);
        assert!(names[0].contains("-newest-"), "{}", names[0]);
        // 1,004 written: the first record and the three oldest placed ones went.
        assert!(!names.iter().any(|name| name.contains("-first-")));
        assert!(!names.iter().any(|name| {
            ["-old0-", "-old1-", "-old2-"]
                .iter()
                .any(|old| name.contains(old))
        }));
        assert!(names.iter().any(|name| name.contains("-old3-")));
        let newest = store.newest(2);
        assert_eq!(newest.records.len(), 2);
        assert_eq!(newest.records[0].job.job_id, "newest");
        assert_eq!(
            store.find("newest").0.map(|r| r.ended_at_ms),
            Some(9_000_000)
        );
        assert_eq!(store.find("nobody").0, None);
    }
}
