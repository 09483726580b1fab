//! The daemon's costs, for docs/architecture.md: a request's round trip through the socket
//! (and the same request to an engine in the process, for comparison), how soon a killed
//! client's trial is put back, and the daemon's CPU and memory when idle. Real processes on
//! the fake libnvidia-ml.
//!
//! `cargo bench --bench daemon` measures; `cargo test --bench daemon` (and CI) runs a short
//! smoke version of each.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gputune_core::device::{BackendChoice, BackendOptions};
use gputune_core::service::client::{ConnectOptions, SocketChoice, TuningClient, connect};
use gputune_formats::protocol::{Request, Response};
use gputune_formats::tuning::GpuChange;

struct Setup {
    _folder: tempfile::TempDir,
    folder: PathBuf,
    library: PathBuf,
    gputune: PathBuf,
}

impl Setup {
    fn command(&self, arguments: &[&str], state_file: bool) -> Command {
        let mut command = Command::new(&self.gputune);
        command
            .args(arguments)
            .env("GPUTUNE_NVML_LIB", &self.library)
            .env("GPUTUNE_STATE_DIR", self.folder.join("state"))
            .env("GPUTUNE_RECORD_DIR", self.folder.join("state"))
            .env("GPUTUNE_CONFIG_DIR", self.folder.join("config"))
            .env("GPUTUNE_SOCKET", self.socket())
            .env("FAKE_NVML_SCENARIO", "rtx4090")
            .env_remove("FAKE_NVML_FAULTS")
            .env_remove("FAKE_NVML_FAULTS_FILE")
            .stdin(Stdio::null());
        if state_file {
            command.env("FAKE_NVML_STATE", self.state_file());
        } else {
            command.env_remove("FAKE_NVML_STATE");
        }
        command
    }

    fn socket(&self) -> PathBuf {
        self.folder.join("run").join("gputune.sock")
    }

    fn state_file(&self) -> PathBuf {
        self.folder.join("fake-state.json")
    }

    fn start_daemon(&self, state_file: bool) -> Child {
        let run = self.folder.join("run");
        let child = self
            .command(
                &[
                    "daemon",
                    "--runtime-dir",
                    run.to_str().unwrap_or_default(),
                    "--state-dir",
                    self.folder
                        .join("daemon-state")
                        .to_str()
                        .unwrap_or_default(),
                ],
                state_file,
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("the daemon starts: {error}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(self.socket()).is_err() {
            assert!(Instant::now() < deadline, "the daemon never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    fn client(&self, socket: SocketChoice) -> TuningClient {
        connect(&ConnectOptions {
            backend: BackendOptions {
                choice: BackendChoice::Nvml,
                nvml_library_path: Some(self.library.clone()),
                ..BackendOptions::default()
            },
            socket,
            // An engine in this process (`SocketChoice::None`) keeps its state here, and never
            // in the machine's shared record folder (/run/gputune) when run as root.
            folders: gputune_core::folders::Folders {
                state_dir: Some(self.folder.join("in-process-state")),
                record_dir: Some(self.folder.join("in-process-state")),
                config_dir: None,
            },
            label: "the daemon bench".to_string(),
        })
        .unwrap_or_else(|error| panic!("{error}"))
    }
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// Median, 99th percentile and largest of `samples`, in microseconds.
fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    let at = |fraction: f64| {
        let index = ((samples.len() as f64 - 1.0) * fraction).round() as usize;
        samples[index].as_secs_f64() * 1e6
    };
    format!(
        "median {:.0} µs, p99 {:.0} µs, max {:.0} µs ({} requests)",
        at(0.5),
        at(0.99),
        at(1.0),
        samples.len()
    )
}

fn round_trips(client: &mut TuningClient, uuid: &str, count: usize) -> (String, String) {
    let mut snapshots = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let answer = client.request(Request::Snapshot);
        snapshots.push(started.elapsed());
        assert!(matches!(answer, Ok(Response::Snapshot(_))));
    }
    let mut applies = Vec::with_capacity(count);
    for round in 0..count {
        let power_limit_mw = if round % 2 == 0 { 300_000 } else { 310_000 };
        let started = Instant::now();
        let answer = client.request(Request::Apply {
            changes: vec![GpuChange {
                gpu_uuid: uuid.to_string(),
                settings: vec![gputune_formats::card::Setting::PowerLimit { power_limit_mw }],
            }],
        });
        applies.push(started.elapsed());
        assert!(matches!(answer, Ok(Response::Applied { .. })), "{answer:?}");
    }
    (summary(&mut snapshots), summary(&mut applies))
}

fn power_limit_mw(state_file: &Path) -> Option<u32> {
    let bytes = std::fs::read(state_file).ok()?;
    let state: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    state["machine"]["gpus"][0]["settings"]["power_limit_mw"]
        .as_u64()
        .and_then(|value| u32::try_from(value).ok())
}

/// CPU seconds (user + system) and resident memory of a process.
fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|t| t.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|t| t.parse().ok()).unwrap_or(0);
    let clock_ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0);
    (ticks as f64 / clock_ticks, rss_kib)
}

fn main() {
    let full = std::env::args().any(|argument| argument == "--bench");
    let (requests, kills, idle) = if full {
        (2_000, 10, Duration::from_secs(60))
    } else {
        (20, 1, Duration::from_secs(2))
    };
    let Some(library) = nvidia_ml_fake::fake_library_path() else {
        eprintln!("The fake libnvidia-ml was not built; run `cargo build -p fake-nvml` first.");
        return;
    };
    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let setup = Setup {
        folder: folder.path().to_path_buf(),
        _folder: folder,
        library,
        gputune: PathBuf::from(env!("CARGO_BIN_EXE_gputune")),
    };

    // Round trips, on the fake's in-memory state (NVML itself costs microseconds then).
    let daemon = setup.start_daemon(false);
    let mut client = setup.client(SocketChoice::Path(setup.socket()));
    let uuid = client.welcome().gpus[0].identity.uuid.clone();
    let (snapshot, apply) = round_trips(&mut client, &uuid, requests);
    println!("through the daemon's socket: snapshot {snapshot}");
    println!("through the daemon's socket: apply (one write, read back) {apply}");
    drop(client);

    // The daemon idle: no client, sampling once a second.
    let pid = daemon.id();
    std::thread::sleep(Duration::from_secs(1));
    let (cpu_before, _) = usage(pid);
    let started = Instant::now();
    std::thread::sleep(idle);
    let (cpu_after, rss_kib) = usage(pid);
    println!(
        "daemon idle ({:.0} s, one RTX 4090, sampling at 1 Hz): {:.2} % of one core, {:.1} MiB resident",
        started.elapsed().as_secs_f64(),
        (cpu_after - cpu_before) / started.elapsed().as_secs_f64() * 100.0,
        rss_kib as f64 / 1024.0
    );
    stop(daemon);

    // The same requests to an engine in this process.
    // SAFETY: this bench is single-threaded here; the variables are for the fake library.
    unsafe {
        std::env::set_var("FAKE_NVML_SCENARIO", "rtx4090");
        std::env::remove_var("FAKE_NVML_STATE");
    }
    let mut client = setup.client(SocketChoice::None);
    let (snapshot, apply) = round_trips(&mut client, &uuid, requests);
    println!("in-process engine: snapshot {snapshot}");
    println!("in-process engine: apply {apply}");
    drop(client);

    // A client killed mid-trial: how soon the card is back. The fake's state is a file here,
    // so the bench can watch the card from outside.
    let daemon = setup.start_daemon(true);
    let mut latencies = Vec::new();
    for _ in 0..kills {
        let mut trial = setup
            .command(
                &[
                    "apply",
                    "--power-limit",
                    "300W",
                    "--try",
                    "600",
                    "--baseline-s",
                    "0",
                ],
                true,
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("{error}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        while power_limit_mw(&setup.state_file()) != Some(300_000) {
            assert!(Instant::now() < deadline, "the trial never applied");
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = trial.kill();
        let killed = Instant::now();
        while power_limit_mw(&setup.state_file()) != Some(450_000) {
            assert!(killed.elapsed() < Duration::from_secs(60), "never restored");
            std::thread::sleep(Duration::from_millis(1));
        }
        latencies.push(killed.elapsed());
        let _ = trial.wait();
    }
    latencies.sort();
    println!(
        "client killed mid-trial, card back after: median {:.1} ms, max {:.1} ms ({kills} kills)",
        latencies[latencies.len() / 2].as_secs_f64() * 1e3,
        latencies[latencies.len() - 1].as_secs_f64() * 1e3
    );
    stop(daemon);
}
