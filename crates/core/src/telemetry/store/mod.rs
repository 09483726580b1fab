//! The daemon's history on disk: per GPU, one sample a second for the last `keep_hours` in a
//! ring file ([`ring`]) and its setting changes ([`changes`]), in a folder only root may
//! write. It survives a daemon restart and a crash; the window reads it through the daemon
//! when it opens, a page at a time. Disk use is fixed: 40 bytes a second, 3.46 MB per
//! GPU-day (docs/benchmarks.md).

pub mod changes;
pub mod ring;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use crate::fsafe::{self, FileError};
use changes::ChangeLog;
use gputune_formats::history::HistoryPage;
use gputune_formats::history::HistoryRow;
use gputune_formats::tuning::ChangeNote;
use ring::RingFile;

/// Hours kept when the daemon is not told otherwise.
pub const DEFAULT_KEEP_HOURS: u32 = 48;
/// The hours a daemon may be told to keep (up to 30 days: 104 MB per GPU).
pub const KEEP_HOURS_RANGE: (u32, u32) = (1, 720);
/// Seconds of history one page covers: at most 1,200 rows, about 110 KB of JSON, well under
/// the protocol's message limit.
pub const PAGE_SECONDS: u64 = 1_200;
/// The longest GPU UUID used as a file name.
const MAX_UUID_CHARS: usize = 96;

/// Where and how much history is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryOptions {
    pub dir: PathBuf,
    pub keep_hours: u32,
}

/// Every GPU's history files.
pub struct HistoryStore {
    options: HistoryOptions,
    gpus: HashMap<String, GpuFiles>,
    /// UUIDs that cannot name a file (said once each).
    refused: HashSet<String>,
}

struct GpuFiles {
    /// `None` when the file could not be used (said once, then the GPU is not recorded).
    ring: Option<RingFile>,
    changes: ChangeLog,
    /// The Unix second of the last sample stored: one a second at most.
    last_second: Option<u64>,
}

impl HistoryStore {
    /// Opens the folder (creating it, private to this user); files open as GPUs are used.
    pub fn open(options: HistoryOptions) -> Result<HistoryStore, FileError> {
        fsafe::ensure_private_folder(&options.dir, 0o700)?;
        Ok(HistoryStore {
            options: HistoryOptions {
                keep_hours: options
                    .keep_hours
                    .clamp(KEEP_HOURS_RANGE.0, KEEP_HOURS_RANGE.1),
                ..options
            },
            gpus: HashMap::new(),
            refused: HashSet::new(),
        })
    }

    /// Seconds kept per GPU.
    fn capacity_s(&self) -> u64 {
        u64::from(self.options.keep_hours) * 3_600
    }

    /// Stores a sample of GPU `uuid`, unless one of the same second is stored already.
    pub fn record(&mut self, uuid: &str, row: &HistoryRow) {
        let Some(gpu) = self.gpu(uuid) else {
            return;
        };
        let second = row.time_ms / 1000;
        if gpu.last_second.is_some_and(|last| second <= last) {
            return;
        }
        let Some(ring) = &gpu.ring else {
            return;
        };
        // A daemon restarted within a second: the sample of that second is kept already.
        let first_write = gpu.last_second.is_none();
        gpu.last_second = Some(second);
        if first_write && ring.holds_second(second) {
            return;
        }
        if let Err(error) = ring.write(row) {
            tracing::error!("GPU {uuid}: history is no longer kept: {error}");
            gpu.ring = None;
        }
    }

    /// Keeps a setting change of GPU `uuid` (a change equal to the last one is not repeated).
    pub fn note_change(&mut self, uuid: &str, note: &ChangeNote) {
        let Some(gpu) = self.gpu(uuid) else {
            return;
        };
        if let Err(error) = gpu.changes.append_if_new(note) {
            tracing::error!("GPU {uuid}: a setting change was not written: {error}");
        }
    }

    /// GPU `uuid`'s history from `from_ms` to `to_ms`, one page of at most [`PAGE_SECONDS`]
    /// from the first sample or change stored in that range (none stored: an empty last
    /// page); `now_ms` bounds how far back anything can be kept.
    pub fn page(
        &mut self,
        uuid: &str,
        from_ms: u64,
        to_ms: u64,
        now_ms: u64,
    ) -> Result<HistoryPage, String> {
        if to_ms < from_ms {
            return Err(format!(
                "The history's range ends ({to_ms}) before it starts ({from_ms})."
            ));
        }
        let keep_hours = self.options.keep_hours;
        let oldest_kept_ms = now_ms.saturating_sub(self.capacity_s() * 1000);
        let from_ms = from_ms.max(oldest_kept_ms);
        let mut page = HistoryPage {
            gpu_uuid: uuid.to_string(),
            rows: Vec::new(),
            changes: Vec::new(),
            next_from_ms: None,
            keep_hours,
        };
        if to_ms < from_ms {
            return Ok(page);
        }
        let gpu = self
            .gpu(uuid)
            .ok_or_else(|| format!("No history is kept for GPU {uuid}."))?;
        // The page starts at the first thing stored, so a reader walking 48 h of which only
        // the last minutes are kept asks once, not for 144 empty pages.
        let first_row_ms = match &gpu.ring {
            Some(ring) => ring
                // Nothing is stored after now: a range open to the far future is not scanned.
                .first_stored_second(from_ms / 1000, to_ms.min(now_ms) / 1000)
                .map_err(|error| error.to_string())?
                .map(|second| (second * 1000).max(from_ms)),
            None => None,
        };
        let first_change_ms = gpu.changes.first_between(from_ms, to_ms);
        let Some(from_ms) = first_row_ms.into_iter().chain(first_change_ms).min() else {
            return Ok(page);
        };
        let from_s = from_ms / 1000;
        let last_s = from_s.saturating_add(PAGE_SECONDS - 1);
        let page_end_ms = if to_ms / 1000 > last_s {
            page.next_from_ms = Some((last_s + 1) * 1000);
            last_s * 1000 + 999
        } else {
            to_ms
        };
        if let Some(ring) = &gpu.ring {
            page.rows = ring
                .read(from_s, page_end_ms / 1000)
                .map_err(|error| error.to_string())?
                .into_iter()
                .filter(|row| (from_ms..=page_end_ms).contains(&row.time_ms))
                .collect();
        }
        page.changes = gpu.changes.between(from_ms, page_end_ms);
        Ok(page)
    }

    /// GPU `uuid`'s files, opened on first use; `None` for a UUID that cannot be a file name.
    fn gpu(&mut self, uuid: &str) -> Option<&mut GpuFiles> {
        if !uuid_is_file_name(uuid) {
            if self.refused.insert(uuid.to_string()) {
                tracing::warn!(
                    "GPU {uuid:?}: its UUID cannot name a file; its history is not kept"
                );
            }
            return None;
        }
        if !self.gpus.contains_key(uuid) {
            let files = self.open_gpu(uuid);
            self.gpus.insert(uuid.to_string(), files);
        }
        self.gpus.get_mut(uuid)
    }

    fn open_gpu(&self, uuid: &str) -> GpuFiles {
        let ring_path = self.options.dir.join(format!("{uuid}.ring"));
        let ring = match RingFile::open(&ring_path, self.capacity_s()) {
            Ok((ring, notice)) => {
                if let Some(notice) = notice {
                    tracing::warn!("{notice}");
                }
                Some(ring)
            }
            Err(error) => {
                tracing::error!(
                    "GPU {uuid}: history is not kept: {error} Remove it and restart the daemon."
                );
                None
            }
        };
        let (changes, notice) = ChangeLog::open(&self.options.dir.join(format!("{uuid}.changes")));
        if let Some(notice) = notice {
            tracing::warn!("{notice}");
        }
        GpuFiles {
            ring,
            changes,
            last_second: None,
        }
    }
}

/// NVML's UUIDs are "GPU-" and hex digits with dashes; anything else is not used as a name.
fn uuid_is_file_name(uuid: &str) -> bool {
    !uuid.is_empty()
        && uuid.len() <= MAX_UUID_CHARS
        && !uuid.starts_with('.')
        && uuid
            .chars()
            .all(|character| character.is_ascii_alphanumeric() || character == '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::history::MetricRow;

    const NOW_MS: u64 = 1_800_000_000_000;
    const UUID: &str = "GPU-0aa1";

    /// Every page from `from_ms` to `NOW_MS`, as `gputune history` walks them; the rows, the
    /// changes and how many requests it took.
    fn walk(
        store: &mut HistoryStore,
        uuid: &str,
        from_ms: u64,
    ) -> (Vec<HistoryRow>, Vec<ChangeNote>, u32) {
        let (mut rows, mut changes, mut requests) = (Vec::new(), Vec::new(), 0);
        let mut next = Some(from_ms);
        while let Some(from_ms) = next {
            let page = store.page(uuid, from_ms, NOW_MS, NOW_MS).unwrap();
            requests += 1;
            rows.extend(page.rows);
            changes.extend(page.changes);
            next = page.next_from_ms.filter(|next| *next > from_ms);
        }
        (rows, changes, requests)
    }

    #[test]
    fn pages_skip_the_hours_where_nothing_is_stored() {
        let folder = tempfile::tempdir().unwrap();
        let mut store = HistoryStore::open(HistoryOptions {
            dir: folder.path().to_path_buf(),
            keep_hours: 48,
        })
        .unwrap();
        // Five minutes 47 h ago, a change 20 h ago, and the last ten minutes.
        let early_ms = NOW_MS - 47 * 3_600_000;
        let mut stored = Vec::new();
        for second in (0..300).chain(47 * 3_600 - 600..=47 * 3_600) {
            let row = HistoryRow::gap(early_ms + second * 1000);
            store.record(UUID, &row);
            stored.push(row);
        }
        let change = ChangeNote {
            at_ms: NOW_MS - 20 * 3_600_000,
            by: "gputune apply".to_string(),
            what: "power limit 300 W".to_string(),
        };
        store.note_change(UUID, &change);

        let (rows, changes, requests) = walk(&mut store, UUID, 0);
        assert_eq!(rows, stored);
        assert_eq!(changes, vec![change]);
        // One page per stored stretch (a stretch may straddle a page's end), not 145 pages
        // of 1,200 s over the 48 h.
        assert!(requests <= 6, "{requests} requests");

        // A daemon started ten minutes ago: one request (145 before issue 20).
        for second in 0..=600 {
            store.record(
                "GPU-0cc3",
                &HistoryRow::gap(NOW_MS - 600_000 + second * 1000),
            );
        }
        let (rows, _, requests) = walk(&mut store, "GPU-0cc3", 0);
        assert_eq!((rows.len(), requests), (601, 1));

        // A GPU with nothing stored: one request, an empty last page.
        let (rows, changes, requests) = walk(&mut store, "GPU-0bb2", 0);
        assert_eq!((rows.len(), changes.len(), requests), (0, 0, 1));
    }
}
