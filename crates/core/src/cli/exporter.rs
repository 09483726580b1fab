//! `gputune exporter`: Prometheus metrics at http://ADDR:PORT/metrics for a box without the
//! daemon (with one, it reads through the daemon). The GPUs are read by the service's sampler
//! every `--interval-ms`; each scrape gets the last reading (docs/metrics.md).

use std::net::SocketAddr;

use anyhow::bail;

use super::connect::TuningOptions;
use super::signals::install_stop_signal;
use crate::metrics::{DEFAULT_LISTEN, MetricsEndpoint, parse_listen};
use crate::service::client::{ConnectError, ConnectOptions, TuningClient, connect};
use crate::service::{DEFAULT_INTERVAL_MS, INTERVAL_RANGE_MS};

/// `gputune exporter`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExporterArgs {
    /// Where to serve /metrics: ADDRESS:PORT, or :PORT for every IPv4 address of this machine.
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN, value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// How often the GPUs are read, 100 to 5000 ms; a scrape gets the last reading.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_INTERVAL_MS)]
    pub interval_ms: u64,
}

const LABEL: &str = "gputune exporter";

/// Serves metrics until Ctrl-C or SIGTERM.
pub fn run_command(args: &ExporterArgs, options: &TuningOptions) -> anyhow::Result<()> {
    let (fastest_ms, slowest_ms) = INTERVAL_RANGE_MS;
    if !(fastest_ms..=slowest_ms).contains(&args.interval_ms) {
        bail!(
            "--interval-ms {} is outside {fastest_ms} to {slowest_ms} ms.",
            args.interval_ms
        );
    }
    // Bound first: a port in use is said before the GPUs are opened.
    let listener = crate::metrics::server::bind(args.listen)?;
    let connect_options = ConnectOptions {
        backend: options.backend.clone(),
        socket: options.socket.clone(),
        folders: options.folders.clone(),
        label: LABEL.to_string(),
    };
    let client = connect(&connect_options)?;
    let welcome = client.welcome().clone();
    if let Some(reason) = &welcome.simulated_because {
        bail!(
            "There is no NVIDIA GPU to export ({reason}); add --backend sim to export the simulated GPU."
        );
    }
    for notice in &welcome.notices {
        eprintln!("gputune: {}: {notice}", notice.level_word());
    }
    let stop = install_stop_signal(1)?;
    let reconnect = Box::new(move || reconnect(&connect_options));
    let mut endpoint = MetricsEndpoint::start(listener, client, reconnect, args.interval_ms)?;
    eprintln!(
        "gputune exporter: serving http://{}/metrics ({} GPU(s), {} backend{}, a reading every {} ms); Ctrl-C stops",
        endpoint.address(),
        welcome.gpus.len(),
        welcome.backend.as_str(),
        if welcome.daemon {
            ", through the daemon"
        } else {
            ""
        },
        args.interval_ms
    );
    // Any signal, or its handler gone, ends the exporter.
    let _ = stop.recv();
    eprintln!("gputune exporter: stopping");
    endpoint.stop();
    Ok(())
}

/// Reaches the service again (the daemon restarted); a stand-in simulator is refused.
fn reconnect(options: &ConnectOptions) -> Result<TuningClient, ConnectError> {
    let client = connect(options)?;
    match &client.welcome().simulated_because {
        Some(reason) => Err(ConnectError::Protocol(format!(
            "there is no NVIDIA GPU now ({reason})"
        ))),
        None => Ok(client),
    }
}
