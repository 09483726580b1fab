//! The processes on each GPU: listed by the real NVML backend through the fake libnvidia-ml
//! (pid, VRAM, compute or graphics, user and command from /proc), a process that ended, many
//! processes, a card that does not list them; the simulator's training job; the sampler's
//! readings; `gputune status --json` and its text.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::FakeMachine;
use serde_json::Value;

use crate::common;
use gputune_core::device::Backend;
use gputune_core::device::nvml::NvmlBackend;
use gputune_core::device::sim::{
    LoadPattern, SIM_FIRST_PID, SIM_USER, SimBackend, SimOptions, SimScenario,
};
use gputune_core::link::{Link, LinkEvent};
use gputune_core::service::client::SocketChoice;
use gputune_formats::card::{GpuProcess, ProcessKind};

const MIB: u64 = 1 << 20;

/// A `sleep` the test owns: a real process for NVML to list, killed when dropped.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(
            Command::new("sleep")
                .arg("300")
                .spawn()
                .unwrap_or_else(|error| panic!("sleep starts: {error}")),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Ends the process and reaps it: its pid is gone from /proc.
    fn end(mut self) -> u32 {
        let pid = self.pid();
        let _ = self.0.kill();
        let _ = self.0.wait();
        pid
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This user's name, as the backend should find it.
fn my_user_name() -> String {
    match nix::unistd::User::from_uid(nix::unistd::getuid()) {
        Ok(Some(user)) => user.name,
        _ => nix::unistd::getuid().to_string(),
    }
}

fn open(machine: &FakeMachine) -> NvmlBackend {
    NvmlBackend::open(Some(&machine.library))
        .unwrap_or_else(|error| panic!("the fake library opens: {error}"))
}

fn processes(backend: &mut dyn Backend, gpu: u32) -> Vec<GpuProcess> {
    match backend.processes(gpu) {
        Ok(Some(processes)) => processes,
        other => panic!("GPU {gpu} lists its processes: {other:?}"),
    }
}

#[test]
fn compute_and_graphics_processes_are_listed_with_pid_vram_kind_user_and_command() {
    let machine = FakeMachine::new("rtx4090", "");
    let job = Sleeper::start();
    let me = std::process::id();
    machine.register_process(0, job.pid(), ProcessKind::Compute, Some(20_480));
    machine.register_process(0, me, ProcessKind::ComputeAndGraphics, Some(300));
    let mut backend = open(&machine);
    let listed = processes(&mut backend, 0);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let (first, second) = (&listed[0], &listed[1]);
    assert_eq!(first.pid, job.pid(), "most VRAM first");
    assert_eq!(first.kind, ProcessKind::Compute);
    assert_eq!(first.used_memory_bytes, Some(20_480 * MIB));
    assert_eq!(first.command.as_deref(), Some("sleep 300"));
    assert_eq!(first.user.as_deref(), Some(my_user_name().as_str()));
    assert!(!first.exited);
    assert_eq!(second.pid, me);
    assert_eq!(second.kind, ProcessKind::ComputeAndGraphics);
    assert_eq!(second.used_memory_bytes, Some(300 * MIB));
    let this_binary = std::env::current_exe()
        .ok()
        .and_then(|path| {
            path.file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| panic!("this test binary has a name"));
    assert!(
        second.command_text().contains(&this_binary),
        "this test binary ({this_binary}): {second:?}"
    );
    let telemetry = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        telemetry.processes, None,
        "the sampler fills them, not telemetry()"
    );
}

#[test]
fn a_process_that_ended_before_proc_was_read_shows_as_exited() {
    let machine = FakeMachine::new("rtx4090", "");
    let pid = Sleeper::start().end();
    machine.register_process(0, pid, ProcessKind::Compute, Some(1_024));
    let mut backend = open(&machine);
    let listed = processes(&mut backend, 0);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].pid, pid);
    assert!(listed[0].exited);
    assert_eq!(listed[0].command_text(), "(exited)");
    assert_eq!(listed[0].used_memory_bytes, Some(1_024 * MIB));
    assert!(backend.telemetry(0).is_ok(), "nothing else breaks");
}

#[test]
fn many_processes_are_all_listed_most_vram_first() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    // Pids above the kernel's largest (2^22): listed by the driver, gone from /proc.
    for number in 0..100u32 {
        machine.register_process(
            3,
            10_000_000 + number,
            ProcessKind::Compute,
            Some(u64::from(number) * 10),
        );
    }
    machine.register_process(3, 20_000_000, ProcessKind::Graphics, None);
    let mut backend = open(&machine);
    let listed = processes(&mut backend, 3);
    assert_eq!(listed.len(), 101);
    assert_eq!(listed[0].pid, 10_000_099);
    assert_eq!(listed[99].pid, 10_000_000);
    assert_eq!(
        listed[100].used_memory_bytes, None,
        "VRAM not available comes last"
    );
    assert!(listed.iter().all(|process| process.exited));
    assert!(processes(&mut backend, 2).is_empty(), "other GPUs run none");
}

#[test]
fn a_card_that_does_not_list_processes_reports_none() {
    let machine = FakeMachine::new("rtx4090", "processes_not_supported");
    machine.register_process(0, std::process::id(), ProcessKind::Compute, Some(100));
    let mut backend = open(&machine);
    assert_eq!(backend.processes(0), Ok(None));
    assert!(backend.telemetry(0).is_ok());
}

#[test]
fn a_lost_gpu_is_an_error_not_an_empty_list() {
    let machine = FakeMachine::new("rtx4090", "gpu_lost_after=30");
    let mut backend = open(&machine);
    let mut result = backend.processes(0);
    for _ in 0..20 {
        if result.is_err() {
            break;
        }
        result = backend.processes(0);
    }
    assert!(
        matches!(result, Err(ref error) if error.is_fatal()),
        "{result:?}"
    );
}

#[test]
fn the_simulated_training_job_runs_one_worker_per_gpu() {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        load: LoadPattern::Training,
    });
    for gpu in 0..8 {
        let listed = processes(&mut backend, gpu);
        assert_eq!(listed.len(), 1);
        let worker = &listed[0];
        assert_eq!(worker.pid, SIM_FIRST_PID + gpu);
        assert_eq!(worker.kind, ProcessKind::Compute);
        assert_eq!(worker.user.as_deref(), Some(SIM_USER));
        assert!(worker.command_text().contains("train.py"));
        let used = worker.used_memory_bytes.unwrap_or(0);
        assert!((20 * 1024 * MIB..22 * 1024 * MIB).contains(&used), "{used}");
    }
    let mut idle = SimBackend::new(&SimOptions {
        scenario: SimScenario::Rtx4090,
        load: LoadPattern::Idle,
    });
    assert!(processes(&mut idle, 0).is_empty());
}

#[test]
fn the_sampler_hands_out_each_gpus_processes_with_its_readings() {
    let machine = FakeMachine::new("rtx4090", "");
    let job = Sleeper::start();
    machine.register_process(0, job.pid(), ProcessKind::Compute, Some(8_192));
    let options = common::daemon::window_options(&machine, SocketChoice::None);
    let link = Link::spawn(options, 100, || {}).unwrap_or_else(|error| panic!("{error}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    while seen < 3 {
        assert!(Instant::now() < deadline, "samples with processes arrive");
        for event in link.drain_events() {
            if let LinkEvent::Samples(readings) = event {
                let reading = readings[0]
                    .as_ref()
                    .unwrap_or_else(|error| panic!("{error}"));
                let listed = reading.processes.as_deref().unwrap_or_default();
                assert_eq!(
                    listed.len(),
                    1,
                    "every sample carries the list: {reading:?}"
                );
                assert_eq!(listed[0].pid, job.pid());
                assert_eq!(listed[0].used_memory_bytes, Some(8_192 * MIB));
                seen += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status_json(machine: &FakeMachine) -> Value {
    let output = machine.gputune(&["--backend", "nvml", "status", "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("JSON: {error}"))
}

#[test]
fn status_json_has_a_processes_array_per_gpu() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let job = Sleeper::start();
    let gone = Sleeper::start().end();
    machine.register_process(5, job.pid(), ProcessKind::Compute, Some(21_000));
    machine.register_process(5, gone, ProcessKind::Graphics, Some(64));
    let report = status_json(&machine);
    let gpus = report["gpus"].as_array().cloned().unwrap_or_default();
    assert_eq!(gpus.len(), 8);
    for (index, gpu) in gpus.iter().enumerate() {
        let listed = gpu["processes"].as_array().cloned().unwrap_or_default();
        if index != 5 {
            assert!(listed.is_empty(), "GPU {index}: {listed:?}");
            continue;
        }
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0]["pid"], job.pid());
        assert_eq!(listed[0]["kind"], "compute");
        assert_eq!(listed[0]["used_memory_bytes"], 21_000 * MIB);
        assert_eq!(listed[0]["user"], my_user_name());
        assert_eq!(listed[0]["command"], "sleep 300");
        assert_eq!(listed[0]["exited"], false);
        assert_eq!(listed[1]["pid"], gone);
        assert_eq!(listed[1]["kind"], "graphics");
        assert_eq!(listed[1]["exited"], true);
        assert_eq!(listed[1]["command"], Value::Null);
    }
    let text = machine.gputune(&["--backend", "nvml", "status", "--gpu", "5"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("Processes    pid {}", job.pid())),
        "{text}"
    );
    assert!(
        text.contains("21000 MiB") && text.contains("sleep 300"),
        "{text}"
    );
    assert!(text.contains("(exited)"), "{text}");
}

#[test]
fn status_json_says_null_when_a_card_does_not_list_processes() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let output = machine
        .command(&["--backend", "nvml", "status", "--json"])
        .env(nvidia_ml_fake::FAULTS_ENV, "processes_not_supported")
        .output()
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(output.status.success());
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    assert_eq!(report["gpus"][0]["processes"], Value::Null);
    let idle = FakeMachine::for_processes("rtx4090", "idle");
    assert_eq!(
        status_json(&idle)["gpus"][0]["processes"],
        Value::Array(vec![])
    );
}

#[test]
fn status_names_the_session_holding_a_gpu_and_marks_its_job_among_the_processes() {
    use common::daemon::Daemon;
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    std::fs::create_dir_all(machine.config_dir().join("profiles")).expect("a profile folder");
    std::fs::write(
        machine.config_dir().join("profiles").join("cool.toml"),
        format!(
            "schema_version = 1\nname = \"Cool\"\n[card]\nuuid = \"{}\"\nname = \"NVIDIA GeForce RTX 4090\"\npci_bus_id = \"\"\n\n[power_limit]\npercent_of_default = 66.7\nwatts = 300.0\n",
            machine.uuid(0)
        ),
    )
    .expect("the profile is written");
    let mut run = common::process::spawn_piped(daemon.client(
        &machine,
        // A launcher (the job) whose child uses the GPU, as torchrun's workers do.
        &[
            "run",
            "--profile",
            "Cool",
            "--",
            "sh",
            "-c",
            "sleep 300 & wait",
        ],
    ));
    run.wait_for_line("applied the profile");
    let status = |arguments: &[&str]| {
        let mut words = vec!["--backend", "nvml", "status"];
        words.extend_from_slice(arguments);
        let output = daemon
            .client(&machine, &words)
            .output()
            .unwrap_or_else(|error| panic!("status runs: {error}"));
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let session = loop {
        let report: Value = serde_json::from_str(&status(&["--json"])).unwrap_or(Value::Null);
        let session = report["gpus"][0]["sessions"][0].clone();
        if session["job_pid"].is_u64() {
            break session;
        }
        assert!(
            Instant::now() < deadline,
            "the run's session never showed: {session}\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(session["purpose"], "run");
    assert!(
        session["by"]
            .as_str()
            .is_some_and(|by| by.starts_with("gputune run")),
        "{session}"
    );
    assert!(session["energy_used_mj"].is_u64(), "{session}");
    // The job and the worker it started use the GPU: the driver lists both, and status marks
    // both as the session's job.
    let job_pid = session["job_pid"].as_u64().unwrap_or_default() as u32;
    let worker_pid = child_of(job_pid);
    machine.register_process(0, job_pid, ProcessKind::Compute, Some(18_000));
    machine.register_process(0, worker_pid, ProcessKind::Compute, Some(4_000));
    let text = status(&[]);
    assert!(
        text.lines()
            .any(|line| line.contains("Session      run holding the")
                && line.contains("by gputune run")),
        "{text}"
    );
    for pid in [job_pid, worker_pid] {
        assert!(
            text.lines().any(|line| line.contains(&format!("pid {pid}"))
                && line.ends_with("(the session's job)")),
            "{text}"
        );
    }
    let report: Value = serde_json::from_str(&status(&["--json"])).unwrap_or(Value::Null);
    let worker = report["gpus"][0]["processes"]
        .as_array()
        .and_then(|listed| listed.iter().find(|process| process["pid"] == worker_pid))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(worker["ancestor_pids"][0], job_pid, "{worker}");
    let _ = run.child.kill();
    // Without a daemon, no session is known and none is said.
    let quiet = machine.gputune(&["--backend", "nvml", "status", "--json"]);
    let report: Value = serde_json::from_slice(&quiet.stdout).unwrap_or(Value::Null);
    assert_eq!(report["gpus"][0]["sessions"], Value::Null);
}

/// The one child of `parent` (waited for: a shell starts it a moment after it starts).
fn child_of(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let children: Vec<u32> = std::fs::read_dir("/proc")
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|pid| {
                        std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
                            status
                                .lines()
                                .any(|line| line == format!("PPid:\t{parent}"))
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let [child] = children[..] {
            return child;
        }
        assert!(
            Instant::now() < deadline,
            "{parent} never started its child: {children:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
