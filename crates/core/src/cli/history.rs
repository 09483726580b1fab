//! `gputune history`: what the daemon kept while no window was open, for a box without a
//! screen — each GPU's samples (as CSV, in `gputune log`'s columns) and its setting changes
//! with who made them.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};

use crate::cli::connect::refusal;
use crate::clock::wall_clock_ms;
use crate::device::resolve_among;
use crate::service::client::{ClientError, SocketChoice, TuningClient, connect_daemon};
use crate::service::history_pages::HistoryPages;
use crate::telemetry::history::GpuHistory;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{ChangeNote, GpuInfo, TuneErrorKind};
use gputune_formats::units::local_time;

/// "24 Nov 03:40:00".
const DAY_AND_TIME: &str = "%-d %b %H:%M:%S";

/// The longest look back one may ask for (the daemon keeps at most 30 days).
const MAX_HOURS: u64 = 720;

/// `gputune history`.
#[derive(Debug, Clone, clap::Args)]
pub struct HistoryArgs {
    /// Only these GPUs (repeat the option for several): an index or a UUID.
    #[arg(long, value_name = "UUID|INDEX")]
    pub gpu: Vec<String>,
    /// How far back, in hours (default: all the daemon keeps).
    #[arg(long, value_name = "HOURS", value_parser = clap::value_parser!(u64).range(1..=MAX_HOURS))]
    pub hours: Option<u64>,
    /// Write the samples to this new CSV file (one row per GPU per second, `gputune log`'s
    /// columns); an existing file is never replaced.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

/// One GPU's history as read.
struct GpuRecord {
    info: GpuInfo,
    history: GpuHistory,
    changes: Vec<ChangeNote>,
    keep_hours: u32,
}

/// Runs `gputune history`: reads the daemon's history of the chosen GPUs, writes the CSV when
/// asked, and prints a summary and the setting changes.
pub fn run(args: &HistoryArgs, socket: &SocketChoice, out: &mut dyn Write) -> anyhow::Result<()> {
    let Some(path) = socket.daemon_path() else {
        bail!(
            "History is kept by the gputune daemon, and GPUTUNE_SOCKET is empty (never use one): unset it, or point it at the daemon's socket."
        );
    };
    let mut client = connect_daemon(&path, "gputune history").map_err(|error| {
        anyhow!(
            "{error} History is kept by the gputune daemon while no window is open (`sudo gputune daemon install`)."
        )
    })?;
    let gpus = chosen_gpus(&client.welcome().gpus, &args.gpu)?;
    // Refuse an existing file before reading anything (hours of history take seconds to read).
    let csv_file = match &args.csv {
        Some(csv) => Some((create_new(csv)?, csv.clone())),
        None => None,
    };
    let until_ms = wall_clock_ms();
    let from_ms = args
        .hours
        .map_or(0, |hours| until_ms.saturating_sub(hours * 3_600_000));
    let notices = client.welcome().notices.clone();
    let mut records = Vec::new();
    for info in gpus {
        let record = read_gpu(&mut client, info, from_ms, until_ms)
            .map_err(|error| history_refused(error, &notices))?;
        records.push(record);
    }
    if let Some((file, csv)) = csv_file {
        let gpus: Vec<_> = records
            .iter()
            .map(|record| (&record.info.identity, &record.history))
            .collect();
        let rows = crate::telemetry::csv::export::export_histories(file, &csv, &gpus)?;
        writeln!(out, "Wrote {rows} rows to {}.", crate::text::path(&csv))?;
    }
    for record in &records {
        write_summary(out, record)?;
    }
    Ok(())
}

/// The GPUs `queries` name (all when none), in index order.
fn chosen_gpus(gpus: &[GpuInfo], queries: &[String]) -> anyhow::Result<Vec<GpuInfo>> {
    if queries.is_empty() {
        return Ok(gpus.to_vec());
    }
    let uuids: Vec<String> = gpus.iter().map(|gpu| gpu.identity.uuid.clone()).collect();
    let mut indices = Vec::new();
    for query in queries {
        let index = resolve_among(&uuids, query)?;
        if !indices.contains(&index) {
            indices.push(index);
        }
    }
    indices.sort_unstable();
    Ok(indices
        .into_iter()
        .filter_map(|index| gpus.get(index as usize).cloned())
        .collect())
}

/// A new file at `path`; an existing one (or anything else there) is left alone.
fn create_new(path: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| {
            format!(
                "{} could not be created (it may exist already: gputune history never replaces a file)",
                crate::text::path(path)
            )
        })
}

/// The daemon refused a history request. The GPU came from its own welcome, so "not found"
/// means it keeps no history at all: it runs, so that is what is said, with the reason its
/// welcome gave when it could not use its history folder.
fn history_refused(error: ClientError, notices: &[Notice]) -> anyhow::Error {
    let keeps_none = error
        .refusal()
        .is_some_and(|refusal| refusal.kind == TuneErrorKind::NotFound);
    if !keeps_none {
        return refusal(error);
    }
    let why = notices
        .iter()
        .map(ToString::to_string)
        .find(|notice| notice.to_lowercase().contains("history"));
    match why {
        Some(why) => {
            // "History is not kept while no window is open: <why>": the why is what helps.
            let why = why
                .split_once(": ")
                .filter(|(head, _)| head.starts_with("History is not kept"))
                .map_or(why.as_str(), |(_, rest)| rest)
                .trim_end_matches('.');
            anyhow!(
                "The gputune daemon runs but keeps no history: {}; fix that and restart the daemon (`sudo systemctl restart gputuned`).",
                crate::text::printable(why)
            )
        }
        None => anyhow!(
            "The gputune daemon runs but keeps no history: it was started with --history-hours 0, or could not use its history folder (its log says which: `journalctl -u gputuned`)."
        ),
    }
}

fn read_gpu(
    client: &mut TuningClient,
    info: GpuInfo,
    from_ms: u64,
    until_ms: u64,
) -> Result<GpuRecord, ClientError> {
    let mut pages = HistoryPages::new(&info.identity.uuid, from_ms, until_ms);
    // Memory grows with the samples read, up to the most a daemon keeps.
    let mut history = GpuHistory::with_capacity((MAX_HOURS * 3_600) as usize);
    let mut changes = Vec::new();
    let mut keep_hours = 0;
    while let Some(page) = pages.next(client)? {
        for row in &page.rows {
            history.push_row(row);
        }
        changes.extend(page.changes);
        keep_hours = page.keep_hours;
    }
    Ok(GpuRecord {
        info,
        history,
        changes,
        keep_hours,
    })
}

fn write_summary(out: &mut dyn Write, record: &GpuRecord) -> std::io::Result<()> {
    let identity = &record.info.identity;
    let history = &record.history;
    match (history.first_time_ms(), history.last_time_ms()) {
        (Some(first_ms), Some(last_ms)) => writeln!(
            out,
            "GPU {}  {}: {} samples from {} to {} (the daemon keeps {} h)",
            identity.index,
            crate::text::printable(&identity.name),
            history.len(),
            local_time(first_ms, DAY_AND_TIME),
            local_time(last_ms, DAY_AND_TIME),
            record.keep_hours
        )?,
        _ => writeln!(
            out,
            "GPU {}  {}: no samples kept in that time",
            identity.index,
            crate::text::printable(&identity.name)
        )?,
    }
    for change in &record.changes {
        writeln!(
            out,
            "  {}  {} ({})",
            local_time(change.at_ms, DAY_AND_TIME),
            crate::text::printable(&change.what),
            crate::text::printable(&change.by)
        )?;
    }
    Ok(())
}
