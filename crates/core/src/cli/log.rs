//! `gputune log`: appends one CSV row per GPU per sample to a file, on a fixed schedule, until
//! Ctrl-C / SIGTERM or the requested duration ends.

use std::io::Write;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::device::{Backend, resolve_gpu};
use crate::telemetry::csv::{TelemetryCsvWriter, open_for_append};
use gputune_formats::card::{BackendKind, GpuIdentity};

/// Time between samples when the user does not choose one.
pub const DEFAULT_INTERVAL_MS: u64 = 1_000;
/// The sampling interval a user may choose, inclusive. Below 100 ms NVML's own counters
/// (power, utilization) do not update; above a minute a log says little about training.
pub const INTERVAL_RANGE_MS: RangeInclusive<u64> = 100..=60_000;
/// Logging stops with an error after this many samples in a row in which no GPU could be read:
/// the driver is gone, and rows will not come back by waiting.
pub const ALL_FAILED_SAMPLES_LIMIT: u32 = 10;

/// What to log, where and how often: the user's request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRequest {
    /// The CSV file rows are appended to.
    pub csv_path: PathBuf,
    /// Time between the starts of two samples.
    pub interval_ms: u64,
    /// Stop after this long; `None` logs until Ctrl-C / SIGTERM.
    pub duration_s: Option<u64>,
    /// GPUs to log, by index or UUID; empty means every GPU.
    pub gpu_queries: Vec<String>,
}

impl LogRequest {
    /// Checks the interval and duration, so a bad request fails before any GPU or file is
    /// touched.
    pub fn new(
        csv_path: PathBuf,
        interval_ms: u64,
        duration_s: Option<u64>,
        gpu_queries: Vec<String>,
    ) -> anyhow::Result<LogRequest> {
        if !INTERVAL_RANGE_MS.contains(&interval_ms) {
            bail!(
                "The sampling interval must be between {} and {} ms (--interval-ms {interval_ms} was given).",
                INTERVAL_RANGE_MS.start(),
                INTERVAL_RANGE_MS.end()
            );
        }
        if duration_s == Some(0) {
            bail!("The duration must be at least 1 second (--duration-s 0 was given).");
        }
        Ok(LogRequest {
            csv_path,
            interval_ms,
            duration_s,
            gpu_queries,
        })
    }
}

/// How much a finished log wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogSummary {
    /// Samples taken (each one row per GPU that answered).
    pub samples: u64,
    /// Rows written.
    pub rows: u64,
    /// Sample times passed over because the sample before them was still being read.
    pub skipped: u64,
    /// The longest time one sample took to read and write, milliseconds.
    pub slowest_sample_ms: u64,
}

/// Runs `gputune log`: installs the Ctrl-C / SIGTERM handler, then logs until stopped, with
/// progress and problems on stderr.
pub fn run(backend: &mut dyn Backend, request: &LogRequest) -> anyhow::Result<()> {
    let stop = install_stop_signal()?;
    log_until_stopped(backend, request, &stop, &mut std::io::stderr())?;
    Ok(())
}

/// A channel that receives one message on the first SIGINT / SIGTERM / SIGHUP. A second
/// signal exits at once, for a user whose driver hangs mid-sample.
fn install_stop_signal() -> anyhow::Result<Receiver<()>> {
    let (sender, receiver) = mpsc::channel();
    let signals_received = AtomicU32::new(0);
    ctrlc::set_handler(move || {
        if signals_received.fetch_add(1, Ordering::SeqCst) > 0 {
            std::process::exit(130);
        }
        // The receiver lives until logging ends; after that nothing needs telling.
        let _ = sender.send(());
    })
    .map_err(|error| anyhow::anyhow!("Could not install the Ctrl-C handler ({error})."))?;
    Ok(receiver)
}

/// Logs the requested GPUs to the requested file until a message arrives on `stop`, the
/// duration ends, or no GPU answers for [`ALL_FAILED_SAMPLES_LIMIT`] samples in a row.
/// `messages` gets the start line, one line per GPU that starts (or stops) failing, and a
/// summary.
pub fn log_until_stopped(
    backend: &mut dyn Backend,
    request: &LogRequest,
    stop: &Receiver<()>,
    messages: &mut dyn Write,
) -> anyhow::Result<LogSummary> {
    let gpus = selected_gpus(backend, &request.gpu_queries)?;
    if gpus.is_empty() {
        bail!("There is no GPU to log.");
    }
    let path = request.csv_path.as_path();
    let (file, needs_header) = open_for_append(path)?;
    let mut writer = TelemetryCsvWriter::new(file, needs_header).with_destination_name(path);
    // Messages go to stderr; one that cannot be written must not stop the log.
    let _ = writeln!(
        messages,
        "{}",
        start_line(backend.kind(), gpus.len(), request)
    );

    let interval = Duration::from_millis(request.interval_ms);
    let started = Instant::now();
    let ends_at = request
        .duration_s
        .map(|duration_s| started + Duration::from_secs(duration_s));
    let mut summary = LogSummary::default();
    // The error last reported for each GPU, so a lost GPU is reported once, not every sample.
    let mut reported_errors: Vec<Option<String>> = vec![None; gpus.len()];
    let mut samples_all_failed_in_a_row = 0;
    let mut slot: u64 = 0;
    loop {
        // Slot k starts at start + k·interval, so sampling time never accumulates as drift.
        let due = started + Duration::from_millis(request.interval_ms.saturating_mul(slot));
        if ends_at.is_some_and(|end| due >= end) || stop_arrives_before(due, stop) {
            break;
        }
        let sample_started = Instant::now();
        let mut rows_this_sample = 0;
        for (identity, reported) in gpus.iter().zip(reported_errors.iter_mut()) {
            match backend.telemetry(identity.index) {
                Ok(reading) => {
                    writer.write_row(identity, &reading)?;
                    rows_this_sample += 1;
                    if reported.take().is_some() {
                        let _ = writeln!(
                            messages,
                            "GPU {} ({}) answers again; logging it.",
                            identity.index, identity.uuid
                        );
                    }
                }
                Err(error) => {
                    let error = error.to_string();
                    if reported.as_deref() != Some(error.as_str()) {
                        let _ = writeln!(
                            messages,
                            "GPU {} ({}) could not be read, so it has no rows until it answers again: {error}",
                            identity.index, identity.uuid
                        );
                        *reported = Some(error);
                    }
                }
            }
        }
        // Each sample reaches the file whole, so `tail -f` sees it and a kill loses at most one.
        writer.flush()?;
        summary.samples += 1;
        summary.rows += rows_this_sample;
        if rows_this_sample == 0 {
            samples_all_failed_in_a_row += 1;
            if samples_all_failed_in_a_row >= ALL_FAILED_SAMPLES_LIMIT {
                bail!(
                    "Stopped logging to {}: no GPU could be read for {ALL_FAILED_SAMPLES_LIMIT} samples in a row.",
                    crate::text::path(path)
                );
            }
        } else {
            samples_all_failed_in_a_row = 0;
        }
        let sample_ms = sample_started.elapsed().as_millis() as u64;
        summary.slowest_sample_ms = summary.slowest_sample_ms.max(sample_ms);
        let next = next_slot(slot, started.elapsed(), interval);
        // The slots passed over, up to the end of the log: each is a row time with no row.
        let last_slot = ends_at.map_or(u64::MAX, |_| {
            let duration_ms = request.duration_s.unwrap_or(0).saturating_mul(1000);
            duration_ms.div_ceil(request.interval_ms.max(1))
        });
        let skipped_now = next.min(last_slot).saturating_sub(slot + 1);
        if skipped_now > 0 && summary.skipped == 0 {
            let _ = writeln!(
                messages,
                "Reading {} took {sample_ms} ms, longer than the {} ms interval: the sample times it ran over are skipped (counted at the end).",
                plural_count(gpus.len() as u64, "GPU", "GPUs"),
                request.interval_ms
            );
        }
        summary.skipped += skipped_now;
        slot = next;
    }
    writer.flush()?;
    let _ = writeln!(messages, "{}", summary_line(&summary, request, path));
    Ok(summary)
}

/// "Logged 100 samples (800 rows) to FILE." with, when sample times were skipped, how many
/// and the slowest sample.
fn summary_line(summary: &LogSummary, request: &LogRequest, path: &std::path::Path) -> String {
    let logged = format!(
        "Logged {} {} ({} rows) to {}",
        summary.samples,
        plural(summary.samples, "sample", "samples"),
        summary.rows,
        crate::text::path(path)
    );
    if summary.skipped == 0 {
        return format!("{logged}.");
    }
    let due = summary.samples + summary.skipped;
    format!(
        "{logged}; {} of {due} sample times were skipped: the slowest sample took {} ms, longer than the {} ms interval (try a longer --interval-ms, or fewer --gpu).",
        summary.skipped, summary.slowest_sample_ms, request.interval_ms
    )
}

/// "1 GPU", "8 GPUs".
fn plural_count(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", plural(count, one, many))
}

/// Resolves the `--gpu` queries (every GPU when there are none) to identities, once: a GPU's
/// identity does not change while the driver runs. A GPU named twice is logged once.
fn selected_gpus(
    backend: &mut dyn Backend,
    gpu_queries: &[String],
) -> anyhow::Result<Vec<GpuIdentity>> {
    let mut indices: Vec<u32> = Vec::new();
    if gpu_queries.is_empty() {
        indices.extend(0..backend.gpu_count()?);
    } else {
        for query in gpu_queries {
            let index = resolve_gpu(backend, query)?;
            if !indices.contains(&index) {
                indices.push(index);
            }
        }
    }
    let mut identities = Vec::with_capacity(indices.len());
    for index in indices {
        identities.push(backend.identity(index)?);
    }
    Ok(identities)
}

/// "Logging 8 GPUs every 1000 ms to FILE; Ctrl-C to stop."
fn start_line(kind: BackendKind, gpu_count: usize, request: &LogRequest) -> String {
    let simulated = match kind {
        BackendKind::Sim => "simulated ",
        BackendKind::Nvml => "",
    };
    let count = gpu_count as u64;
    let duration = request
        .duration_s
        .map(|duration_s| format!(" for {duration_s} s"))
        .unwrap_or_default();
    format!(
        "Logging {count} {simulated}{} every {} ms{duration} to {}; Ctrl-C to stop.",
        plural(count, "GPU", "GPUs"),
        request.interval_ms,
        crate::text::path(&request.csv_path)
    )
}

fn plural<'a>(count: u64, one: &'a str, many: &'a str) -> &'a str {
    if count == 1 { one } else { many }
}

/// Waits until `due`. True when a stop arrived first (or had arrived already).
fn stop_arrives_before(due: Instant, stop: &Receiver<()>) -> bool {
    let wait = due.saturating_duration_since(Instant::now());
    match stop.recv_timeout(wait) {
        Ok(()) => true,
        Err(RecvTimeoutError::Timeout) => false,
        // No one can send a stop any more: just keep the schedule.
        Err(RecvTimeoutError::Disconnected) => {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            false
        }
    }
}

/// The slot after `slot` that has not started yet: a sample that overran its interval skips
/// the slots it missed instead of firing them in a burst.
fn next_slot(slot: u64, elapsed: Duration, interval: Duration) -> u64 {
    let interval_ns = interval.as_nanos().max(1);
    let first_not_started = elapsed.as_nanos().div_ceil(interval_ns);
    let first_not_started = u64::try_from(first_not_started).unwrap_or(u64::MAX);
    first_not_started.max(slot.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::{SimBackend, SimOptions};

    fn request(path: PathBuf, interval_ms: u64, duration_s: Option<u64>) -> LogRequest {
        LogRequest {
            csv_path: path,
            interval_ms,
            duration_s,
            gpu_queries: Vec::new(),
        }
    }

    #[test]
    fn intervals_outside_the_range_are_one_sentence() {
        let error = LogRequest::new("log.csv".into(), 5, None, Vec::new())
            .err()
            .map(|error| error.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "The sampling interval must be between 100 and 60000 ms (--interval-ms 5 was given)."
            )
        );
        assert!(LogRequest::new("log.csv".into(), 60_001, None, Vec::new()).is_err());
        assert!(LogRequest::new("log.csv".into(), 100, Some(0), Vec::new()).is_err());
        assert!(LogRequest::new("log.csv".into(), 100, Some(1), Vec::new()).is_ok());
    }

    #[test]
    fn slots_stay_on_the_grid_and_skip_the_ones_an_overrun_missed() {
        let interval = Duration::from_millis(100);
        assert_eq!(next_slot(0, Duration::from_millis(3), interval), 1);
        assert_eq!(next_slot(4, Duration::from_millis(400), interval), 5);
        assert_eq!(next_slot(4, Duration::from_millis(401), interval), 5);
        assert_eq!(next_slot(4, Duration::from_millis(650), interval), 7);
    }

    #[test]
    fn a_stop_that_already_arrived_ends_the_log_with_the_header_written() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("log.csv");
        let mut backend = SimBackend::new(&SimOptions::default());
        let (sender, stop) = mpsc::channel();
        sender.send(()).unwrap();
        let mut messages = Vec::new();
        let summary = log_until_stopped(
            &mut backend,
            &request(path.clone(), 100, None),
            &stop,
            &mut messages,
        )
        .unwrap();
        assert_eq!(summary, LogSummary::default());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1);
        let messages = String::from_utf8(messages).unwrap();
        assert!(
            messages.starts_with("Logging 1 simulated GPU every 100 ms to "),
            "{messages}"
        );
    }
}
