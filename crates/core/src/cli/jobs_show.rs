//! `gputune jobs show ID`: one job's record as the daemon kept it — each GPU's energy, mean
//! and peak power, peak temperature, time in each throttle reason and the settings it held —
//! with its cost at the user's own price when they set one, else the daemon's.

use std::io::Write;
use std::path::Path;

use crate::cli::connect::{refusal, unexpected};
use crate::cli::jobs::{connect, reprice, whose_price};
use crate::job_energy::cost::{cost_line, user_price};
use crate::service::client::SocketChoice;
use gputune_formats::jobs::JobRecord;
use gputune_formats::protocol::{Request, Response};
use gputune_formats::units::{NOT_AVAILABLE, duration_s, local_time};

/// `gputune jobs show`.
#[derive(Debug, Clone, clap::Args)]
pub struct JobsShowArgs {
    /// The job's id as the scheduler writes it ("4242", an array task "4242_7").
    #[arg(value_name = "ID")]
    pub job_id: String,
    /// Write the record as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `gputune jobs show ID`.
pub fn run(
    args: &JobsShowArgs,
    socket: &SocketChoice,
    config_dir: Option<&Path>,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut client = connect(socket, "gputune jobs show")?;
    let mut record = match client
        .request(Request::Job {
            job_id: args.job_id.clone(),
        })
        .map_err(refusal)?
    {
        Response::Job { record } => *record,
        other => return Err(unexpected(&other)),
    };
    let price = user_price(config_dir, messages);
    reprice(std::slice::from_mut(&mut record), price.as_ref());
    if args.json {
        crate::text::write_json_pretty(&mut *out, &record)?;
        writeln!(out)?;
        return Ok(());
    }
    write_record(&record, client.welcome().job_price.is_some(), out)?;
    Ok(())
}

/// The record in lines for people.
pub fn write_record(
    record: &JobRecord,
    daemon_has_price: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let printable = crate::text::printable;
    writeln!(
        out,
        "Job {} (step {}, {}) of {} (uid {}) on {}",
        printable(&record.job.job_id),
        printable(&record.job.step),
        printable(&record.job.scheduler),
        printable(&record.job.user),
        record.job.uid,
        printable(&record.node)
    )?;
    writeln!(
        out,
        "  {} to {} ({}); ended: {}",
        local_time(record.started_at_ms, "%Y-%m-%d %H:%M:%S"),
        local_time(record.ended_at_ms, "%Y-%m-%d %H:%M:%S"),
        duration_s(record.ended_at_ms.saturating_sub(record.started_at_ms) as f64 / 1000.0),
        printable(record.ended.trim_end_matches('.'))
    )?;
    writeln!(
        out,
        "  {}{}",
        cost_line(record.energy_j, record.cost.as_ref()),
        if record.energy_estimated {
            " (estimated: a card without an energy counter counts power × time)"
        } else {
            ""
        }
    )?;
    for gpu in &record.gpus {
        let watts = |value: Option<f64>| {
            value.map_or_else(|| NOT_AVAILABLE.to_string(), |w| format!("{w:.0} W"))
        };
        writeln!(
            out,
            "  GPU {} {} ({}): {:.1} kJ{}, mean {}, peak {}, peak {}",
            gpu.gpu_index,
            printable(&gpu.name),
            printable(&gpu.gpu_uuid),
            gpu.energy_j / 1000.0,
            if gpu.energy_estimated {
                " (estimated)"
            } else {
                ""
            },
            watts(gpu.mean_power_w),
            watts(gpu.peak_power_w),
            gpu.peak_temperature_c
                .map_or_else(|| NOT_AVAILABLE.to_string(), |c| format!("{c} °C"))
        )?;
        if !gpu.throttle.is_empty() {
            let reasons: Vec<String> = gpu
                .throttle
                .iter()
                .map(|time| format!("{} {}", time.reason.label(), duration_s(time.seconds)))
                .collect();
            writeln!(out, "    throttled: {}", reasons.join(", "))?;
        }
        let held = if gpu.settings_held.is_empty() {
            "nothing".to_string()
        } else {
            crate::tuning::describe_all(&gpu.settings_held)
        };
        writeln!(out, "    held: {held}")?;
    }
    writeln!(
        out,
        "  {}",
        whose_price(std::slice::from_ref(record), daemon_has_price)
    )
}
