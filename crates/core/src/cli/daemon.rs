//! `gputune daemon`: runs the tuning daemon (what `gputuned.service` starts), or with
//! `install` / `uninstall` sets it up or takes it away. See `daemon` for what it does.

use std::path::PathBuf;
use std::time::Duration;

use crate::daemon::install::{InstallArgs, UninstallArgs, UserToAdd, run_install, run_uninstall};
use crate::daemon::{
    DEFAULT_GROUP, DEFAULT_RUNTIME_DIR, DEFAULT_STATE_DIR, DaemonOptions, SOCKET_NAME, run,
};
use crate::device::BackendOptions;
use crate::job::as_user::{self, RunAs, SudoEnvironment};

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
    /// Make this profile file every GPU's boot default as the daemon starts (a cluster node's
    /// profile; an empty file clears them), converted to each card as `profile default` does.
    #[arg(long, value_name = "FILE")]
    pub boot_profile: Option<PathBuf>,
    /// The electricity price and CO₂ per kWh that job records are costed at (a TOML file:
    /// price_per_kwh, currency, co2_grams_per_kwh).
    #[arg(long, value_name = "PATH", default_value = crate::job_energy::cost::DEFAULT_COST_CONFIG)]
    pub cost_config: PathBuf,
}

/// What `gputune daemon` does besides running.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DaemonCommand {
    /// Set up the daemon in one step (needs root): copy this binary to
    /// /usr/local/libexec/gputune, write gputuned.service, create the gputune group, add the
    /// user who ran sudo to it, enable and start the service.
    Install(InstallArgs),
    /// Stop and disable the daemon and remove its unit and binary (needs root).
    Uninstall(UninstallArgs),
}

/// Runs `gputune daemon ...`. `socket` is `--socket` / `GPUTUNE_SOCKET`, when given.
pub fn run_command(
    args: &DaemonArgs,
    backend: &BackendOptions,
    socket: Option<PathBuf>,
) -> anyhow::Result<()> {
    match &args.command {
        Some(DaemonCommand::Install(install)) => {
            // Resolved before anything changes: a sudo environment naming nobody real refuses.
            let user = if install.print {
                UserToAdd::Nobody
            } else {
                user_to_add(install.user.as_deref(), &SudoEnvironment::from_env())?
            };
            let stdout = std::io::stdout();
            return run_install(
                install,
                backend.nvml_library_path.as_deref(),
                &user,
                &mut stdout.lock(),
            );
        }
        Some(DaemonCommand::Uninstall(uninstall)) => {
            let stdout = std::io::stdout();
            return run_uninstall(uninstall, &mut stdout.lock());
        }
        None => {}
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
        boot_profile: args.boot_profile.clone(),
        cost_config: args.cost_config.clone(),
    })
}

/// Who `daemon install` adds to the group: `--user NAME`, else the user who ran sudo
/// (`SUDO_UID`, else `SUDO_USER`, read as `run` reads them), else nobody. It must be a real
/// account other than root; anything else refuses the install before it changes anything.
pub fn user_to_add(named: Option<&str>, sudo: &SudoEnvironment) -> anyhow::Result<UserToAdd> {
    const NAME_IT: &str = "nothing was installed; name the user with --user NAME";
    let account = match named {
        Some(name) => lookup_name(name, "--user")?,
        None => match as_user::decide(true, sudo) {
            Err(_) => anyhow::bail!(
                "sudo's SUDO_UID/SUDO_USER name no real user, so who to add to the gputune group is unknown; {NAME_IT}."
            ),
            Ok(RunAs::Unchanged) => return Ok(UserToAdd::Nobody),
            Ok(RunAs::Name(name)) => lookup_name(&name, "SUDO_USER")?,
            Ok(RunAs::Uid(uid)) => nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .ok_or_else(|| {
                    anyhow::anyhow!("There is no user with uid {uid} (SUDO_UID); {NAME_IT}.")
                })?,
        },
    };
    if account.uid.is_root() {
        anyhow::bail!(
            "{} is root, who needs no group to tune; {NAME_IT}.",
            crate::text::printable(&account.name)
        );
    }
    Ok(UserToAdd::Named(account.name))
}

fn lookup_name(name: &str, source: &str) -> anyhow::Result<nix::unistd::User> {
    nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "There is no user named \"{}\" ({source}); nothing was installed; name the user with --user NAME.",
                crate::text::printable(name)
            )
        })
}
