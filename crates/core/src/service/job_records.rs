//! The daemon's job records on the service's side: the records of jobs that ended are filed as
//! the engine hands them over, and `jobs` / `job` requests are answered from the folder. An
//! engine in a process of its own keeps none and says where they are kept.

use crate::job_energy::store::{JobStore, MAX_JOB_RECORDS};
use gputune_formats::jobs::JobRecord;
use gputune_formats::protocol::{MAX_MESSAGE_BYTES, Response};
use gputune_formats::tuning::{TuneError, TuneErrorKind};

/// Room left in a message for everything but the records.
const MESSAGE_MARGIN_BYTES: usize = 16 * 1024;

const KEPT_BY_THE_DAEMON: &str = "Job records are kept by the gputune daemon, and no daemon answers here: install it on the node (`sudo gputune daemon install`) and ask it.";

/// Files the records of jobs that ended (nothing without a folder: an engine in-process).
pub(crate) fn file(store: Option<&JobStore>, records: Vec<JobRecord>) {
    let Some(store) = store else {
        return;
    };
    for record in records {
        match store.write(&record) {
            Ok(path) => tracing::info!(
                "job {} ended ({}); its record is {}",
                record.job.job_id,
                record.ended,
                path.display()
            ),
            Err(error) => tracing::error!(
                "the record of job {} could not be kept: {error}",
                record.job.job_id
            ),
        }
    }
}

/// The newest `limit` records, as many as fit in one message.
pub(crate) fn list(store: Option<&JobStore>, limit: u32) -> Response {
    let Some(store) = store else {
        return refused(KEPT_BY_THE_DAEMON);
    };
    let limit = (limit as usize).min(MAX_JOB_RECORDS);
    let mut read = store.newest(limit);
    let budget = MAX_MESSAGE_BYTES - MESSAGE_MARGIN_BYTES;
    let mut used = read.skipped.iter().map(String::len).sum::<usize>();
    let mut fits = 0;
    for record in &read.records {
        used += serde_json::to_vec(record).map_or(budget, |bytes| bytes.len() + 1);
        if used > budget {
            break;
        }
        fits += 1;
    }
    if fits < read.records.len() {
        read.skipped.push(format!(
            "Only the newest {fits} records fit in one answer; `gputune jobs show ID` shows any one."
        ));
        read.records.truncate(fits);
    }
    Response::Jobs {
        records: read.records,
        skipped: read.skipped,
    }
}

/// The newest record of job `job_id`.
pub(crate) fn show(store: Option<&JobStore>, job_id: &str) -> Response {
    let Some(store) = store else {
        return refused(KEPT_BY_THE_DAEMON);
    };
    let (record, skipped) = store.find(job_id);
    match record {
        Some(record) => Response::Job {
            record: Box::new(record),
        },
        None => {
            let mut message = format!(
                "No job {} is recorded on this node (`gputune jobs` lists the newest).",
                crate::text::printable(job_id)
            );
            for why in skipped {
                message.push(' ');
                message.push_str(&why);
            }
            Response::Error {
                error: TuneError::new(TuneErrorKind::NotFound, message),
            }
        }
    }
}

fn refused(message: &str) -> Response {
    Response::Error {
        error: TuneError::new(TuneErrorKind::NotFound, message),
    }
}
