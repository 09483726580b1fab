//! `gputune log --csv FILE` as a user runs it: against the fake libnvidia-ml (one GPU, eight,
//! a fanless datacenter card, a GPU that is lost) and against the simulator; appending, refusing
//! a foreign file, stopping on SIGTERM, and clear errors for bad requests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::FakeMachine;

use crate::common;
use gputune_core::telemetry::csv::HEADER;
use gputune_formats::throttle::ThrottleReason;

/// The header, spelled out here so a change to the file format is a deliberate one.
const EXPECTED_HEADER: [&str; 22] = [
    "timestamp",
    "index",
    "uuid",
    "name",
    "power.draw [W]",
    "enforced.power.limit [W]",
    "temperature.gpu [C]",
    "fan.speed [%]",
    "clocks.gr [MHz]",
    "clocks.sm [MHz]",
    "clocks.mem [MHz]",
    "utilization.gpu [%]",
    "utilization.memory [%]",
    "memory.used [MiB]",
    "memory.total [MiB]",
    "pstate",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.active",
    "energy.total [J]",
];

/// Columns that hold a plain number whenever the card reports the reading.
const NUMERIC_COLUMNS: [&str; 17] = [
    "index",
    "power.draw [W]",
    "enforced.power.limit [W]",
    "temperature.gpu [C]",
    "fan.speed [%]",
    "clocks.gr [MHz]",
    "clocks.sm [MHz]",
    "clocks.mem [MHz]",
    "utilization.gpu [%]",
    "utilization.memory [%]",
    "memory.used [MiB]",
    "memory.total [MiB]",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "energy.total [J]",
];

/// A parsed log: its header and its rows as maps from column name to field.
struct Log {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Log {
    /// Reads `path` with the csv crate (strict: every row must have the header's field count).
    fn read(path: &Path) -> Log {
        let mut reader = csv::Reader::from_path(path)
            .unwrap_or_else(|error| panic!("{} opens: {error}", path.display()));
        let header = reader
            .headers()
            .unwrap_or_else(|error| panic!("the header reads: {error}"))
            .iter()
            .map(str::to_string)
            .collect();
        let rows = reader
            .records()
            .map(|record| {
                record
                    .unwrap_or_else(|error| panic!("every row is well-formed CSV: {error}"))
                    .iter()
                    .map(str::to_string)
                    .collect()
            })
            .collect();
        Log { header, rows }
    }

    fn column(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|column| column == name)
            .unwrap_or_else(|| panic!("column {name} in {:?}", self.header))
    }

    fn field<'a>(&self, row: &'a [String], name: &str) -> &'a str {
        &row[self.column(name)]
    }

    fn indices(&self) -> Vec<u32> {
        self.rows
            .iter()
            .map(|row| self.field(row, "index").parse().expect("index is a number"))
            .collect()
    }
}

fn gputune_sim(arguments: &[&str]) -> Output {
    crate::common::gputune_alone(arguments)
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "gputune failed: {}",
        stderr_of(output)
    );
}

fn log_path(directory: &tempfile::TempDir, name: &str) -> PathBuf {
    directory.path().join(name)
}

fn text(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

/// Checks every row's fields: timestamps, numbers, P-states and throttle names parse, and the
/// columns in `must_be_present` are filled.
fn assert_fields_parse(log: &Log, must_be_present: &[&str]) {
    assert_eq!(log.header, EXPECTED_HEADER);
    assert_eq!(log.header, HEADER);
    for row in &log.rows {
        let timestamp = log.field(row, "timestamp");
        assert!(
            chrono::DateTime::parse_from_rfc3339(timestamp).is_ok()
                && timestamp.ends_with('Z')
                && timestamp.len() == "2025-01-31T12:00:00.250Z".len(),
            "timestamp {timestamp:?}: RFC 3339 UTC with milliseconds"
        );
        assert!(log.field(row, "uuid").starts_with("GPU-"), "{row:?}");
        for column in NUMERIC_COLUMNS {
            let field = log.field(row, column);
            assert!(
                field.is_empty() || field.parse::<f64>().is_ok_and(|value| value >= 0.0),
                "{column} = {field:?} is a number or empty"
            );
        }
        for column in must_be_present {
            assert!(!log.field(row, column).is_empty(), "{column} in {row:?}");
        }
        let pstate = log.field(row, "pstate");
        assert!(
            pstate.is_empty()
                || pstate
                    .strip_prefix('P')
                    .and_then(|number| number.parse::<u32>().ok())
                    .is_some_and(|number| number <= 15),
            "pstate {pstate:?}"
        );
        let reasons = log.field(row, "clocks_event_reasons.active");
        for name in reasons.split('|').filter(|name| !name.is_empty()) {
            assert!(
                ThrottleReason::from_name(name).is_some(),
                "throttle reason {name:?} in {reasons:?}"
            );
        }
    }
}

#[test]
fn eight_gpus_through_the_fake_library_give_one_row_per_gpu_per_sample() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "eight.csv");
    let output = machine.gputune(&[
        "log",
        "--csv",
        text(&path),
        "--duration-s",
        "2",
        "--interval-ms",
        "200",
    ]);
    assert_success(&output);
    let stderr = stderr_of(&output);
    assert!(
        stderr.starts_with(&format!(
            "Logging 8 GPUs every 200 ms for 2 s to {}; Ctrl-C to stop.\n",
            path.display()
        )),
        "{stderr}"
    );
    let log = Log::read(&path);
    // Every row has the same columns (the reader is strict), and every reading a 4090 reports
    // is filled in.
    assert_fields_parse(
        &log,
        &[
            "power.draw [W]",
            "enforced.power.limit [W]",
            "temperature.gpu [C]",
            "fan.speed [%]",
            "clocks.gr [MHz]",
            "memory.used [MiB]",
            "pstate",
            "energy.total [J]",
        ],
    );
    // About 10 samples (2 s at 200 ms); a slow machine may skip slots, never add any.
    let samples = log.rows.len() / 8;
    assert_eq!(log.rows.len() % 8, 0, "whole samples only");
    assert!((2..=10).contains(&samples), "{samples} samples");
    let indices = log.indices();
    for sample in indices.chunks(8) {
        assert_eq!(sample, [0, 1, 2, 3, 4, 5, 6, 7]);
    }
    let cards = machine.state().machine.gpus;
    for row in &log.rows {
        let index: usize = log.field(row, "index").parse().expect("index");
        assert_eq!(log.field(row, "uuid"), cards[index].uuid);
        assert_eq!(log.field(row, "name"), "NVIDIA GeForce RTX 4090");
        assert_eq!(log.field(row, "memory.total [MiB]"), "24564");
    }
}

#[test]
fn only_the_gpus_asked_for_are_logged_once_each() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "two.csv");
    // The fake creates its state on first use: ask gputune for the UUID, as a user would.
    let status = machine.gputune(&["status", "--json", "--gpu", "6"]);
    assert_success(&status);
    let report: serde_json::Value =
        serde_json::from_slice(&status.stdout).expect("status --json prints JSON");
    let uuid_of_six = report["gpus"][0]["uuid"]
        .as_str()
        .expect("GPU 6 has a UUID")
        .to_string();
    let output = machine.gputune(&[
        "log",
        "--csv",
        text(&path),
        "--duration-s",
        "1",
        "--interval-ms",
        "250",
        "--gpu",
        "3",
        "--gpu",
        &uuid_of_six,
        "--gpu",
        "3",
    ]);
    assert_success(&output);
    assert!(stderr_of(&output).starts_with("Logging 2 GPUs every 250 ms for 1 s"));
    let log = Log::read(&path);
    assert!(!log.rows.is_empty());
    for sample in log.indices().chunks(2) {
        assert_eq!(sample, [3, 6]);
    }
}

#[test]
fn fanless_cards_leave_the_fan_field_empty() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let simulated = log_path(&directory, "sim.csv");
    let output = gputune_sim(&[
        "log",
        "--backend",
        "sim",
        "--sim-scenario",
        "datacenter-fanless",
        "--csv",
        text(&simulated),
        "--duration-s",
        "1",
        "--interval-ms",
        "200",
    ]);
    assert_success(&output);
    assert!(stderr_of(&output).starts_with("Logging 1 simulated GPU every 200 ms"));
    let machine = FakeMachine::new("datacenter-fanless", "");
    let through_nvml = log_path(&directory, "nvml.csv");
    assert_success(&machine.gputune(&[
        "log",
        "--csv",
        text(&through_nvml),
        "--duration-s",
        "1",
        "--interval-ms",
        "200",
    ]));
    for path in [simulated, through_nvml] {
        let log = Log::read(&path);
        assert!(!log.rows.is_empty(), "{}", path.display());
        assert_fields_parse(&log, &["power.draw [W]", "temperature.gpu [C]"]);
        for row in &log.rows {
            assert_eq!(log.field(row, "fan.speed [%]"), "", "{}", path.display());
        }
    }
}

#[test]
fn a_second_run_appends_rows_under_the_same_header() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "appended.csv");
    let arguments = [
        "log",
        "--backend",
        "sim",
        "--csv",
        text(&path),
        "--duration-s",
        "1",
        "--interval-ms",
        "250",
    ];
    assert_success(&gputune_sim(&arguments));
    let first_rows = Log::read(&path).rows.len();
    assert!(first_rows > 0);
    assert_success(&gputune_sim(&arguments));
    let log = Log::read(&path);
    assert_fields_parse(&log, &["power.draw [W]", "fan.speed [%]"]);
    assert!(log.rows.len() > first_rows, "the second run added rows");
    let file = std::fs::read_to_string(&path).expect("the log reads");
    assert_eq!(file.matches("timestamp,").count(), 1, "one header: {file}");
    assert!(file.ends_with('\n'));
}

#[test]
fn a_file_that_is_not_a_gputune_log_is_refused_and_left_untouched() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "results.csv");
    let original = "date,steps\n2025-01-31,5000\n";
    std::fs::write(&path, original).expect("the file writes");
    let output = gputune_sim(&["log", "--backend", "sim", "--csv", text(&path)]);
    assert!(!output.status.success());
    let stderr = stderr_of(&output);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("gputune: ")
            && stderr.contains(&path.display().to_string())
            && stderr.contains("not a gputune telemetry log"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("the file reads"),
        original
    );
}

#[test]
fn sigterm_stops_logging_cleanly_after_a_complete_row() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "until-stopped.csv");
    let scratch = crate::common::Scratch::new();
    let mut child = scratch
        .command(&[
            "log",
            "--backend",
            "sim",
            "--csv",
            text(&path),
            "--interval-ms",
            "100",
        ])
        .env_remove("GPUTUNE_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gputune binary starts");
    // Wait (generously: this is a readiness check, not a timing) for a few rows.
    let give_up_at = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = std::fs::read_to_string(&path)
            .map(|file| file.lines().count())
            .unwrap_or(0);
        if lines >= 3 {
            break;
        }
        if Instant::now() > give_up_at {
            let _ = child.kill();
            panic!("gputune log wrote no rows within a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("the kill command runs");
    assert!(killed.success());
    let output = child.wait_with_output().expect("gputune log ends");
    assert_success(&output);
    let stderr = stderr_of(&output);
    assert!(stderr.contains("Logged "), "{stderr}");
    let file = std::fs::read_to_string(&path).expect("the log reads");
    assert!(file.ends_with('\n'), "the last row is complete");
    let log = Log::read(&path);
    assert!(log.rows.len() >= 2);
    assert_fields_parse(&log, &["power.draw [W]", "energy.total [J]"]);
}

#[test]
fn a_gpu_that_is_lost_is_reported_once_and_logging_stops_when_none_answers() {
    // The fake loses its GPU after some device calls: a few samples get through first.
    let machine = FakeMachine::new("rtx4090", "gpu_lost_after=80");
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "lost.csv");
    let output = machine.gputune(&[
        "log",
        "--csv",
        text(&path),
        "--interval-ms",
        "100",
        // A safety net: were the give-up rule broken, this run would end successfully.
        "--duration-s",
        "60",
    ]);
    assert!(!output.status.success());
    let stderr = stderr_of(&output);
    assert_eq!(
        stderr.matches("could not be read").count(),
        1,
        "one line for the lost GPU, not one per sample: {stderr}"
    );
    assert!(stderr.contains("GPU 0 stopped answering"), "{stderr}");
    let last_line = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last_line,
        format!(
            "gputune: Stopped logging to {}: no GPU could be read for 10 samples in a row.",
            path.display()
        )
    );
    // The rows from before the loss are kept, whole.
    let log = Log::read(&path);
    assert_fields_parse(&log, &["power.draw [W]"]);
}

#[test]
fn an_interval_out_of_range_is_one_sentence_and_creates_no_file() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "never.csv");
    let output = gputune_sim(&[
        "log",
        "--backend",
        "sim",
        "--csv",
        text(&path),
        "--interval-ms",
        "5",
    ]);
    assert!(!output.status.success());
    assert_eq!(
        stderr_of(&output).trim_end(),
        "gputune: The sampling interval must be between 100 and 60000 ms (--interval-ms 5 was given)."
    );
    assert!(!path.exists());
}

#[test]
fn an_unknown_gpu_is_one_sentence_and_creates_no_file() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "never.csv");
    let output = machine.gputune(&["log", "--csv", text(&path), "--gpu", "99"]);
    assert!(!output.status.success());
    assert_eq!(
        stderr_of(&output).trim_end(),
        "gputune: No GPU matches \"99\": give an index (0, 1, ...) or a UUID from `gputune status`."
    );
    assert!(!path.exists());
}

#[test]
fn sample_times_a_slow_read_runs_over_are_counted_and_said() {
    // Every driver call takes 5 ms: a sample of 8 GPUs (a few dozen calls) takes far longer
    // than the 100 ms interval, so sample times are passed over.
    let machine = FakeMachine::new("8x-rtx4090", "slow_ms=5");
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = log_path(&directory, "slow.csv");
    let output = machine.gputune(&[
        "log",
        "--csv",
        text(&path),
        "--duration-s",
        "2",
        "--interval-ms",
        "100",
    ]);
    assert_success(&output);
    let stderr = stderr_of(&output);
    let log = Log::read(&path);
    let samples = (log.rows.len() / 8) as u64;
    assert!(samples < 20, "the fault makes samples slow: {samples}");
    // Said once when it starts, and counted at the end: samples + skipped = the 20 times due.
    assert_eq!(
        stderr
            .matches("longer than the 100 ms interval: the sample times it ran over are skipped")
            .count(),
        1,
        "{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "Logged {samples} samples ({} rows) to ",
            samples * 8
        )),
        "{last}"
    );
    let skipped: u64 = last
        .split("; ")
        .nth(1)
        .and_then(|part| part.split(" of ").next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no skipped count in {last}"));
    assert!(
        last.contains(&format!("{skipped} of 20 sample times were skipped")),
        "{last}"
    );
    assert_eq!(samples + skipped, 20, "{last}");
}
