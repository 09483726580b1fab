//! The window's first look back: when a daemon answers, the link reads each GPU's history
//! from it (the hours before the window opened, a page at a time, between the window's other
//! work) and hands it over whole, one GPU at a time.

use std::time::{Duration, Instant};

use crate::link::LinkEvent;
use crate::service::client::{ClientError, TuningClient};
use crate::service::history_pages::HistoryPages;
use gputune_formats::history::HistoryRow;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{ChangeNote, GpuInfo};

/// How long one turn of the link's loop spends on history before it looks at the window's
/// commands and the live readings again.
const TURN_BUDGET: Duration = Duration::from_millis(25);
/// How far back the window reads: the daemon's one sample a second fills the window's history
/// (24 h at 10 Hz) in this many seconds; older samples would not be kept.
const MAX_LOOK_BACK_S: u64 = crate::telemetry::history::DAY_AT_10_HZ as u64;

/// The reading of every GPU's history, in progress.
pub(crate) struct HistoryFetch {
    /// GPUs still to read: index and UUID.
    queue: Vec<(u32, String)>,
    /// The pages of the GPU being read.
    pages: Option<HistoryPages>,
    /// The history ends where the window's own readings begin.
    until_ms: u64,
    /// Reading only what the window missed while it was not connected, from this time
    /// (Unix ms, exclusive): sent as [`LinkEvent::Refilled`].
    gap_from_ms: Option<u64>,
    rows: Vec<HistoryRow>,
    changes: Vec<ChangeNote>,
}

impl HistoryFetch {
    /// Reads the history of `gpus` up to `until_ms` (Unix ms, when the window subscribed).
    pub fn new(gpus: &[GpuInfo], until_ms: u64) -> HistoryFetch {
        HistoryFetch {
            queue: gpus
                .iter()
                .rev()
                .map(|gpu| (gpu.identity.index, gpu.identity.uuid.clone()))
                .collect(),
            pages: None,
            until_ms,
            gap_from_ms: None,
            rows: Vec::new(),
            changes: Vec::new(),
        }
    }

    /// Reads what the daemon kept of `gpus` after `from_ms` (the window's last reading
    /// before the connection was lost) up to `until_ms` (when it subscribed again).
    pub fn gap(gpus: &[GpuInfo], from_ms: u64, until_ms: u64) -> HistoryFetch {
        HistoryFetch {
            gap_from_ms: Some(from_ms),
            ..HistoryFetch::new(gpus, until_ms)
        }
    }

    pub fn is_done(&self) -> bool {
        self.queue.is_empty()
    }

    /// Reads pages for at most [`TURN_BUDGET`]; a GPU read to its end is sent to the window.
    /// An error only when the service is gone; a refused page ends the reading with a notice.
    pub fn turn(
        &mut self,
        client: &mut TuningClient,
        send: &dyn Fn(LinkEvent) -> bool,
    ) -> Result<(), ClientError> {
        let started = Instant::now();
        while started.elapsed() < TURN_BUDGET {
            let Some((gpu_index, uuid)) = self.queue.last().cloned() else {
                return Ok(());
            };
            // From as far back as the window keeps (the daemon starts at the oldest it has).
            let until_ms = self.until_ms;
            let from_ms = match self.gap_from_ms {
                Some(gap_from_ms) => gap_from_ms.saturating_add(1).min(until_ms),
                None => until_ms.saturating_sub(MAX_LOOK_BACK_S * 1000),
            };
            let pages = self
                .pages
                .get_or_insert_with(|| HistoryPages::new(&uuid, from_ms, until_ms));
            match pages.next(client) {
                Ok(Some(page)) => {
                    self.rows.extend(page.rows);
                    self.changes.extend(page.changes);
                }
                Ok(None) => {
                    self.queue.pop();
                    self.pages = None;
                    let (rows, changes) = (
                        std::mem::take(&mut self.rows),
                        std::mem::take(&mut self.changes),
                    );
                    let event = match self.gap_from_ms {
                        Some(_) => LinkEvent::Refilled {
                            gpu_index,
                            rows,
                            changes,
                        },
                        None => LinkEvent::History {
                            gpu_index,
                            rows,
                            changes,
                        },
                    };
                    if !send(event) {
                        self.queue.clear();
                    }
                }
                Err(ClientError::Refused(error)) => {
                    self.give_up(&error.message, send);
                    return Ok(());
                }
                Err(ClientError::Unreadable(why)) => {
                    self.give_up(&why, send);
                    return Ok(());
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }
    /// Stops reading; the window shows its own readings only, and says why.
    fn give_up(&mut self, why: &str, send: &dyn Fn(LinkEvent) -> bool) {
        self.rows.clear();
        self.changes.clear();
        // Every GPU still waiting gets its (empty) answer, so none shows "reading" forever
        // (a gap being refilled shows nothing while it is read).
        let waiting: Vec<(u32, String)> = self.queue.drain(..).collect();
        for (gpu_index, _) in waiting
            .into_iter()
            .rev()
            .filter(|_| self.gap_from_ms.is_none())
        {
            send(LinkEvent::History {
                gpu_index,
                rows: Vec::new(),
                changes: Vec::new(),
            });
        }
        send(LinkEvent::Notice {
            gpu_index: None,
            notice: Notice::Warning(format!(
                "The history the daemon kept while the window was {} could not be read: {why}",
                if self.gap_from_ms.is_some() {
                    "not connected"
                } else {
                    "closed"
                }
            )),
        });
    }
}
