//! The daemon's history on the wire: a page of rows and the setting changes in it. The ring
//! file's layout is `telemetry::store::ring` (a binary header and fixed records).

use serde::{Deserialize, Serialize};

use super::tuning::ChangeNote;

/// Values in a history row: one per metric the history keeps (`Metric::ALL`, which checks
/// its length against this at compile time).
pub const HISTORY_VALUES: usize = 15;

/// A sample in stored steps (power 0.1 W, memory 1 MiB, the rest in display units). On the
/// wire it is a compact array: `[time_ms, [values...], throttle_bits]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WireRow", into = "WireRow")]
pub struct HistoryRow {
    /// Unix ms.
    pub time_ms: u64,
    /// Each metric of `telemetry::history::Metric::ALL` in its stored steps; `None` where it
    /// was not read.
    pub values: [Option<u32>; HISTORY_VALUES],
    /// NVML's throttle reasons bitmask (the bits the history keeps); `None` when not read.
    pub throttle_bits: Option<u16>,
}

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

/// The wire form: an array, about a third of the bytes of an object with names.
#[derive(Serialize, Deserialize)]
struct WireRow(u64, [Option<u32>; HISTORY_VALUES], Option<u16>);

impl From<WireRow> for HistoryRow {
    fn from(WireRow(time_ms, values, throttle_bits): WireRow) -> HistoryRow {
        HistoryRow {
            time_ms,
            values,
            throttle_bits,
        }
    }
}

impl From<HistoryRow> for WireRow {
    fn from(row: HistoryRow) -> WireRow {
        WireRow(row.time_ms, row.values, row.throttle_bits)
    }
}
