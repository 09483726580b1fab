//! The daemon's history on the wire: a page of rows and the setting changes in it. The ring
//! file's layout is `telemetry::store::ring` (a binary header and fixed records).

use serde::{Deserialize, Serialize};

use crate::telemetry::history::HistoryRow;
use crate::tuning::engine::ChangeNote;

/// One page of a GPU's history, as the daemon answers a `history` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryPage {
    pub gpu_uuid: String,
    /// One sample a second (or fewer: none where the daemon was not running), oldest first.
    pub rows: Vec<HistoryRow>,
    /// The setting changes in the page's time, oldest first.
    pub changes: Vec<ChangeNote>,
    /// Where the next page starts; `None` on the last.
    pub next_from_ms: Option<u64>,
    /// Hours the daemon keeps.
    pub keep_hours: u32,
}
