//! One GPU's history file: a ring of fixed 40-byte records, one slot per second (slot =
//! Unix second modulo the capacity), behind a 64-byte header. Nothing points anywhere: a
//! record says its own time and carries a CRC-32, so a record torn by a crash or a power cut,
//! a slot not yet written and a slot from a lap ago all read as "no sample" and every other
//! record survives. The file never grows past the header plus the capacity.

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::fsafe::{self, FileError};
use crate::telemetry::history::MetricRow;
use crate::telemetry::history::{Metric, stored_bytes};
use gputune_formats::history::HistoryRow;

/// Bytes per record: time (8), the metrics (23), throttle bits (2), flags (1), spare (2),
/// CRC-32 (4).
pub const RECORD_BYTES: usize = 40;
/// Bytes before the first record.
pub const HEADER_BYTES: u64 = 64;
const MAGIC: &[u8; 16] = b"gputune history\n";
const FORMAT_VERSION: u32 = 1;
/// Where the metrics start in a record.
const VALUES_AT: usize = 8;
const CHECKED_BYTES: usize = RECORD_BYTES - 4;
/// Flags bit: the slot holds a record (a zeroed slot never passes the CRC either).
const WRITTEN: u8 = 1;

/// An open history file.
pub struct RingFile {
    file: File,
    path: PathBuf,
    capacity_s: u64,
}

impl RingFile {
    /// Opens (or creates) the file for `capacity_s` seconds. A file of another format or
    /// capacity, or with a damaged header, is started over: the second value says so.
    pub fn open(path: &Path, capacity_s: u64) -> Result<(RingFile, Option<String>), FileError> {
        let file = fsafe::open_for_update(path, 0o600, false)?;
        let ring = RingFile {
            file,
            path: path.to_path_buf(),
            capacity_s: capacity_s.max(1),
        };
        let write_error = |error: std::io::Error| FileError::Write {
            path: path.to_path_buf(),
            detail: error.to_string(),
        };
        let length = ring.file.metadata().map_err(write_error)?.len();
        let mut header = [0u8; HEADER_BYTES as usize];
        let header_read = length >= HEADER_BYTES && ring.file.read_exact_at(&mut header, 0).is_ok();
        let expected = ring.header();
        let mut notice = None;
        if length == 0 || !header_read || header != expected {
            if length > 0 {
                notice = Some(format!(
                    "{} was written for another capacity or format, or its header is damaged; its history was started over.",
                    path.display()
                ));
            }
            ring.file.set_len(0).map_err(write_error)?;
            ring.file.write_all_at(&expected, 0).map_err(write_error)?;
        } else if length > ring.full_length() {
            // Only a file altered by hand gets longer than its ring.
            ring.file.set_len(ring.full_length()).map_err(write_error)?;
            notice = Some(format!(
                "{} was longer than its {} seconds of history; the excess was cut.",
                path.display(),
                ring.capacity_s
            ));
        }
        Ok((ring, notice))
    }

    /// The file's length once every slot is written: its most.
    pub fn full_length(&self) -> u64 {
        HEADER_BYTES + self.capacity_s * RECORD_BYTES as u64
    }

    /// Stores `row` in the slot of its second (replacing a record a lap older).
    pub fn write(&self, row: &HistoryRow) -> Result<(), FileError> {
        let second = row.time_ms / 1000;
        self.file
            .write_all_at(&encode(row), self.offset(second))
            .map_err(|error| FileError::Write {
                path: self.path.clone(),
                detail: error.to_string(),
            })
    }

    /// The records of the seconds `from_s..=to_s` (of a longer range, its last capacity's
    /// worth: the rest cannot be kept), oldest first.
    pub fn read(&self, from_s: u64, to_s: u64) -> Result<Vec<HistoryRow>, FileError> {
        let mut rows = Vec::new();
        if to_s < from_s {
            return Ok(rows);
        }
        let mut second = from_s.max(to_s.saturating_sub(self.capacity_s - 1));
        while second <= to_s {
            // One read for the run of slots up to the ring's end or the range's end.
            let slot = second % self.capacity_s;
            let run = (self.capacity_s - slot).min(to_s - second + 1);
            let mut bytes = vec![0u8; run as usize * RECORD_BYTES];
            self.read_at_most(&mut bytes, self.offset(second))?;
            for (step, record) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
                if let Some(row) = decode(record)
                    && row.time_ms / 1000 == second + step as u64
                {
                    rows.push(row);
                }
            }
            second += run;
        }
        Ok(rows)
    }

    /// The first second from `from_s` to `to_s` that holds a record, read an hour at a time.
    pub fn first_stored_second(&self, from_s: u64, to_s: u64) -> Result<Option<u64>, FileError> {
        const WINDOW_S: u64 = 3_600;
        // Nothing older than the ring's capacity can be stored.
        let mut start_s = from_s.max(to_s.saturating_sub(self.capacity_s - 1));
        while start_s <= to_s {
            let end_s = start_s.saturating_add(WINDOW_S - 1).min(to_s);
            if let Some(row) = self.read(start_s, end_s)?.first() {
                return Ok(Some(row.time_ms / 1000));
            }
            match end_s.checked_add(1) {
                Some(next_s) => start_s = next_s,
                None => break,
            }
        }
        Ok(None)
    }

    /// Whether the slot of `second` holds that second's record.
    pub fn holds_second(&self, second: u64) -> bool {
        self.read(second, second).is_ok_and(|rows| !rows.is_empty())
    }

    fn offset(&self, second: u64) -> u64 {
        HEADER_BYTES + (second % self.capacity_s) * RECORD_BYTES as u64
    }

    fn header(&self) -> [u8; HEADER_BYTES as usize] {
        let mut header = [0u8; HEADER_BYTES as usize];
        header[..16].copy_from_slice(MAGIC);
        header[16..20].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        header[20..24].copy_from_slice(&(RECORD_BYTES as u32).to_le_bytes());
        header[24..32].copy_from_slice(&self.capacity_s.to_le_bytes());
        header
    }

    /// Fills `bytes` from `offset`; what lies past the end of the file stays zero (unwritten).
    fn read_at_most(&self, bytes: &mut [u8], offset: u64) -> Result<(), FileError> {
        let mut filled = 0;
        while filled < bytes.len() {
            match self
                .file
                .read_at(&mut bytes[filled..], offset + filled as u64)
            {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(error) => {
                    return Err(FileError::Read {
                        path: self.path.clone(),
                        detail: error.to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// A row as its 40 bytes.
pub fn encode(row: &HistoryRow) -> [u8; RECORD_BYTES] {
    let mut record = [0u8; RECORD_BYTES];
    record[..8].copy_from_slice(&row.time_ms.to_le_bytes());
    let mut at = VALUES_AT;
    for metric in Metric::ALL {
        let width = stored_bytes(metric);
        let missing = u32::MAX >> (32 - 8 * width);
        let stored = row
            .value(metric)
            .map_or(missing, |value| value.min(missing - 1));
        record[at..at + width].copy_from_slice(&stored.to_le_bytes()[..width]);
        at += width;
    }
    record[at..at + 2].copy_from_slice(&row.stored_throttle().to_le_bytes());
    record[at + 2] = WRITTEN;
    let checksum = crc32fast::hash(&record[..CHECKED_BYTES]);
    record[CHECKED_BYTES..].copy_from_slice(&checksum.to_le_bytes());
    record
}

/// The row in a record; `None` for an unwritten, torn or damaged one.
pub fn decode(record: &[u8]) -> Option<HistoryRow> {
    let record: &[u8; RECORD_BYTES] = record.try_into().ok()?;
    let checksum = u32::from_le_bytes(record[CHECKED_BYTES..].try_into().ok()?);
    if crc32fast::hash(&record[..CHECKED_BYTES]) != checksum {
        return None;
    }
    let mut row = HistoryRow::gap(u64::from_le_bytes(record[..8].try_into().ok()?));
    let mut at = VALUES_AT;
    for (metric, value) in Metric::ALL.into_iter().zip(&mut row.values) {
        let width = stored_bytes(metric);
        let missing = u32::MAX >> (32 - 8 * width);
        let mut little_endian = [0u8; 4];
        little_endian[..width].copy_from_slice(&record[at..at + width]);
        let stored = u32::from_le_bytes(little_endian);
        *value = (stored != missing).then_some(stored);
        at += width;
    }
    let throttle = u16::from_le_bytes([record[at], record[at + 1]]);
    row.throttle_bits = (throttle != u16::MAX).then_some(throttle);
    (record[at + 2] & WRITTEN != 0).then_some(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(time_ms: u64, power_steps: u32) -> HistoryRow {
        let mut row = HistoryRow::gap(time_ms);
        row.values[Metric::PowerDrawW as usize] = Some(power_steps);
        row.values[Metric::MemoryUsedGib as usize] = Some(24_000);
        row.values[Metric::TemperatureC as usize] = Some(71);
        row.throttle_bits = Some(0x24);
        row
    }

    #[test]
    fn the_metrics_fill_the_record_exactly() {
        let values: usize = Metric::ALL.into_iter().map(stored_bytes).sum();
        assert_eq!(VALUES_AT + values + 2 + 1 + 2 + 4, RECORD_BYTES);
    }

    #[test]
    fn a_record_reads_back_as_written_and_a_flipped_bit_is_caught() {
        let written = row(1_700_000_000_250, 2874);
        let mut record = encode(&written);
        assert_eq!(decode(&record), Some(written));
        assert_eq!(
            decode(&encode(&HistoryRow::gap(9))),
            Some(HistoryRow::gap(9))
        );
        assert_eq!(decode(&[0u8; RECORD_BYTES]), None, "an unwritten slot");
        record[12] ^= 0x10;
        assert_eq!(decode(&record), None);
        assert_eq!(decode(&record[..20]), None, "a short record");
    }

    #[test]
    fn the_ring_keeps_its_capacity_of_seconds_and_never_grows() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("GPU-1.ring");
        let (ring, notice) = RingFile::open(&path, 100).unwrap();
        assert_eq!(notice, None);
        let start_s = 1_700_000_000;
        for second in 0..250u64 {
            ring.write(&row((start_s + second) * 1000 + 7, second as u32))
                .unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), ring.full_length());
        let rows = ring.read(start_s, start_s + 249).unwrap();
        // Only the last 100 seconds are kept; older slots were written over.
        assert_eq!(rows.len(), 100);
        assert_eq!(rows[0].time_ms, (start_s + 150) * 1000 + 7);
        assert_eq!(rows[99].value(Metric::PowerDrawW), Some(249));
        assert!(
            rows.windows(2)
                .all(|pair| pair[0].time_ms < pair[1].time_ms)
        );
        // A range across the ring's end reads in order too.
        let across = ring.read(start_s + 195, start_s + 205).unwrap();
        assert_eq!(across.len(), 11);
        assert!(
            across
                .windows(2)
                .all(|pair| pair[0].time_ms < pair[1].time_ms)
        );
        // Seconds never written read as nothing.
        assert!(ring.read(start_s + 300, start_s + 310).unwrap().is_empty());
    }

    #[test]
    fn reopening_keeps_the_records_and_another_capacity_starts_over() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("GPU-1.ring");
        {
            let (ring, _) = RingFile::open(&path, 60).unwrap();
            ring.write(&row(1_000_000, 1)).unwrap();
        }
        let (ring, notice) = RingFile::open(&path, 60).unwrap();
        assert_eq!(notice, None);
        assert_eq!(ring.read(1_000, 1_000).unwrap().len(), 1);
        drop(ring);
        let (ring, notice) = RingFile::open(&path, 120).unwrap();
        assert!(notice.unwrap().contains("started over"));
        assert!(ring.read(1_000, 1_000).unwrap().is_empty());
    }

    #[test]
    fn a_torn_record_is_skipped_and_its_neighbours_survive() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("GPU-1.ring");
        let (ring, _) = RingFile::open(&path, 60).unwrap();
        for second in 10..13u64 {
            ring.write(&row(second * 1000, second as u32)).unwrap();
        }
        // A crash half-way through the middle record's write.
        let torn = encode(&row(11_000, 999));
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&torn[..17], ring.offset(11)).unwrap();
        let rows = ring.read(10, 12).unwrap();
        assert_eq!(
            rows.iter().map(|row| row.time_ms).collect::<Vec<_>>(),
            vec![10_000, 12_000]
        );
    }
}
