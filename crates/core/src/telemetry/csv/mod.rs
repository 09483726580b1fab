//! Telemetry as CSV: the one place that writes it, for `gputune log` and the window's export.
//! Here: the columns, the writer and appending to a log; a GPU's history written as CSV is
//! `export.rs`.
//!
//! Columns are named like nvidia-smi's `--query-gpu` fields, with the unit in the header as
//! nvidia-smi's CSV writes it (`power.draw [W]`), so the values stay plain numbers that a
//! spreadsheet or pandas reads without parsing units. A reading the card does not report is an
//! empty field, never 0.

pub mod export;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, SecondsFormat};

use gputune_formats::{
    card::{FanReading, GpuIdentity, Telemetry},
    throttle::ThrottleReasons,
};

/// The header row, in column order.
pub const HEADER: [&str; 22] = [
    "timestamp",
    "index",
    "uuid",
    "name",
    "power.draw [W]",
    "enforced.power.limit [W]",
    "temperature.gpu [C]",
    "fan.speed [%]",
    "clocks.gr [MHz]",
    "clocks.sm [MHz]",
    "clocks.mem [MHz]",
    "utilization.gpu [%]",
    "utilization.memory [%]",
    "memory.used [MiB]",
    "memory.total [MiB]",
    "pstate",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.active",
    "energy.total [J]",
];

/// What a destination that is not a named file is called in messages.
const UNNAMED_DESTINATION: &str = "the CSV output";

/// How much of an existing file's first line is read to recognise our header. Our header is
/// about 400 bytes; a longer first line is not ours.
const FIRST_LINE_LIMIT_BYTES: u64 = 4096;

/// What can go wrong writing telemetry CSV. Each message names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// The file could not be opened or created.
    #[error("Could not open {} for appending ({source}). Check the path and its permissions.", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An existing file could not be read to check its header.
    #[error("Could not read {} to check its header ({source}).", path.display())]
    ReadExisting {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An existing, non-empty file does not start with our header: appending would mix formats.
    #[error(
        "{} already holds data that is not a gputune telemetry log (its first line is not gputune's CSV header), so nothing was written to it; choose another file name.",
        path.display()
    )]
    ForeignFile { path: PathBuf },
    /// Writing a row (or the header) failed, e.g. the disk is full.
    #[error("Writing to {destination} failed ({source}).")]
    Write {
        destination: String,
        source: csv::Error,
    },
    /// The export file could not be created.
    #[error("Could not create {} ({source}). Check the folder exists and is writable.", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Pushing buffered rows out to the file failed.
    #[error("Flushing {destination} failed ({source}).")]
    Flush {
        destination: String,
        source: std::io::Error,
    },
}

/// Writes telemetry rows, one per GPU reading, under [`HEADER`].
pub struct TelemetryCsvWriter<W: Write> {
    csv: csv::Writer<W>,
    /// Written before the first row (or at the first flush), so an empty log still gets one.
    header_pending: bool,
    /// How the destination is named in error messages (the file's path, when there is one).
    destination: String,
}

impl<W: Write> TelemetryCsvWriter<W> {
    /// Wraps `writer`. With `write_header`, the header is written before the first row.
    pub fn new(writer: W, write_header: bool) -> Self {
        TelemetryCsvWriter {
            csv: csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(writer),
            header_pending: write_header,
            destination: UNNAMED_DESTINATION.to_string(),
        }
    }

    /// Names the destination in error messages, e.g. by the path of the file behind `writer`.
    pub fn with_destination_name(mut self, path: &Path) -> Self {
        self.destination = path.display().to_string();
        self
    }

    /// Writes one row: `reading` of the GPU `identity` names.
    pub fn write_row(
        &mut self,
        identity: &GpuIdentity,
        reading: &Telemetry,
    ) -> Result<(), CsvError> {
        self.write_pending_header()?;
        let row = row_fields(identity, reading);
        self.csv
            .write_record(&row)
            .map_err(|source| CsvError::Write {
                destination: self.destination.clone(),
                source,
            })
    }

    /// Pushes every buffered row to the underlying writer and flushes it.
    pub fn flush(&mut self) -> Result<(), CsvError> {
        self.write_pending_header()?;
        self.csv.flush().map_err(|source| CsvError::Flush {
            destination: self.destination.clone(),
            source,
        })
    }

    fn write_pending_header(&mut self) -> Result<(), CsvError> {
        if self.header_pending {
            self.csv
                .write_record(HEADER)
                .map_err(|source| CsvError::Write {
                    destination: self.destination.clone(),
                    source,
                })?;
            self.header_pending = false;
        }
        Ok(())
    }
}

/// Opens `path` for appending, creating it if needed. Returns the file and whether it needs
/// the header (it is new or empty). Refuses a non-empty file whose first line is not our
/// header, so a user's other file is never extended with rows it does not hold.
pub fn open_for_append(path: &Path) -> Result<(File, bool), CsvError> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|source| CsvError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    let read_error = |source| CsvError::ReadExisting {
        path: path.to_path_buf(),
        source,
    };
    let length_bytes = file.metadata().map_err(read_error)?.len();
    if length_bytes == 0 {
        return Ok((file, true));
    }
    let mut first_line = Vec::new();
    BufReader::new((&file).take(FIRST_LINE_LIMIT_BYTES))
        .read_until(b'\n', &mut first_line)
        .map_err(read_error)?;
    if !is_our_header(&first_line) {
        return Err(CsvError::ForeignFile {
            path: path.to_path_buf(),
        });
    }
    // A run killed mid-row leaves the file without its final newline; end that line, so the
    // rows appended now start on a line of their own.
    file.seek(SeekFrom::End(-1)).map_err(read_error)?;
    let mut last_byte = [0u8; 1];
    file.read_exact(&mut last_byte).map_err(read_error)?;
    if last_byte[0] != b'\n' {
        file.write_all(b"\n").map_err(|source| CsvError::Flush {
            destination: path.display().to_string(),
            source,
        })?;
    }
    Ok((file, false))
}

/// Whether `line` (with or without its line ending) is [`HEADER`] as CSV.
fn is_our_header(line: &[u8]) -> bool {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(line);
    match reader.records().next() {
        Some(Ok(record)) => record.iter().eq(HEADER),
        _ => false,
    }
}

/// One row's fields, in [`HEADER`] order.
fn row_fields(identity: &GpuIdentity, reading: &Telemetry) -> [String; HEADER.len()] {
    let number = |value: Option<u32>| value.map(|value| value.to_string()).unwrap_or_default();
    let milli_to_unit = |value: Option<u64>| value.map(exact_thousandths).unwrap_or_default();
    [
        timestamp(reading.sampled_at_ms),
        identity.index.to_string(),
        identity.uuid.clone(),
        identity.name.clone(),
        milli_to_unit(reading.power_draw_mw.map(u64::from)),
        milli_to_unit(reading.power_limit_mw.map(u64::from)),
        number(reading.temperature_c),
        mean_fan_speed_pct(reading.fans.as_deref()),
        number(reading.gpu_clock_mhz),
        number(reading.sm_clock_mhz),
        number(reading.memory_clock_mhz),
        number(reading.utilization_gpu_pct),
        number(reading.utilization_memory_pct),
        reading
            .memory_used_bytes
            .map(|bytes| mebibytes(bytes).to_string())
            .unwrap_or_default(),
        mebibytes(identity.memory_total_bytes).to_string(),
        reading
            .performance_state
            .map(|state| format!("P{state}"))
            .unwrap_or_default(),
        number(reading.pcie_link_gen),
        number(reading.pcie_link_gen_max),
        number(reading.pcie_link_width),
        number(reading.pcie_link_width_max),
        throttle_names(reading.throttle_reasons),
        milli_to_unit(reading.energy_total_mj),
    ]
}

/// Bytes as whole MiB, rounded to nearest like the history's memory column, so a live log and
/// an export of the same sample agree.
fn mebibytes(bytes: u64) -> u64 {
    bytes.saturating_add(gputune_formats::units::BYTES_PER_MIB / 2)
        / gputune_formats::units::BYTES_PER_MIB
}

/// RFC 3339 in UTC with milliseconds ("2025-01-31T12:00:00.250Z"); empty if out of range.
fn timestamp(sampled_at_ms: u64) -> String {
    i64::try_from(sampled_at_ms)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .map(|time| time.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// Thousandths (mW, mJ) as the whole unit with three exact decimals ("87.452"), no rounding.
fn exact_thousandths(thousandths: u64) -> String {
    format!("{}.{:03}", thousandths / 1000, thousandths % 1000)
}

/// Mean speed of the fans that report one, rounded to a whole percent like nvidia-smi's
/// `fan.speed`; empty when the card has no fans or none reports a speed.
fn mean_fan_speed_pct(fans: Option<&[FanReading]>) -> String {
    let speeds_pct: Vec<u32> = fans
        .unwrap_or_default()
        .iter()
        .filter_map(|fan| fan.speed_pct)
        .collect();
    if speeds_pct.is_empty() {
        return String::new();
    }
    let total_pct: u64 = speeds_pct.iter().map(|&pct| u64::from(pct)).sum();
    let count = speeds_pct.len() as u64;
    // Integer rounding to nearest: (2·total + count) / (2·count).
    ((2 * total_pct + count) / (2 * count)).to_string()
}

/// Active reasons' snake_case names joined with `|`; empty when none is active or unknown.
fn throttle_names(reasons: Option<ThrottleReasons>) -> String {
    reasons
        .map(|reasons| {
            reasons
                .iter()
                .map(|reason| reason.name())
                .collect::<Vec<_>>()
                .join("|")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::throttle::ThrottleReason;

    pub(super) fn identity() -> GpuIdentity {
        GpuIdentity {
            index: 3,
            uuid: "GPU-12345678-aaaa-bbbb-cccc-1234567890ab".to_string(),
            name: "NVIDIA GeForce RTX 4090, test".to_string(),
            pci_bus_id: "00000000:01:00.0".to_string(),
            memory_total_bytes: 24_564 * gputune_formats::units::BYTES_PER_MIB,
            driver_version: None,
            nvml_version: None,
            architecture: None,
            minor_number: None,
        }
    }

    pub(super) fn full_reading() -> Telemetry {
        Telemetry {
            sampled_at_ms: 1_700_000_000_250,
            power_draw_mw: Some(87_452),
            power_limit_mw: Some(450_000),
            temperature_c: Some(67),
            fans: Some(vec![
                FanReading {
                    speed_pct: Some(50),
                    speed_rpm: Some(1500),
                },
                FanReading {
                    speed_pct: Some(53),
                    speed_rpm: None,
                },
            ]),
            gpu_clock_mhz: Some(2520),
            sm_clock_mhz: Some(2520),
            memory_clock_mhz: Some(10_501),
            utilization_gpu_pct: Some(99),
            utilization_memory_pct: Some(41),
            memory_used_bytes: Some(20_000 * gputune_formats::units::BYTES_PER_MIB + 5),
            performance_state: Some(2),
            throttle_reasons: Some(
                [
                    ThrottleReason::SwPowerCap,
                    ThrottleReason::SwThermalSlowdown,
                ]
                .into_iter()
                .collect(),
            ),
            pcie_link_gen: Some(4),
            pcie_link_width: Some(16),
            pcie_link_gen_max: Some(4),
            pcie_link_width_max: Some(16),
            energy_total_mj: Some(123_456_789),
            processes: None,
            ecc: None,
        }
    }

    fn written(rows: &[Telemetry], write_header: bool) -> String {
        let mut writer = TelemetryCsvWriter::new(Vec::new(), write_header);
        for reading in rows {
            assert!(writer.write_row(&identity(), reading).is_ok());
        }
        assert!(writer.flush().is_ok());
        String::from_utf8(writer.csv.get_ref().clone()).unwrap_or_default()
    }

    #[test]
    fn a_full_reading_has_units_in_the_header_and_plain_numbers_in_the_row() {
        let text = written(&[full_reading()], true);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(HEADER.join(",").as_str()));
        assert_eq!(
            lines.next(),
            Some(
                "2023-11-14T22:13:20.250Z,3,GPU-12345678-aaaa-bbbb-cccc-1234567890ab,\
                 \"NVIDIA GeForce RTX 4090, test\",87.452,450.000,67,52,2520,2520,10501,99,41,\
                 20000,24564,P2,4,4,16,16,sw_power_cap|sw_thermal_slowdown,123456.789"
            )
        );
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn readings_a_card_does_not_report_are_empty_fields_never_zero() {
        let reading = Telemetry {
            sampled_at_ms: 1_700_000_000_000,
            ..Telemetry::default()
        };
        let text = written(&[reading], false);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.as_bytes());
        let record = reader.records().next().unwrap().unwrap();
        let fields: Vec<&str> = record.iter().collect();
        assert_eq!(fields.len(), HEADER.len());
        for (column, field) in HEADER.iter().zip(&fields) {
            match *column {
                "timestamp" | "index" | "uuid" | "name" | "memory.total [MiB]" => {
                    assert!(!field.is_empty(), "{column}")
                }
                _ => assert_eq!(*field, "", "{column}"),
            }
        }
    }

    #[test]
    fn fans_that_report_nothing_and_no_active_reasons_are_empty() {
        assert_eq!(mean_fan_speed_pct(None), "");
        assert_eq!(
            mean_fan_speed_pct(Some(&[FanReading {
                speed_pct: None,
                speed_rpm: Some(900),
            }])),
            ""
        );
        assert_eq!(throttle_names(Some(ThrottleReasons::default())), "");
    }

    #[test]
    fn the_header_is_written_once_even_with_no_rows() {
        assert_eq!(written(&[], true), format!("{}\n", HEADER.join(",")));
        assert_eq!(written(&[], false), "");
        let two_rows = written(&[full_reading(), full_reading()], true);
        assert_eq!(two_rows.matches("timestamp").count(), 1);
        assert_eq!(two_rows.lines().count(), 3);
    }

    #[test]
    fn appending_writes_the_header_only_to_a_new_or_empty_file() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("log.csv");
        for expected_rows in [1, 2] {
            let (file, needs_header) = open_for_append(&path).unwrap();
            assert_eq!(needs_header, expected_rows == 1);
            let mut writer = TelemetryCsvWriter::new(file, needs_header);
            writer.write_row(&identity(), &full_reading()).unwrap();
            writer.flush().unwrap();
            drop(writer);
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(text.lines().count(), 1 + expected_rows);
        }
        let empty = directory.path().join("empty.csv");
        std::fs::write(&empty, "").unwrap();
        assert!(open_for_append(&empty).unwrap().1);
    }

    #[test]
    fn a_torn_last_row_is_ended_before_new_rows() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("torn.csv");
        std::fs::write(&path, format!("{}\n2023-11-14T22:13", HEADER.join(","))).unwrap();
        let (file, needs_header) = open_for_append(&path).unwrap();
        assert!(!needs_header);
        let mut writer = TelemetryCsvWriter::new(file, needs_header);
        writer.write_row(&identity(), &full_reading()).unwrap();
        writer.flush().unwrap();
        drop(writer);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines()
                .last()
                .unwrap()
                .starts_with("2023-11-14T22:13:20.250Z,3,")
        );
    }

    #[test]
    fn a_foreign_file_is_refused_and_left_untouched() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("notes.csv");
        let original = "name,score\nada,3\n";
        std::fs::write(&path, original).unwrap();
        let error = open_for_append(&path).err().map(|error| error.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|message| message.contains("notes.csv")
                    && message.contains("not a gputune telemetry log")),
            "{error:?}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
        // A longer header (a future version's columns) is not ours either.
        std::fs::write(&path, format!("{},extra\n", HEADER.join(","))).unwrap();
        assert!(open_for_append(&path).is_err());
    }
}
