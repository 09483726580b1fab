//! `gputune jobs`: the scheduler's jobs that ended on this node, as the daemon recorded them
//! (energy from the cards' energy counters, cost at a price), newest first; `gputune jobs show
//! ID` is one job (`jobs_show.rs`). The cost shown is at the user's own price when they set one
//! (their config folder's cost.toml), else the daemon's.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail};

use crate::cli::connect::{refusal, unexpected};
use crate::job_energy::cost::{COST_HINT, Price, format_co2, format_kwh, format_money, user_price};
use crate::service::client::{SocketChoice, TuningClient, connect_daemon};
use gputune_formats::jobs::{JOULES_PER_KWH, JobRecord};
use gputune_formats::protocol::{Request, Response};

/// How many jobs are listed unless asked.
pub const DEFAULT_LIMIT: u32 = 20;

/// `gputune jobs`.
#[derive(Debug, Clone, clap::Args)]
pub struct JobsArgs {
    #[command(subcommand)]
    pub command: Option<JobsCommand>,
    /// How many of the newest jobs to list.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub limit: u32,
    /// Write the records as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `gputune jobs` does besides listing.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum JobsCommand {
    /// One job's record: each GPU's energy, power, temperature, throttling and settings.
    Show(crate::cli::jobs_show::JobsShowArgs),
}

/// Runs `gputune jobs ...`.
pub fn run(
    args: &JobsArgs,
    socket: &SocketChoice,
    config_dir: Option<&Path>,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    if let Some(JobsCommand::Show(show)) = &args.command {
        return crate::cli::jobs_show::run(show, socket, config_dir, out, messages);
    }
    let mut client = connect(socket, "gputune jobs")?;
    let (mut records, skipped) = match client
        .request(Request::Jobs { limit: args.limit })
        .map_err(refusal)?
    {
        Response::Jobs { records, skipped } => (records, skipped),
        other => return Err(unexpected(&other)),
    };
    for why in &skipped {
        let _ = writeln!(messages, "gputune: {why}");
    }
    let price = user_price(config_dir, messages);
    reprice(&mut records, price.as_ref());
    if args.json {
        crate::text::write_json_pretty(&mut *out, &records)?;
        writeln!(out)?;
        return Ok(());
    }
    if records.is_empty() {
        writeln!(
            out,
            "No job has ended on this node since the daemon began keeping records."
        )?;
        return Ok(());
    }
    write_table(&records, out)?;
    writeln!(
        out,
        "{}",
        whose_price(&records, client.welcome().job_price.is_some())
    )?;
    Ok(())
}

/// Connects to the daemon, which keeps the records.
pub(crate) fn connect(socket: &SocketChoice, label: &str) -> anyhow::Result<TuningClient> {
    let Some(path) = socket.daemon_path() else {
        bail!(
            "Job records are kept by the gputune daemon, and GPUTUNE_SOCKET is empty (never use one): unset it, or point it at the daemon's socket."
        );
    };
    connect_daemon(&path, label).map_err(|error| {
        anyhow!("{error} Job records are kept by the gputune daemon of the node that ran the job.")
    })
}

/// Costs each record at the user's own price, when they set one.
pub(crate) fn reprice(records: &mut [JobRecord], price: Option<&Price>) {
    if let Some(price) = price {
        for record in records {
            record.cost = Some(price.job_cost(record.energy_j));
        }
    }
}

/// The line under the table: whose price the cost is at, or how to set one.
pub(crate) fn whose_price(records: &[JobRecord], daemon_has_price: bool) -> String {
    match records.iter().find_map(|record| record.cost.as_ref()) {
        Some(cost) => format!("Cost at {}.", cost.from),
        None if daemon_has_price => "These jobs ended before the daemon had a price.".to_string(),
        None => format!("No price is set: {COST_HINT}."),
    }
}

fn write_table(records: &[JobRecord], out: &mut dyn Write) -> std::io::Result<()> {
    let header = [
        "JOB", "USER", "NODE", "START", "DURATION", "GPUS", "KWH", "COST", "CO2",
    ];
    let rows: Vec<[String; 9]> = records.iter().map(row).collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    writeln!(out, "{}", line(&header.map(str::to_string)))?;
    for row in &rows {
        writeln!(out, "{}", line(row))?;
    }
    Ok(())
}

fn row(record: &JobRecord) -> [String; 9] {
    let cost = record.cost.as_ref();
    let money = cost
        .and_then(|cost| Some(format_money(cost.cost?, cost.price.currency.as_deref()?)))
        .unwrap_or_else(|| "-".to_string());
    let co2 = cost
        .and_then(|cost| cost.co2_kg)
        .map_or_else(|| "-".to_string(), format_co2);
    let kwh = format_kwh(record.energy_j / JOULES_PER_KWH);
    [
        crate::text::printable(&record.job.job_id),
        crate::text::printable(&record.job.user),
        crate::text::printable(&record.node),
        gputune_formats::units::local_time(record.started_at_ms, "%Y-%m-%d %H:%M"),
        gputune_formats::units::duration_s(
            record.ended_at_ms.saturating_sub(record.started_at_ms) as f64 / 1000.0,
        ),
        record.gpus.len().to_string(),
        if record.energy_estimated {
            format!("{kwh} (est.)")
        } else {
            kwh
        },
        money,
        co2,
    ]
}
