//! Shared set-up for tests that run gputune's real NVML code path against the fake
//! libnvidia-ml (tests/fake-nvml).

#![allow(dead_code)]

pub mod canary;
pub mod daemon;
pub mod metrics;
pub mod process;
pub mod programs;
pub mod raw;
pub mod slurm;
pub mod sweep_view;
// The window's helpers are `tests/common/ui.rs`, included as `common_ui` only by the tests
// that open the window: a test that includes only this module links no GUI stack.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use gputune_core::folders::{CONFIG_DIR_ENV, RECORD_DIR_ENV, STATE_DIR_ENV};
use nvidia_ml_fake::FakeState;

/// A process's output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Points every folder gputune (and what it starts) could take from the environment inside
/// `dir`, so a test never reaches the machine's own: tests may run as root, whose defaults are
/// the daemon's socket and record folder (/run/gputune) and root's state and config folders.
/// No daemon unless the test names a socket afterwards.
pub fn keep_inside(command: &mut Command, dir: &std::path::Path) {
    command
        .env(STATE_DIR_ENV, dir.join("gputune-state"))
        .env(CONFIG_DIR_ENV, dir.join("gputune-config"))
        .env(RECORD_DIR_ENV, dir.join("gputune-state"))
        .env("GPUTUNE_SOCKET", "")
        .env_remove("GPUTUNE_INSTALL_ROOT")
        .env_remove("GPUTUNE_LOG");
}

/// A temporary folder for a gputune process that needs no fake machine (the simulator, `plan`,
/// `--help`): its folders are inside it (see [`keep_inside`]).
pub struct Scratch {
    directory: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            directory: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    pub fn path(&self) -> &std::path::Path {
        self.directory.path()
    }

    /// The gputune binary with `arguments`, its folders in this scratch.
    pub fn command(&self, arguments: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gputune"));
        command.args(arguments);
        keep_inside(&mut command, self.directory.path());
        command
    }
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch::new()
    }
}

/// Runs `gputune ARGS` to the end in a scratch folder of its own (see [`Scratch`]).
pub fn gputune_alone(arguments: &[&str]) -> Output {
    let scratch = Scratch::new();
    scratch
        .command(arguments)
        .output()
        .expect("the gputune binary runs")
}

/// The fake reads its configuration from the environment, which is process-wide: tests in one
/// binary that use the fake in-process take turns.
static ENVIRONMENT: Mutex<()> = Mutex::new(());

/// A fake GPU machine in a temporary state file, for this process and for child processes.
pub struct FakeMachine {
    /// Held by machines whose fake runs in this process too; `None` for one only child
    /// processes use (those run side by side).
    _turn: Option<MutexGuard<'static, ()>>,
    directory: tempfile::TempDir,
    pub library: PathBuf,
    pub scenario: &'static str,
    pub faults: String,
    pub load: &'static str,
}

impl FakeMachine {
    pub fn new(scenario: &'static str, faults: &str) -> FakeMachine {
        FakeMachine::with_load(scenario, faults, "training")
    }

    pub fn with_load(scenario: &'static str, faults: &str, load: &'static str) -> FakeMachine {
        let turn = ENVIRONMENT
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let machine = FakeMachine::unlocked(scenario, faults, load, Some(turn));
        for (name, value) in machine.environment() {
            // SAFETY: every test in this binary that touches these variables holds ENVIRONMENT.
            unsafe { std::env::set_var(name, value) };
        }
        machine
    }

    /// A machine that only child processes (started with [`FakeMachine::command`]) use: it
    /// leaves this process's environment alone, so such tests run side by side.
    pub fn for_processes(scenario: &'static str, load: &'static str) -> FakeMachine {
        FakeMachine::unlocked(scenario, "", load, None)
    }

    /// [`FakeMachine::for_processes`] with `faults` (the fake's FAKE_NVML_FAULTS).
    pub fn for_processes_with_faults(scenario: &'static str, faults: &str) -> FakeMachine {
        FakeMachine::unlocked(scenario, faults, "training", None)
    }

    fn unlocked(
        scenario: &'static str,
        faults: &str,
        load: &'static str,
        turn: Option<MutexGuard<'static, ()>>,
    ) -> FakeMachine {
        let library = nvidia_ml_fake::fake_library_path()
            .expect("the fake libnvidia-ml is built by `cargo test` (it is a dev-dependency)");
        let directory = tempfile::tempdir().expect("a temporary directory");
        FakeMachine {
            _turn: turn,
            directory,
            library,
            scenario,
            faults: faults.to_string(),
            load,
        }
    }

    pub fn state_path(&self) -> PathBuf {
        self.directory.path().join("fake-nvml-state.json")
    }

    /// gputune's state folder for this machine (locks, journals, clock-lock records).
    pub fn state_dir(&self) -> PathBuf {
        self.directory.path().join("gputune-state")
    }

    /// gputune's config folder for this machine (profiles).
    pub fn config_dir(&self) -> PathBuf {
        self.directory.path().join("gputune-config")
    }

    /// This machine's folders for an engine or a store in this process: its own state and
    /// config folders, and the clock locks recorded in its state folder (tests may run as
    /// root: never the machine's shared record folder, /run/gputune).
    pub fn folders(&self) -> gputune_core::folders::Folders {
        gputune_core::folders::Folders {
            state_dir: Some(self.state_dir()),
            record_dir: Some(self.state_dir()),
            config_dir: Some(self.config_dir()),
        }
    }

    /// The journal the engine keeps for GPU `gpu` while it changes it temporarily.
    pub fn journal(&self, gpu: usize) -> PathBuf {
        self.state_dir()
            .join(format!("journal-{}.json", self.uuid(gpu)))
    }

    /// GPU `gpu`'s UUID, as the simulator makes it.
    pub fn uuid(&self, gpu: usize) -> String {
        gputune_core::device::sim::SimMachine::new(
            gputune_core::device::sim::SimScenario::from_name(self.scenario)
                .expect("a known scenario"),
            gputune_core::device::sim::LoadPattern::Idle,
            0,
        )
        .gpus[gpu]
            .uuid
            .clone()
    }

    /// Every write the fake driver saw; none when no process touched the driver yet.
    pub fn write_log(&self) -> Vec<nvidia_ml_fake::WriteRecord> {
        if self.state_path().exists() {
            self.state().write_log
        } else {
            Vec::new()
        }
    }

    /// What the fake driver's GPU `gpu` runs now (settings as the "hardware" holds them).
    pub fn settings(&self, gpu: usize) -> gputune_core::device::sim::SimSettings {
        self.state().machine.gpus[gpu].settings.clone()
    }

    /// The power limit GPU `gpu` has now, milliwatts.
    pub fn power_limit_mw(&self, gpu: usize) -> u32 {
        self.state().machine.gpus[gpu].settings.power_limit_mw
    }

    /// The variables that point the fake library at this machine.
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                nvidia_ml_fake::STATE_ENV,
                self.state_path().display().to_string(),
            ),
            (nvidia_ml_fake::SCENARIO_ENV, self.scenario.to_string()),
            (nvidia_ml_fake::FAULTS_ENV, self.faults.clone()),
            (
                nvidia_ml_fake::FAULTS_FILE_ENV,
                self.faults_file().display().to_string(),
            ),
            (nvidia_ml_fake::LOAD_ENV, self.load.to_string()),
        ]
    }

    /// The file of faults every process on this machine reads on each call: write it to break
    /// or slow the driver under processes already running.
    pub fn faults_file(&self) -> PathBuf {
        self.directory.path().join("fake-nvml-faults")
    }

    /// Changes the faults of every process on this machine, running ones included.
    pub fn set_shared_faults(&self, faults: &str) {
        let temporary = self.faults_file().with_extension("tmp");
        std::fs::write(&temporary, faults).expect("the faults file is written");
        std::fs::rename(&temporary, self.faults_file()).expect("the faults file is replaced");
    }

    /// Changes the faults for the calls that follow (the fake reads them on every call): in
    /// this process when the machine holds the turn, and in every process it starts.
    pub fn set_faults(&mut self, faults: &str) {
        self.faults = faults.to_string();
        if self._turn.is_some() {
            // SAFETY: as in `with_load`.
            unsafe { std::env::set_var(nvidia_ml_fake::FAULTS_ENV, faults) };
        }
    }

    /// Makes GPU `gpu` list process `pid` (of `kind`, holding `mib` MiB, `None`: not
    /// available) from the next driver call on, in this process and every other.
    pub fn register_process(
        &self,
        gpu: u32,
        pid: u32,
        kind: gputune_formats::card::ProcessKind,
        mib: Option<u64>,
    ) {
        if !self.state_path().exists() {
            // Created as this machine's scenario, whatever this process's environment says.
            let machine = gputune_core::device::sim::SimMachine::new(
                gputune_core::device::sim::SimScenario::from_name(self.scenario)
                    .expect("a known scenario"),
                serde_json::from_value(serde_json::Value::String(self.load.to_string()))
                    .expect("a known load"),
                gputune_core::clock::wall_clock_ms(),
            );
            nvidia_ml_fake::save_state(self.state_path(), &FakeState::new(machine))
                .expect("the fake state is written");
        }
        let process = nvidia_ml_fake::FakeProcess {
            gpu_index: gpu,
            pid,
            kind,
            used_memory_bytes: mib.map(|mib| mib << 20),
        };
        nvidia_ml_fake::register_process(self.state_path(), process)
            .expect("the process is registered");
    }

    /// The fake "hardware" as it is now: settings, simulated cards and the write log.
    pub fn state(&self) -> FakeState {
        nvidia_ml_fake::load_state(self.state_path()).expect("the fake state file reads back")
    }

    /// The gputune binary, pointed at this machine's fake library and its own state and config
    /// folders, with no daemon (the engine runs in each process) unless a test names a socket.
    pub fn command(&self, arguments: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gputune"));
        command.args(arguments);
        // Its state folder (the clock-lock records too) and config folder.
        keep_inside(&mut command, self.directory.path());
        command.env("GPUTUNE_NVML_LIB", &self.library);
        for (name, value) in self.environment() {
            command.env(name, value);
        }
        command
    }

    /// Runs the gputune binary against this machine's fake library.
    pub fn gputune(&self, arguments: &[&str]) -> Output {
        self.command(arguments)
            .output()
            .expect("the gputune binary runs")
    }
}

impl Drop for FakeMachine {
    fn drop(&mut self) {
        // A machine for child processes only never set them, and must not take them from the
        // machine that holds the turn now (its fake would fall back to an in-memory card).
        if self._turn.is_none() {
            return;
        }
        for name in [
            nvidia_ml_fake::STATE_ENV,
            nvidia_ml_fake::SCENARIO_ENV,
            nvidia_ml_fake::FAULTS_ENV,
            nvidia_ml_fake::FAULTS_FILE_ENV,
            nvidia_ml_fake::LOAD_ENV,
        ] {
            // SAFETY: as in `with_load`; the turn is still held while this runs.
            unsafe { std::env::remove_var(name) };
        }
    }
}
