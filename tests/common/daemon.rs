//! A real `gputune daemon` process on the fake libnvidia-ml, with its own socket, runtime and
//! state folders, for tests that drive it with real client processes.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::FakeMachine;
use super::process::PATIENCE;

/// A running daemon; killed (SIGKILL) when dropped.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub runtime_dir: PathBuf,
    pub state_dir: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts a daemon for `machine` and waits until its socket answers.
    pub fn start(machine: &FakeMachine) -> Daemon {
        let base = machine.state_dir().with_file_name("daemon");
        let runtime_dir = base.join("run");
        let state_dir = base.join("state");
        Daemon::start_in(machine, runtime_dir, state_dir)
    }

    /// Starts a daemon with these folders (a restart passes the ones of the daemon before).
    pub fn start_in(machine: &FakeMachine, runtime_dir: PathBuf, state_dir: PathBuf) -> Daemon {
        Daemon::start_full(machine, runtime_dir, state_dir, &[], &[])
    }

    /// Starts a daemon with more arguments (`--group`) and environment (shorter timeouts).
    pub fn start_with(
        machine: &FakeMachine,
        arguments: &[&str],
        environment: &[(&str, &str)],
    ) -> Daemon {
        let base = machine.state_dir().with_file_name("daemon");
        Daemon::start_full(
            machine,
            base.join("run"),
            base.join("state"),
            arguments,
            environment,
        )
    }

    /// Starts a daemon with these folders, more arguments and environment.
    pub fn start_full(
        machine: &FakeMachine,
        runtime_dir: PathBuf,
        state_dir: PathBuf,
        arguments: &[&str],
        environment: &[(&str, &str)],
    ) -> Daemon {
        std::fs::create_dir_all(&runtime_dir).expect("the runtime folder is made");
        let socket = runtime_dir.join("gputune.sock");
        let log = runtime_dir.join(format!(
            "daemon-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_nanos())
        ));
        let log_file = std::fs::File::create(&log).expect("the daemon log is made");
        let mut command = machine.command(&[
            "daemon",
            "--runtime-dir",
            runtime_dir.to_str().expect("a UTF-8 path"),
            "--state-dir",
            state_dir.to_str().expect("a UTF-8 path"),
            "--driver-wait-s",
            "0",
        ]);
        command.args(arguments).envs(environment.iter().copied());
        // Never the admin's /etc/gputune/cost.toml: a price of the test's own, when it writes one.
        if !arguments.contains(&"--cost-config") {
            command
                .arg("--cost-config")
                .arg(runtime_dir.with_file_name("cost.toml"));
        }
        command
            .env("GPUTUNE_SOCKET", &socket)
            .env("GPUTUNE_LOG", "gputune=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let child = command.spawn().expect("the daemon starts");
        let daemon = Daemon {
            child,
            socket,
            runtime_dir,
            state_dir,
            log,
        };
        daemon.wait_until_listening();
        daemon
    }

    fn wait_until_listening(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon never listened; its log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the daemon wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `gputune ARGS` as a client of this daemon.
    pub fn client(&self, machine: &FakeMachine, arguments: &[&str]) -> Command {
        let mut command = machine.command(arguments);
        command.env("GPUTUNE_SOCKET", &self.socket);
        command
    }

    /// Runs `gputune ARGS` as a client to the end; panics with its stderr when it fails.
    /// Returns its stdout.
    pub fn ok(&self, machine: &FakeMachine, arguments: &[&str]) -> String {
        let output = self
            .client(machine, arguments)
            .output()
            .expect("the client runs");
        assert!(
            output.status.success(),
            "{arguments:?}: {}",
            super::text(&output.stderr)
        );
        super::text(&output.stdout)
    }

    /// Runs a client that must fail; returns its stderr.
    pub fn refused(&self, machine: &FakeMachine, arguments: &[&str]) -> String {
        let output = self
            .client(machine, arguments)
            .output()
            .expect("the client runs");
        assert!(
            !output.status.success(),
            "{arguments:?} went through: {}",
            super::text(&output.stdout)
        );
        super::text(&output.stderr)
    }

    /// The window's link to this daemon (sampling every 500 ms); the tests that open the
    /// window add its state (`common_ui::empty_state`).
    pub fn open_link(&self, machine: &FakeMachine) -> gputune_core::link::Link {
        gputune_core::link::Link::spawn(
            window_options(
                machine,
                gputune_core::service::client::SocketChoice::Path(self.socket.clone()),
            ),
            500,
            || {},
        )
        .expect("the link starts")
    }

    /// The daemon's journal for GPU `gpu` (in its runtime folder).
    pub fn journal(&self, machine: &FakeMachine, gpu: usize) -> PathBuf {
        self.runtime_dir
            .join("state")
            .join(format!("journal-{}.json", machine.uuid(gpu)))
    }

    /// SIGTERM, and waits for the daemon to end; returns its exit code.
    pub fn stop(mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the daemon did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, as the OOM killer would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The folders this daemon runs in, for the next one to start in (a restart).
    pub fn folders(&self) -> DaemonFolders {
        DaemonFolders {
            runtime_dir: self.runtime_dir.clone(),
            state_dir: self.state_dir.clone(),
        }
    }
}

/// A daemon's runtime and state folders, kept across its restart.
#[derive(Debug, Clone)]
pub struct DaemonFolders {
    pub runtime_dir: PathBuf,
    pub state_dir: PathBuf,
}

impl DaemonFolders {
    /// A daemon started in these folders: what the one before left (journals, boot
    /// defaults, history) is its to find.
    pub fn start(&self, machine: &FakeMachine) -> Daemon {
        Daemon::start_in(machine, self.runtime_dir.clone(), self.state_dir.clone())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `condition` holds (polling every 10 ms); returns how long it took. Fails after
/// the common patience, which only matters when something is broken.
pub fn wait_until(what: &str, condition: impl Fn() -> bool) -> Duration {
    wait_within(what, PATIENCE, Duration::from_millis(10), condition)
}

/// [`wait_until`] with its own patience and polling interval (a test that times what it waits
/// for polls more often).
pub fn wait_within(
    what: &str,
    patience: Duration,
    poll: Duration,
    condition: impl Fn() -> bool,
) -> Duration {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < patience, "never: {what}");
        std::thread::sleep(poll);
    }
    started.elapsed()
}

/// `gputune apply` that tunes a card the way a user would: a power limit, both clock locks,
/// both offsets and manual fans. Every ending of a session must bring back exactly this.
pub const TUNE: [&str; 13] = [
    "apply",
    "--power-limit",
    "400W",
    "--lock-gpu-clocks",
    "210,2520",
    "--lock-mem-clocks",
    "405,10501",
    "--gpu-clock-offset",
    "150",
    "--mem-clock-offset",
    "500",
    "--fan-speed",
    "60",
];

/// Every control, set otherwise than [`TUNE`].
pub const TRIAL: [&str; 12] = [
    "--power-limit",
    "70%",
    "--lock-gpu-clocks",
    "300,2000",
    "--lock-mem-clocks",
    "405,5001",
    "--gpu-clock-offset",
    "0",
    "--mem-clock-offset",
    "0",
    "--fan-speed",
    "80",
];

/// `gputune apply --try SECONDS` of [`TRIAL`], with no baseline to wait for.
pub fn trial_arguments(seconds: &str) -> Vec<&str> {
    let mut arguments = vec!["apply", "--try", seconds, "--baseline-s", "0"];
    arguments.extend(TRIAL);
    arguments
}

/// How the window (its link) reaches `socket` on `machine`'s fake library.
pub fn window_options(
    machine: &FakeMachine,
    socket: gputune_core::service::client::SocketChoice,
) -> gputune_core::service::client::TuningOptions {
    gputune_core::service::client::TuningOptions {
        backend: gputune_core::device::BackendOptions {
            choice: gputune_core::device::BackendChoice::Nvml,
            nvml_library_path: Some(machine.library.clone()),
            ..gputune_core::device::BackendOptions::default()
        },
        socket,
        folders: machine.folders(),
    }
}
