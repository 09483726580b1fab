//! `gputune daemon`: the tuning service on a Unix socket, run as root by systemd
//! (`gputuned.service`), so the window and the CLI can change settings without root. It owns
//! the one engine, checks each peer's credentials, validates every request again, never runs a
//! program and never loads a library a client names (the NVML library is its own setting).

mod connection;
pub mod install;
mod peer;
mod server;
mod slots;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::device::{BackendOptions, open_backend};
use crate::service::{Service, ServiceOptions};
use crate::telemetry::store::HistoryOptions;
use crate::tuning::engine::{EngineOptions, Ownership};

pub use connection::{HELLO_DEADLINE, IDLE_TIMEOUT, IDLE_TIMEOUT_ENV, WRITE_PATIENCE};
pub use slots::{
    KEPT_FOR_ROOT, KEPT_FOR_WRITERS, MAX_CONNECTIONS, MAX_PER_ROOT, MAX_PER_USER, READER_SLOTS,
    max_per_user,
};

/// The group whose members may change settings through the daemon.
pub const DEFAULT_GROUP: &str = "gputune";
/// Where systemd's `RuntimeDirectory=gputune` is (socket, journals: both end with the boot,
/// like the settings they protect).
pub const DEFAULT_RUNTIME_DIR: &str = "/run/gputune";
/// Where systemd's `StateDirectory=gputune` is (boot defaults, history).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gputune";
/// The folder of the box-check journal in the state folder (`/var/lib/gputune/box-check`).
pub const BOX_JOURNAL_FOLDER: &str = "box-check";
/// The socket's file name in the runtime folder.
pub const SOCKET_NAME: &str = "gputune.sock";

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub backend: BackendOptions,
    pub socket: PathBuf,
    pub group: String,
    /// Journals and clock-lock records (cleared at boot).
    pub runtime_dir: PathBuf,
    /// Boot defaults (kept across boots).
    pub state_dir: PathBuf,
    /// How long to wait for the driver at start (at boot it may come up after the daemon).
    pub driver_wait: Duration,
    /// Where to serve Prometheus metrics, when asked (docs/metrics.md).
    pub metrics_listen: Option<SocketAddr>,
    /// Hours of history kept in `state_dir/history` (0: none).
    pub history_hours: u32,
    /// `--boot-profile FILE`: the profile every card boots with (a cluster node's).
    pub boot_profile: Option<PathBuf>,
    /// The admin's electricity price for job records (`/etc/gputune/cost.toml`).
    pub cost_config: PathBuf,
}

/// Runs the daemon until SIGTERM or SIGINT; every session is put back before it exits.
pub fn run(options: &DaemonOptions) -> anyhow::Result<()> {
    if crate::fsafe::effective_uid() != 0 {
        tracing::warn!(
            "the gputune daemon runs without administrator rights: real GPUs will refuse its writes"
        );
    }
    // Read first, so a bad profile file is said before any card is touched.
    let boot_profile = options
        .boot_profile
        .as_deref()
        .map(crate::service::boot_profile::BootProfile::read)
        .transpose()?;
    // Bound first, so a port in use is said before any card is touched.
    let metrics_listener = options
        .metrics_listen
        .map(crate::metrics::server::bind)
        .transpose()?;
    let opened = open_with_retries(&options.backend, options.driver_wait)?;
    let mut service = Service::start(
        opened,
        ServiceOptions {
            engine: EngineOptions {
                state_dir: options.runtime_dir.join("state"),
                record_dir: None,
                ownership: Ownership::Daemon,
                call_timeout: crate::device::worker::call_timeout_from_env(),
                owner_label: format!("the gputune daemon (pid {})", std::process::id()),
                // The journal must outlive the power cut it reports: not on /run (tmpfs).
                box_journal_dir: Some(options.state_dir.join(BOX_JOURNAL_FOLDER)),
            },
            daemon: true,
            boot_defaults_dir: Some(options.state_dir.join("defaults")),
            write_group: Some(options.group.clone()),
            boot_profile,
            history: (options.history_hours > 0).then(|| HistoryOptions {
                dir: options.state_dir.join("history"),
                keep_hours: options.history_hours,
            }),
            jobs_dir: Some(
                options
                    .state_dir
                    .join(crate::job_energy::store::JOBS_FOLDER),
            ),
            job_price: job_price(&options.cost_config),
        },
    )?;
    for notice in &service.welcome().notices {
        eprintln!("gputune daemon: {}: {notice}", notice.level_word());
    }
    let mut metrics = match metrics_listener {
        Some(listener) => Some(serve_metrics(&service, listener)?),
        None => None,
    };
    let served = server::serve(&service, &options.socket, &options.group);
    if let Some(metrics) = &mut metrics {
        metrics.stop();
    }
    service.stop();
    served
}

/// The admin's price for job records, or none with a line that says why and how to set one.
fn job_price(path: &std::path::Path) -> Option<crate::job_energy::cost::Price> {
    match crate::job_energy::cost::read_cost_file(path) {
        Ok(Some(config)) => Some(crate::job_energy::cost::Price {
            config,
            from: format!("the daemon's {}", path.display()),
        }),
        Ok(None) => {
            eprintln!(
                "gputune daemon: job records carry energy but no cost: no {} (write price_per_kwh, currency and co2_grams_per_kwh there, or name another file with --cost-config, and restart the daemon).",
                path.display()
            );
            None
        }
        Err(why) => {
            eprintln!(
                "gputune daemon: job records carry energy but no cost, because the price cannot be used: {why}"
            );
            None
        }
    }
}

/// The daemon's metrics: a reading client of its own service, in this process.
fn serve_metrics(
    service: &Service,
    listener: std::net::TcpListener,
) -> anyhow::Result<crate::metrics::MetricsEndpoint> {
    let client =
        crate::service::client::attach(service, "the daemon's metrics (--metrics-listen)")?;
    // The service lives as long as the daemon: a lost connection is not reconnected.
    let reconnect = Box::new(|| {
        Err(crate::service::client::ConnectError::Protocol(
            "the daemon's tuning service stopped".to_string(),
        ))
    });
    let endpoint = crate::metrics::MetricsEndpoint::start(
        listener,
        client,
        reconnect,
        crate::service::DEFAULT_INTERVAL_MS,
    )?;
    eprintln!(
        "gputune daemon: serving metrics on http://{}/metrics",
        endpoint.address()
    );
    Ok(endpoint)
}

/// Opens the backend, trying again every 2 s for up to `wait` while the driver is not up.
fn open_with_retries(
    options: &BackendOptions,
    wait: Duration,
) -> anyhow::Result<crate::device::OpenedBackend> {
    let deadline = Instant::now() + wait;
    loop {
        match open_backend(options) {
            Ok(opened) => return Ok(opened),
            Err(error) if Instant::now() < deadline => {
                tracing::warn!("waiting for the NVIDIA driver: {error}");
                std::thread::sleep(Duration::from_secs(2));
            }
            Err(error) => return Err(error.into()),
        }
    }
}
