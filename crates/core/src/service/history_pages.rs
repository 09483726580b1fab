//! Reading a GPU's history from the daemon a page at a time: the window's link (between its
//! other work) and `gputune history` both walk the pages this way.

use super::client::{ClientError, TuningClient};
use gputune_formats::history::HistoryPage;
use gputune_formats::protocol::{Request, Response};

/// The pages of one GPU's history from `from_ms` to `until_ms`, still to read.
#[derive(Debug, Clone)]
pub struct HistoryPages {
    gpu_uuid: String,
    next_from_ms: Option<u64>,
    until_ms: u64,
}

impl HistoryPages {
    pub fn new(gpu_uuid: &str, from_ms: u64, until_ms: u64) -> HistoryPages {
        HistoryPages {
            gpu_uuid: gpu_uuid.to_string(),
            next_from_ms: Some(from_ms),
            until_ms,
        }
    }

    /// The next page; `None` once the last was read. A refusal is `ClientError::Refused`.
    pub fn next(&mut self, client: &mut TuningClient) -> Result<Option<HistoryPage>, ClientError> {
        let Some(from_ms) = self.next_from_ms else {
            return Ok(None);
        };
        let page = match client.request(Request::History {
            gpu_uuid: self.gpu_uuid.clone(),
            from_ms,
            to_ms: self.until_ms,
        })? {
            Response::History(page) => *page,
            other => {
                return Err(ClientError::Unreadable(format!(
                    "the daemon answered a history request with {other:?}"
                )));
            }
        };
        // A next page always starts later: a daemon that says otherwise is not followed.
        self.next_from_ms = page.next_from_ms.filter(|next| *next > from_ms);
        Ok(Some(page))
    }
}
