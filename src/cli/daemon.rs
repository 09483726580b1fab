//! `gputune daemon`: runs the tuning daemon (what `gputuned.service` starts), or with
//! `install` writes that unit. See `daemon` for what it does.

use std::path::PathBuf;
use std::time::Duration;

use crate::daemon::install::{InstallArgs, run_install};
use crate::daemon::{
    DEFAULT_GROUP, DEFAULT_RUNTIME_DIR, DEFAULT_STATE_DIR, DaemonOptions, SOCKET_NAME, run,
};
use crate::device::BackendOptions;

/// `gputune daemon`.
#[derive(Debug, Clone, clap::Args)]
pub struct DaemonArgs {
    #[command(subcommand)]
    pub command: Option<DaemonCommand>,
    /// The group whose members may change settings (the socket's group).
    #[arg(long, default_value = DEFAULT_GROUP)]
    pub group: String,
    /// Where the socket, journals and clock-lock records go (default: $RUNTIME_DIRECTORY, else
    /// /run/gputune).
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// Where boot defaults are kept (default: $STATE_DIRECTORY, else /var/lib/gputune).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// How long to wait for the NVIDIA driver at start, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub driver_wait_s: u64,
    /// Also serve Prometheus metrics at http://ADDR:PORT/metrics (e.g. 127.0.0.1:9400; off by
    /// default). See docs/metrics.md.
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::metrics::parse_listen)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Hours of history kept on disk (one sample a second per GPU, 3.46 MB per GPU-day, in
    /// the state folder's `history/`), shown by the window when it opens; 0 keeps none.
    #[arg(long, value_name = "HOURS", default_value_t = crate::telemetry::store::DEFAULT_KEEP_HOURS,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(crate::telemetry::store::KEEP_HOURS_RANGE.1)))]
    pub history_hours: u32,
}

/// What `gputune daemon` does besides running.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DaemonCommand {
    /// Write /etc/systemd/system/gputuned.service and create the gputune group (needs root).
    Install(InstallArgs),
}

/// Runs `gputune daemon ...`. `socket` is `--socket` / `GPUTUNE_SOCKET`, when given.
pub fn run_command(
    args: &DaemonArgs,
    backend: &BackendOptions,
    socket: Option<PathBuf>,
) -> anyhow::Result<()> {
    if let Some(DaemonCommand::Install(install)) = &args.command {
        let stdout = std::io::stdout();
        return run_install(
            install,
            backend.nvml_library_path.as_deref(),
            &mut stdout.lock(),
        );
    }
    let from_env = |name: &str, default: &str| {
        std::env::var_os(name)
            .filter(|value| !value.is_empty())
            // systemd may list several folders; the first is ours.
            .and_then(|value| {
                value
                    .to_str()
                    .and_then(|text| text.split(':').next())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from(default))
    };
    let runtime_dir = args
        .runtime_dir
        .clone()
        .unwrap_or_else(|| from_env("RUNTIME_DIRECTORY", DEFAULT_RUNTIME_DIR));
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| from_env("STATE_DIRECTORY", DEFAULT_STATE_DIR));
    let socket = socket
        .filter(|path| !path.as_os_str().is_empty())
        .unwrap_or_else(|| runtime_dir.join(SOCKET_NAME));
    run(&DaemonOptions {
        backend: backend.clone(),
        socket,
        group: args.group.clone(),
        runtime_dir,
        state_dir,
        driver_wait: Duration::from_secs(args.driver_wait_s.min(3_600)),
        metrics_listen: args.metrics_listen,
        history_hours: args.history_hours,
    })
}
