//! `gputune plan --measure` end to end: real processes on the fake libnvidia-ml. The stand-in
//! job (tests/examples/fake_training_memory.rs) holds 2048 MiB + 1536 MiB per sample as its own
//! process in the fake's list, prints a tqdm bar, and runs out of memory past the card (the
//! simulator's RTX 4090: 24 564 MiB). Each test has its own machine and runs beside the others.
//! The window's runner runs the same engine: `plan_measure_runner.rs`.

use std::path::PathBuf;

use common::FakeMachine;
use serde_json::Value;

use crate::common;

pub(crate) const MIB: u64 = 1024 * 1024;
pub(crate) const FIXED_MIB: u64 = 2048;
pub(crate) const PER_SAMPLE_MIB: u64 = 1536;
const CARD_MIB: u64 = 24_564;
/// (24 564 − 2048) / 1536 = 14.7: micro-batch 14 holds 23 552 MiB, 15 would need 25 088.
pub(crate) const LARGEST_THAT_FITS: u64 = 14;

pub(crate) fn fake_job() -> PathBuf {
    let examples = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("examples")))
        .expect("the test binary is in target/*/deps");
    let path = examples.join("fake_training_memory");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it, `cargo test --all-targets` does not (run `cargo build --examples` first, as .ci/run does)",
        path.display()
    );
    path
}

/// `gputune plan --measure --json ARGS -- fake_training_memory --micro-batch {mb} JOB_ARGS`.
fn measure(machine: &FakeMachine, arguments: &[&str], job_arguments: &[&str]) -> (i32, Value) {
    let job = fake_job().display().to_string();
    let mut words: Vec<&str> = vec!["plan", "--measure", "--json"];
    words.extend(arguments);
    words.extend(["--", &job, "--micro-batch", "{mb}", "--rate", "50"]);
    words.extend(job_arguments);
    let output = machine.gputune(&words);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!(
            "plan --measure --json printed no JSON ({error}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), report)
}

/// Whether `pid` is a live process (a zombie waiting to be reaped is not).
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// No process the job registered with the fake is still running.
pub(crate) fn assert_nothing_left_running(machine: &FakeMachine) {
    for process in machine.state().processes {
        assert!(
            !is_running(process.pid),
            "the job's process {} still runs",
            process.pid
        );
    }
}

fn runs(report: &Value) -> Vec<(u64, String, Option<u64>)> {
    report["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| {
            (
                run["micro_batch"].as_u64().expect("micro_batch"),
                // Changed in 0.2: the result is an object tagged "type", its reason beside it.
                run["result"]["type"].as_str().expect("result").to_string(),
                run["peak_bytes"].as_u64(),
            )
        })
        .collect()
}

#[test]
fn two_micro_batches_give_the_jobs_cost_per_sample_and_confirm_runs_the_largest() {
    let machine = FakeMachine::for_processes("rtx4090", "idle");
    let (status, report) = measure(
        &machine,
        &["--micro-batches", "2,4", "--steps", "5", "--confirm"],
        &[],
    );
    assert_eq!(status, 0, "{report:#}");
    assert_eq!(report["gpu_memory_bytes"].as_u64(), Some(CARD_MIB * MIB));
    // Each run's peak is what the job held at that size.
    assert_eq!(
        runs(&report),
        vec![
            (
                2,
                "measured".to_string(),
                Some((FIXED_MIB + 2 * PER_SAMPLE_MIB) * MIB)
            ),
            (
                4,
                "measured".to_string(),
                Some((FIXED_MIB + 4 * PER_SAMPLE_MIB) * MIB)
            ),
            (
                LARGEST_THAT_FITS,
                "measured".to_string(),
                Some((FIXED_MIB + LARGEST_THAT_FITS * PER_SAMPLE_MIB) * MIB)
            ),
        ],
        "{report:#}"
    );
    let fit = &report["fit"];
    assert_eq!(fit["per_sample_bytes"].as_u64(), Some(PER_SAMPLE_MIB * MIB));
    assert_eq!(fit["fixed_bytes"].as_u64(), Some(FIXED_MIB * MIB));
    assert_eq!(fit["max_micro_batch"].as_u64(), Some(LARGEST_THAT_FITS));
    assert_eq!(report["confirmed"], Value::Bool(true));
    // Each run read its steps from the bar and was stopped there, not at the job's 60 s end.
    for run in report["runs"].as_array().expect("runs") {
        assert!(
            run["steps_read"].as_u64().is_some_and(|steps| steps >= 5),
            "{run}"
        );
        assert!(run["seconds"].as_f64().is_some_and(|s| s < 50.0), "{run}");
    }
}

#[test]
fn progress_only_the_users_regex_reads_counts_the_steps_as_the_sweeps_does() {
    let machine = FakeMachine::for_processes("rtx4090", "idle");
    let (status, report) = measure(
        &machine,
        &[
            "--micro-batches",
            "2,4",
            "--steps",
            "5",
            "--progress-regex",
            r"batch (?P<count>\d+) done",
        ],
        &["--own-progress"],
    );
    assert_eq!(status, 0, "{report:#}");
    for run in report["runs"].as_array().expect("runs") {
        assert_eq!(run["result"]["type"], "measured", "{run}");
        assert!(
            run["steps_read"].as_u64().is_some_and(|steps| steps >= 5),
            "{run}"
        );
        // Stopped at its steps, not at the job's own 60 s end.
        assert!(run["seconds"].as_f64().is_some_and(|s| s < 50.0), "{run}");
    }
    assert_eq!(
        report["fit"]["per_sample_bytes"].as_u64(),
        Some(PER_SAMPLE_MIB * MIB)
    );
    // A regex that reads nothing gputune can use is refused before any run.
    let output = machine.gputune(&[
        "plan",
        "--measure",
        "--progress-regex",
        r"batch \d+",
        "--",
        "true",
        "{mb}",
    ]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--progress-regex needs a named group"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn an_out_of_memory_size_is_a_result_whether_the_job_says_so_or_fills_the_card() {
    let machine = FakeMachine::for_processes("rtx4090", "idle");
    // 20 samples need 32 768 MiB: the job prints CUDA's out-of-memory error and exits 1.
    let (status, report) = measure(
        &machine,
        &["--micro-batches", "1,3,20", "--steps", "3"],
        &[],
    );
    assert_eq!(status, 0, "{report:#}");
    let measured = runs(&report);
    assert_eq!(measured[2].0, 20);
    assert_eq!(measured[2].1, "out_of_memory", "{report:#}");
    assert!(
        report["runs"][2]["result"]["because"]
            .as_str()
            .is_some_and(|because| because.contains("out of memory")),
        "{report:#}"
    );
    assert_eq!(
        report["fit"]["max_micro_batch"].as_u64(),
        Some(LARGEST_THAT_FITS)
    );
    assert_eq!(
        report["fit"]["per_sample_bytes"].as_u64(),
        Some(PER_SAMPLE_MIB * MIB)
    );

    // A job that fills the card without a word (and runs on in a child process, as under a
    // launcher): its memory reaching the card's is the out-of-memory result, and the run is
    // stopped there rather than after its steps.
    let (status, report) = measure(
        &machine,
        &["--micro-batches", "16", "--seconds", "60"],
        &["--silent-oom", "--in-child"],
    );
    // Only an out-of-memory run: nothing fits as measured.
    assert_eq!(status, 3, "{report:#}");
    let measured = runs(&report);
    assert_eq!(measured[0].1, "out_of_memory", "{report:#}");
    assert_eq!(measured[0].2, Some(CARD_MIB * MIB));
    assert!(
        report["runs"][0]["seconds"]
            .as_f64()
            .is_some_and(|s| s < 50.0)
    );
    assert!(
        report["no_fit"]
            .as_str()
            .is_some_and(|why| why.contains("No run finished"))
    );
    // The launcher's child that held the card was stopped with it.
    assert_nothing_left_running(&machine);
}

#[test]
fn a_job_that_ignores_sigterm_is_killed_after_the_grace_with_its_children() {
    let machine = FakeMachine::for_processes("rtx4090", "idle");
    let (status, report) = measure(
        &machine,
        &["--micro-batches", "1,2", "--steps", "3"],
        &["--ignore-sigterm", "--in-child"],
    );
    assert_eq!(status, 0, "{report:#}");
    assert_eq!(
        report["fit"]["per_sample_bytes"].as_u64(),
        Some(PER_SAMPLE_MIB * MIB)
    );
    assert_eq!(
        machine.state().processes.len(),
        2,
        "both runs' jobs held the card"
    );
    assert_nothing_left_running(&machine);
}

#[test]
fn with_the_plans_options_the_measurement_is_set_against_the_plan() {
    let machine = FakeMachine::for_processes("rtx4090", "idle");
    let (status, report) = measure(
        &machine,
        &[
            "--micro-batches",
            "1,2",
            "--steps",
            "3",
            "--model",
            "gpt2",
            "--seq-len",
            "512",
        ],
        &[],
    );
    assert_eq!(status, 0, "{report:#}");
    let plan = &report["plan"];
    let compared = plan["runs"].as_array().expect("plan runs");
    assert_eq!(compared.len(), 2, "{report:#}");
    for run in compared {
        let measured = run["measured_bytes"].as_f64().expect("measured");
        let planned = run["planned_bytes"].as_f64().expect("planned");
        let pct = run["difference_pct"].as_f64().expect("pct");
        assert!(((planned - measured) / measured * 100.0 - pct).abs() < 1e-6);
    }
    let differences: Vec<&str> = plan["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        differences
            .iter()
            .any(|line| line.starts_with("Per sample")),
        "{differences:?}"
    );
    assert!(
        differences.iter().any(|line| line.contains("CUDA context")),
        "{differences:?}"
    );
}

#[test]
fn a_command_without_the_placeholder_is_measured_once_and_bad_options_refused_before_any_run() {
    let machine = FakeMachine::for_processes("rtx4090", "idle");
    let job = fake_job().display().to_string();
    let output = machine.gputune(&[
        "plan",
        "--measure",
        "--steps",
        "3",
        "--",
        &job,
        "--micro-batch",
        "3",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("peak 6656 MiB"), "{stdout}");
    assert!(stdout.contains("{mb}"), "{stdout}");

    let output = machine.gputune(&[
        "plan",
        "--measure",
        "--micro-batches",
        "2,4",
        "--",
        &job,
        "--micro-batch",
        "3",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("{mb}"));
    // A model the plan cannot load is refused before the job starts (a fresh machine: the
    // runs above left their stopped jobs in the fake's list).
    let fresh = FakeMachine::for_processes("rtx4090", "idle");
    let output = fresh.gputune(&[
        "plan",
        "--measure",
        "--model",
        "no-such-model",
        "--",
        &job,
        "--micro-batch",
        "{mb}",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        !fresh.state_path().exists() || fresh.state().processes.is_empty(),
        "no job ran"
    );
}

#[test]
fn ctrl_c_stops_the_job_and_ends_the_measurement_as_interrupted() {
    let machine = FakeMachine::for_processes("rtx4090", "idle");
    let job = fake_job().display().to_string();
    let gputune = machine
        .command(&[
            "plan",
            "--measure",
            "--json",
            "--seconds",
            "120",
            "--",
            &job,
            "--micro-batch",
            "{mb}",
            "--in-child",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("gputune starts");
    // The job is on the card (registered by its child) before the interrupt.
    common::daemon::wait_until("the job holds the card", || {
        machine.state_path().exists() && !machine.state().processes.is_empty()
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(gputune.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT is sent");
    let output = gputune.wait_with_output().expect("gputune ends");
    assert_eq!(output.status.code(), Some(130));
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report is JSON");
    assert_eq!(
        report["runs"].as_array().map(Vec::len),
        Some(1),
        "{report:#}"
    );
    assert_eq!(
        report["runs"][0]["result"]["because"], "interrupted",
        "{report:#}"
    );
    assert_eq!(report["interrupted"], true, "{report:#}");
    assert_nothing_left_running(&machine);
}
