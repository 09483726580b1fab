//! nvitop, the monitor people compare gputune with, runs unmodified on the fake libnvidia-ml:
//! `nvitop -1` finds the library through LD_LIBRARY_PATH (nvidia-ml-py loads
//! `libnvidia-ml.so.1`), prints each GPU and a registered process, and no traceback (every
//! NVML function it calls exists and answers as the card would).
//!
//! nvitop comes from PyPI: `bash .ci/setup test` installs it in a virtual environment at
//! `${XDG_CACHE_HOME:-$HOME/.cache}/gputune-tests/nvitop-venv`; `GPUTUNE_NVITOP` names another
//! nvitop executable. Without one the test fails, saying how to get it, unless
//! `GPUTUNE_SKIP_NVITOP=1` says to skip it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use common::FakeMachine;
use common::process::spawn_piped;

use crate::common;
use gputune_formats::card::ProcessKind;

/// Names the nvitop executable to run.
const NVITOP_ENV: &str = "GPUTUNE_NVITOP";
/// Set to 1 to skip these tests (with a message) where nvitop cannot be installed.
const SKIP_ENV: &str = "GPUTUNE_SKIP_NVITOP";

/// The nvitop to run, `None` (after saying why) when the tests are to be skipped.
fn nvitop() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(NVITOP_ENV).filter(|path| !path.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{NVITOP_ENV}={} is not a file",
            path.display()
        );
        return Some(path);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")));
    let installed = cache.map(|cache| cache.join("gputune-tests/nvitop-venv/bin/nvitop"));
    if let Some(path) = installed.filter(|path| path.is_file()) {
        return Some(path);
    }
    if std::env::var(SKIP_ENV).is_ok_and(|value| value == "1") {
        eprintln!(
            "SKIPPED: nvitop is not installed and {SKIP_ENV}=1: the fake libnvidia-ml was not \
             checked against nvitop"
        );
        return None;
    }
    panic!(
        "nvitop is not installed. Run `bash .ci/setup test` (it installs nvitop from PyPI into \
         ~/.cache/gputune-tests/nvitop-venv), or `python3 -m venv /tmp/nvitop-venv && \
         /tmp/nvitop-venv/bin/pip install nvitop` and set {NVITOP_ENV}=/tmp/nvitop-venv/bin/nvitop; \
         or set {SKIP_ENV}=1 to skip this test"
    );
}

/// A folder where the fake is `libnvidia-ml.so.1` (and `.so`), for LD_LIBRARY_PATH.
fn library_folder(machine: &FakeMachine) -> tempfile::TempDir {
    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    for name in ["libnvidia-ml.so.1", "libnvidia-ml.so"] {
        std::os::unix::fs::symlink(&machine.library, folder.path().join(name))
            .unwrap_or_else(|error| panic!("{name}: {error}"));
    }
    folder
}

/// A real process for the fake to list, ended when dropped.
struct Job(Child);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `nvitop -1` on `machine`; returns what it printed, checked for errors.
fn run_nvitop(nvitop: &Path, machine: &FakeMachine) -> String {
    let folder = library_folder(machine);
    let mut command = Command::new(nvitop);
    command
        .arg("-1")
        .env("LD_LIBRARY_PATH", folder.path())
        .env("COLUMNS", "120")
        .env("TERM", "xterm");
    for (name, value) in machine.environment() {
        command.env(name, value);
    }
    let (status, stdout, stderr) = spawn_piped(command).finish();
    let printed = format!("{stdout}\n{stderr}");
    assert!(status.success(), "nvitop -1 failed ({status}):\n{printed}");
    for bad in [
        "Traceback",
        "FunctionNotFound",
        "Function Not Found",
        "ERROR",
    ] {
        assert!(!printed.contains(bad), "nvitop printed {bad}:\n{printed}");
    }
    printed
}

#[test]
fn nvitop_shows_the_gpu_and_a_registered_process_without_tracebacks() {
    let Some(nvitop) = nvitop() else { return };
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let job = Job(Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap_or_else(|error| panic!("sleep starts: {error}")));
    let pid = job.0.id();
    machine.register_process(0, pid, ProcessKind::Compute, Some(20_480));
    let printed = run_nvitop(&nvitop, &machine);
    for expected in [
        "GeForce RTX 4090",
        "CUDA Driver Version: 12.6",
        nvidia_ml_fake::DRIVER_VERSION,
        "450W",
        "Default",
        "20.00GiB",
        "sleep 300",
    ] {
        assert!(printed.contains(expected), "no {expected:?} in:\n{printed}");
    }
    let process_line = printed
        .lines()
        .find(|line| line.contains("sleep 300"))
        .unwrap_or_default();
    assert!(
        process_line.contains(&pid.to_string()) && process_line.contains(" C "),
        "the process's line names its pid and compute: {process_line:?}"
    );
}

#[test]
fn nvitop_reads_a_datacenter_card_and_an_eight_gpu_box() {
    let Some(nvitop) = nvitop() else { return };
    let h100 = FakeMachine::for_processes("datacenter-fanless", "training");
    let printed = run_nvitop(&nvitop, &h100);
    assert!(printed.contains("H100 80GB HBM3"), "{printed}");
    assert!(printed.contains("Disabled"), "MIG mode off: {printed}");
    let eight = FakeMachine::for_processes("8x-rtx4090", "idle");
    let printed = run_nvitop(&nvitop, &eight);
    assert_eq!(printed.matches("GeForce RTX 4090").count(), 8, "{printed}");
    assert!(printed.contains("No running processes found"), "{printed}");
}
