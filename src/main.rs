//! gputune's entry point: parses the command line, then opens the window or runs a subcommand.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gputune_core::device::sim::{LoadPattern, SimOptions, SimScenario};
use gputune_core::device::{BackendChoice, BackendOptions, open_backend};

/// Monitor, tune and plan NVIDIA GPUs for model training.
#[derive(Debug, Parser)]
#[command(name = "gputune", version, about)]
struct Cli {
    /// The window's sampling interval, 100 to 5000 ms (default: what it used last time, else 500).
    #[arg(long, value_name = "MS")]
    interval_ms: Option<u64>,
    /// Which GPUs to talk to: NVML when it works (else the simulator), NVML only, or the simulator.
    #[arg(long, global = true, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// Path of libnvidia-ml (for WSL or non-standard driver installs); several separated by
    /// `:` load the first that exists.
    #[arg(long, global = true, env = "GPUTUNE_NVML_LIB", value_name = "PATH")]
    nvml_lib: Option<PathBuf>,
    /// The gputune daemon's socket, also GPUTUNE_SOCKET (default: /run/gputune/gputune.sock
    /// when a daemon listens there, else the engine runs in this process; an empty
    /// GPUTUNE_SOCKET never uses a daemon).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Machine the simulator plays.
    #[arg(long, global = true, value_enum, default_value_t = SimScenario::Rtx4090, help_heading = SIMULATOR_HEADING)]
    sim_scenario: SimScenario,
    /// Workload the simulator runs.
    #[arg(long, global = true, value_enum, default_value_t = LoadPattern::Training, help_heading = SIMULATOR_HEADING)]
    sim_load: LoadPattern,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Where `--help` lists the simulator's options: after the everyday ones, apart.
const SIMULATOR_HEADING: &str = "Simulator (no NVIDIA GPU, or --backend sim)";

#[derive(Debug, Subcommand)]
enum Command {
    /// Print every GPU's identity, limits and current readings.
    Status {
        /// Print JSON: {"backend": "nvml"|"sim", "gpus": [...]}.
        #[arg(long)]
        json: bool,
        /// Only this GPU: an index or a UUID.
        #[arg(long, value_name = "UUID|INDEX")]
        gpu: Option<String>,
    },
    /// Change power limit, clock locks, clock offsets or fans; with --try, for a while, then revert.
    Apply(Box<gputune_core::cli::apply::ApplyArgs>),
    /// Run a command with a profile applied (and its fan curve followed), then restore and report.
    Run(Box<gputune_core::cli::run::RunArgs>),
    /// Find the power limit (and clock cap) at which your training job does the most work per
    /// joule: steps through settings while it runs, measures its own speed, recommends one.
    Sweep(Box<gputune_core::cli::sweep::SweepArgs>),
    /// Does this GPU still compute correctly? A checked tensor-core, FMA and VRAM load at the
    /// card's settings (or a profile's, put back afterwards): 0 wrong results or not.
    ///
    /// Exit status: 0 stable, 1 unstable, 2 nothing checked, 130 stopped (Ctrl-C, SIGTERM).
    Stability(Box<gputune_core::cli::stability::StabilityArgs>),
    /// Find the largest stable clock offset (undervolt) at a clock lock: step, check, confirm.
    ///
    /// Exit status: 0 an offset confirmed stable, 1 none was, 2 nothing checked, 130 stopped
    /// (Ctrl-C, SIGTERM).
    Scan(Box<gputune_core::cli::scan::ScanArgs>),
    /// Test every card's PCIe link under load and the copies between host and cards and
    /// card to card (P2P or through the host), each checked bit for bit: what the box's links
    /// mean for a data-parallel job. Changes no setting.
    ///
    /// Exit status: 0 every copy right, 1 a copy came back wrong, 2 could not test.
    Links(Box<gputune_core::cli::links::LinksArgs>),
    /// Will a training run fit, and how to set it up: memory breakdown, micro-batch, strategies.
    Plan(Box<gputune_core::cli::plan::PlanArgs>),
    /// Save, list, apply and manage tuning profiles (one TOML file each).
    Profile(Box<gputune_core::cli::profile::ProfileArgs>),
    /// Fan curves the gputune daemon keeps: `fan curve set --point 40:30 --point 85:100`,
    /// `fan curve show`, `fan curve clear`.
    Fan(Box<gputune_core::cli::fan::FanArgs>),
    /// Keep cards at or below a temperature by moving their power limit (the daemon keeps it):
    /// `hold-temp set --gpu 3 --max-c 80 --power 60%..100%`, `hold-temp show`, `hold-temp clear`.
    HoldTemp(Box<gputune_core::cli::hold_temp::HoldTempArgs>),
    /// Append every GPU's readings to a CSV file on a fixed schedule, until Ctrl-C or --duration-s.
    Log {
        /// The CSV file to append to (created with a header when new; never a foreign file).
        #[arg(long, value_name = "FILE")]
        csv: PathBuf,
        /// Time between samples, 100 to 60000 ms.
        #[arg(long, value_name = "MS", default_value_t = gputune_core::cli::log::DEFAULT_INTERVAL_MS)]
        interval_ms: u64,
        /// Stop after this many seconds (default: until Ctrl-C or SIGTERM).
        #[arg(long, value_name = "SECONDS")]
        duration_s: Option<u64>,
        /// Only these GPUs (repeat the option for several): an index or a UUID.
        #[arg(long, value_name = "UUID|INDEX")]
        gpu: Vec<String>,
    },
    /// What the daemon kept while no window was open: each GPU's samples (as CSV) and its
    /// setting changes with who made them.
    History(Box<gputune_core::cli::history::HistoryArgs>),
    /// The scheduler's jobs that ended on this node, as the daemon recorded them: energy,
    /// cost and CO₂ per job; `jobs show ID` for one.
    Jobs(Box<gputune_core::cli::jobs::JobsArgs>),
    /// Serve Prometheus metrics (dcgm-exporter's names, and gputune's own) at
    /// http://127.0.0.1:9400/metrics, from the last reading; until Ctrl-C or SIGTERM.
    Exporter(Box<gputune_core::cli::exporter::ExporterArgs>),
    /// Run the tuning daemon (as root, for the window and the CLI), or `daemon install` it.
    Daemon(Box<gputune_core::cli::daemon::DaemonArgs>),
}

/// Ends with `exit_code` once everything printed is out (0 returns normally).
fn exit_with(exit_code: i32) -> anyhow::Result<()> {
    if exit_code != 0 {
        let _ = std::io::Write::flush(&mut std::io::stdout());
        std::process::exit(exit_code);
    }
    Ok(())
}

/// A check or scan that could not start checked nothing: its sentence, and exit status 2 (1
/// would say "unstable").
fn nothing_checked_is_2(result: anyhow::Result<i32>) -> i32 {
    match result {
        Ok(exit_code) => exit_code,
        Err(error) if is_broken_pipe(&error) => 0,
        Err(error) => {
            eprintln!("gputune: {error}");
            2
        }
    }
}

/// Where a CLI command's log would repeat what the command itself says: the engine's notices
/// (each reaches the command as an event or an error, and is printed as one sentence), a
/// driver call past its deadline (it comes back as the command's error), and the NVML
/// fallback (every command says why the simulator stands in). The daemon logs them all.
const SAID_BY_THE_COMMAND: [&str; 3] = [
    "gputune_core::tuning::engine",
    "gputune_core::device::worker",
    "gputune_core::device",
];

fn main() -> ExitCode {
    let cli = Cli::parse();
    let is_daemon = matches!(cli.command, Some(Command::Daemon(_)));
    init_logging(is_daemon);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("gputune: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The log on stderr. The daemon's is the record of what it did to the cards: it says more by
/// default. A command prints one sentence per problem, so its log (warnings and errors by
/// default) leaves out the events that sentence already carries; `GPUTUNE_LOG` shows them.
fn init_logging(is_daemon: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};

    let asked = std::env::var_os("GPUTUNE_LOG").is_some_and(|value| !value.is_empty());
    let default_filter = if is_daemon {
        "error,gputune=info,gputune_core=info"
    } else {
        "error,gputune=warn,gputune_core=warn"
    };
    let filter =
        EnvFilter::try_from_env("GPUTUNE_LOG").unwrap_or_else(|_| EnvFilter::new(default_filter));
    // Exact targets: the engine's own submodules (a journal that cannot be written) still log.
    let repeated = tracing_subscriber::filter::filter_fn(move |metadata| {
        is_daemon || asked || !SAID_BY_THE_COMMAND.contains(&metadata.target())
    });
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(repeated)
        .with_filter(filter);
    tracing_subscriber::registry().with(layer).init();
}

/// A reader that stopped reading (`gputune status | head`) is not an error worth a message.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    let io_kind = match error.downcast_ref::<serde_json::Error>() {
        Some(json) => json.io_error_kind(),
        None => error
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind),
    };
    io_kind == Some(std::io::ErrorKind::BrokenPipe)
}

fn run(mut cli: Cli) -> anyhow::Result<()> {
    if cli.socket.is_none() {
        cli.socket = std::env::var_os(gputune_core::service::client::SOCKET_ENV).map(PathBuf::from);
    }
    let options = BackendOptions {
        choice: cli.backend,
        nvml_library_path: cli.nvml_lib.clone(),
        sim: SimOptions {
            scenario: cli.sim_scenario,
            load: cli.sim_load,
        },
    };
    let tuning = gputune_core::cli::connect::TuningOptions {
        backend: options.clone(),
        socket: gputune_core::service::client::SocketChoice::from_option(cli.socket.as_deref()),
        // The one place the folders' variables are read (GPUTUNE_STATE_DIR, …, SUDO_UID).
        folders: gputune_core::folders::Folders::from_env(),
    };
    // Commands that only read restore what a killed gputune left changed before anything else;
    // the ones that tune do it as their engine starts.
    if matches!(
        cli.command,
        Some(Command::Status { .. } | Command::Log { .. })
    ) {
        for notice in gputune_core::tuning::engine::restore_left_changes(&options, &tuning.folders)
        {
            eprintln!("gputune: {}: {notice}", notice.level_word());
        }
    }
    match cli.command {
        Some(Command::Apply(args)) => gputune_core::cli::apply::run_command(&args, &tuning),
        None => gputune::ui::run_window(tuning, cli.interval_ms),
        Some(Command::Status { json, gpu }) => status(&options, &tuning, json, gpu.as_deref()),
        Some(Command::History(args)) => {
            let stdout = std::io::stdout();
            gputune_core::cli::history::run(&args, &tuning.socket, &mut stdout.lock())
        }
        Some(Command::Jobs(args)) => {
            let stdout = std::io::stdout();
            gputune_core::cli::jobs::run(
                &args,
                &tuning.socket,
                tuning.folders.config_dir.as_deref(),
                &mut stdout.lock(),
                &mut std::io::stderr(),
            )
        }
        Some(Command::Plan(args)) => {
            let stdout = std::io::stdout();
            gputune_core::cli::plan::run(&args, &options, &mut stdout.lock())
        }
        Some(Command::Log {
            csv,
            interval_ms,
            duration_s,
            gpu,
        }) => {
            let request =
                gputune_core::cli::log::LogRequest::new(csv, interval_ms, duration_s, gpu)?;
            let mut opened = open_backend(&options)?;
            if let Some(reason) = &opened.fallback_reason {
                eprintln!("gputune: notice: logging the simulated GPU: {reason}");
            }
            gputune_core::cli::log::run(opened.backend.as_mut(), &request)
        }
        Some(Command::Profile(args)) => gputune_core::cli::profile::run_command(&args, &tuning),
        Some(Command::Fan(args)) => gputune_core::cli::fan::run_command(&args, &tuning),
        Some(Command::HoldTemp(args)) => gputune_core::cli::hold_temp::run_command(&args, &tuning),
        Some(Command::Daemon(args)) => {
            gputune_core::cli::daemon::run_command(&args, &options, cli.socket.clone())
        }
        Some(Command::Exporter(args)) => gputune_core::cli::exporter::run_command(&args, &tuning),
        Some(Command::Sweep(args)) => {
            let exit_code = gputune_core::cli::sweep::run_command(&args, &tuning)?;
            if exit_code != 0 {
                let _ = std::io::Write::flush(&mut std::io::stdout());
                std::process::exit(exit_code);
            }
            Ok(())
        }
        Some(Command::Stability(args)) => exit_with(nothing_checked_is_2(
            gputune_core::cli::stability::run_command(&args, &tuning),
        )),
        Some(Command::Links(args)) => exit_with(nothing_checked_is_2(
            gputune_core::cli::links::run_command(&args, &options),
        )),
        Some(Command::Scan(args)) => exit_with(nothing_checked_is_2(
            gputune_core::cli::scan::run_command(&args, &tuning),
        )),
        Some(Command::Run(args)) => {
            let exit_code = gputune_core::cli::run::run_command(&args, &tuning)?;
            if exit_code != 0 {
                // The command's own status, passed through; everything is restored by now.
                let _ = std::io::Write::flush(&mut std::io::stdout());
                std::process::exit(exit_code);
            }
            Ok(())
        }
    }
}

/// `gputune status`: the cards read here, with what the daemon says holds them.
fn status(
    options: &BackendOptions,
    tuning: &gputune_core::cli::connect::TuningOptions,
    json: bool,
    gpu: Option<&str>,
) -> anyhow::Result<()> {
    let opened = open_backend(options)?;
    let mut worker =
        gputune_core::device::worker::DeviceWorker::start(opened.backend, "gputune-status");
    let stdout = std::io::stdout();
    // A simulated GPU lives in this process: no daemon holds it.
    let tunings = if opened.fallback_reason.is_some()
        || options.choice == gputune_core::device::BackendChoice::Sim
    {
        Default::default()
    } else {
        gputune_core::cli::status::daemon_tunings(&tuning.socket)
    };
    gputune_core::cli::status::run(
        &mut worker,
        opened.fallback_reason.as_deref(),
        gpu,
        json,
        &gputune_core::cli::status::SetBy {
            daemon: &tunings,
            folders: &tuning.folders,
        },
        &mut stdout.lock(),
        &mut std::io::stderr(),
    )
}
