//! Energy and cost per job through a real daemon on the fake libnvidia-ml: a scheduler's job
//! session (as the SPANK plugin starts it) ended by its client, and one whose client is
//! killed with SIGKILL, each leave a record in the daemon's `jobs/` folder that `gputune jobs`
//! lists (`--json` too) at the daemon's price or the user's own; files planted in the folder
//! (a symbolic link, a FIFO, a 10 MB file, a damaged one) are skipped with a message; a price
//! file that cannot be used is said by the daemon, which runs on without a cost.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::daemon::{Daemon, wait_until};
use common::raw::Raw;
use common::{FakeMachine, text};

use crate::common;
use gputune_formats::jobs::JobRecord;
use gputune_formats::protocol::{Message, Request, Response};
use gputune_formats::tuning::JobInfo;
use gputune_formats::tuning::{GpuChange, SessionPurpose, SessionRequest};

fn job_request(machine: &FakeMachine, job_id: &str) -> Request {
    Request::StartSession {
        session: SessionRequest {
            purpose: SessionPurpose::Job,
            changes: vec![GpuChange {
                gpu_uuid: machine.uuid(0),
                settings: vec![gputune_formats::card::Setting::PowerLimit {
                    power_limit_mw: 250_000,
                }],
            }],
            fan_curves: Vec::new(),
            job_pid: None,
            job: Some(JobInfo {
                scheduler: "slurm".to_string(),
                job_id: job_id.to_string(),
                step: "batch".to_string(),
                user: "alice".to_string(),
                uid: 1000,
            }),
        },
    }
}

fn response(line: &str) -> Response {
    match serde_json::from_str::<Message>(line) {
        Ok(Message::Response { response, .. }) => response,
        other => panic!("not a response: {other:?} ({line})"),
    }
}

fn record_files(daemon: &Daemon) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(daemon.state_dir.join("jobs"))
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn record_of(daemon: &Daemon, job_id: &str) -> Option<JobRecord> {
    record_files(daemon).into_iter().find_map(|path| {
        let bytes = std::fs::read(&path).ok()?;
        let record: JobRecord = serde_json::from_slice(&bytes).ok()?;
        (record.job.job_id == job_id).then_some(record)
    })
}

fn start_daemon(machine: &FakeMachine, cost: Option<&str>) -> Daemon {
    let base = machine.state_dir().with_file_name("daemon");
    std::fs::create_dir_all(&base).expect("the daemon's folder is made");
    if let Some(cost) = cost {
        std::fs::write(base.join("cost.toml"), cost).expect("the price is written");
    }
    Daemon::start(machine)
}

/// The `socket_abuse` example holding a job session on GPU 0 (`job` kind).
fn job_client(socket: &Path, job_id: u32, uuid: &str) -> std::process::Child {
    Command::new(super::daemon_clients::socket_abuse())
        .args([
            socket.to_str().expect("a UTF-8 path"),
            "job",
            &job_id.to_string(),
            "120",
            uuid,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the job's client starts")
}

#[test]
fn a_job_ended_by_its_client_or_killed_leaves_a_record_that_gputune_jobs_lists() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("a job session needs root (the SPANK plugin runs as root); CI runs as root");
        return;
    }
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = start_daemon(
        &machine,
        Some("price_per_kwh = 0.32\ncurrency = \"€\"\nco2_grams_per_kwh = 380\n"),
    );
    let before_mw = machine.power_limit_mw(0);

    // Ended by its client, as the plugin does at the step's end.
    let mut raw = Raw::connect(&daemon.socket);
    raw.hello("gputune_spank.so (job 4242)");
    let Response::SessionStarted(started) = response(&raw.ask(2, job_request(&machine, "4242")))
    else {
        panic!("the job's session did not start");
    };
    assert_eq!(machine.power_limit_mw(0), 250_000);
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let ended = response(&raw.ask(
        3,
        Request::EndSession {
            session: started.session,
            keep: false,
        },
    ));
    let Response::SessionEnded { report } = ended else {
        panic!("no report: {ended:?}");
    };
    let Some(in_report) = report.job_record else {
        panic!("the report carries no job record");
    };
    assert_eq!(machine.power_limit_mw(0), before_mw);
    let on_disk = record_of(&daemon, "4242").unwrap_or_else(|| {
        panic!(
            "no record of job 4242 in {:?}; the log:\n{}",
            record_files(&daemon),
            daemon.log_text()
        )
    });
    assert_eq!(on_disk, *in_report);
    assert!(
        on_disk.energy_j > 0.0 && !on_disk.energy_estimated,
        "{on_disk:?}"
    );
    let cost = on_disk
        .cost
        .clone()
        .unwrap_or_else(|| panic!("the daemon had a price"));
    assert_eq!(cost.price.currency.as_deref(), Some("€"));
    assert!(cost.from.contains("cost.toml"), "{}", cost.from);
    drop(raw);

    // Its client killed with SIGKILL: the connection drops, the daemon puts back and records.
    let mut client = job_client(&daemon.socket, 4343, &machine.uuid(0));
    let mut said = String::new();
    let stdout = client.stdout.take().expect("its output");
    std::io::BufReader::new(stdout)
        .read_line(&mut said)
        .expect("the job's client says how its start went");
    assert!(said.contains("session_started"), "{said}");
    assert_eq!(machine.power_limit_mw(0), 250_000);
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    client.kill().expect("SIGKILL");
    let _ = client.wait();
    wait_until("the killed job's record is written", || {
        record_of(&daemon, "4343").is_some()
    });
    assert_eq!(machine.power_limit_mw(0), before_mw);
    let killed = record_of(&daemon, "4343").unwrap_or_else(|| panic!("no record of 4343"));
    assert_eq!(killed.ended, "Put back");

    // `gputune jobs --json`: both, newest first, at the daemon's price.
    let listed: Vec<JobRecord> = serde_json::from_str(&daemon.ok(&machine, &["jobs", "--json"]))
        .unwrap_or_else(|error| panic!("gputune jobs --json: {error}"));
    let ids: Vec<&str> = listed.iter().map(|r| r.job.job_id.as_str()).collect();
    assert_eq!(ids, ["4343", "4242"]);
    assert_eq!(listed[1], on_disk);
    let table = daemon.ok(&machine, &["jobs"]);
    assert!(
        table.contains("JOB") && table.contains("4242") && table.contains("€"),
        "{table}"
    );
    assert!(table.contains("Cost at the daemon's"), "{table}");
    let shown = daemon.ok(&machine, &["jobs", "show", "4242"]);
    assert!(
        shown.contains("Job 4242 (step batch, slurm) of alice"),
        "{shown}"
    );
    assert!(shown.contains("held: power limit 250 W"), "{shown}");
    let one: JobRecord =
        serde_json::from_str(&daemon.ok(&machine, &["jobs", "show", "4343", "--json"]))
            .unwrap_or_else(|error| panic!("gputune jobs show --json: {error}"));
    assert_eq!(one, killed);
    eprintln!("gputune jobs:\n{table}\ngputune jobs show 4242:\n{shown}");
    let unknown = daemon.refused(&machine, &["jobs", "show", "777"]);
    assert!(
        unknown.contains("No job 777 is recorded on this node"),
        "{unknown}"
    );

    // The user's own price is what they are shown, and said to be theirs.
    let config = machine.config_dir();
    std::fs::create_dir_all(&config).expect("the config folder is made");
    std::fs::write(
        config.join("cost.toml"),
        "price_per_kwh = 0.15\ncurrency = \"USD\"\n",
    )
    .expect("the user's price is written");
    let theirs = daemon.ok(&machine, &["jobs"]);
    assert!(theirs.contains("USD") && !theirs.contains("€"), "{theirs}");
    assert!(theirs.contains("Cost at your "), "{theirs}");

    // Hostile files in the folder are skipped with a message, never followed or hung on.
    let jobs = daemon.state_dir.join("jobs");
    std::os::unix::fs::symlink("/etc/passwd", jobs.join("job-999999999999999-evil-1.json"))
        .expect("a symlink is planted");
    nix::unistd::mkfifo(
        &jobs.join("job-999999999999998-fifo-2.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("a FIFO is planted");
    std::fs::write(
        jobs.join("job-999999999999997-big-3.json"),
        vec![b' '; 10 * 1024 * 1024],
    )
    .expect("a huge file is planted");
    std::fs::write(
        jobs.join("job-999999999999996-bad-4.json"),
        b"{\"format_version\":",
    )
    .expect("a damaged file is planted");
    let output = daemon
        .client(&machine, &["jobs", "--json"])
        .output()
        .expect("gputune jobs runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let listed: Vec<JobRecord> =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(listed.len(), 2);
    let said = text(&output.stderr);
    for planted in ["evil", "fifo", "big", "bad"] {
        assert!(
            said.lines()
                .any(|line| line.contains("skipped") && line.contains(planted)),
            "{planted}: {said}"
        );
    }
    assert!(
        said.contains("symbolic link") && said.contains("not a regular file"),
        "{said}"
    );
}

#[test]
fn a_price_the_daemon_cannot_use_is_said_and_it_runs_on_without_a_cost() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = start_daemon(&machine, Some("price_per_kwh = 0.3\n"));
    wait_until("the daemon says why it has no price", || {
        daemon.log_text().contains("needs its currency")
    });
    let log = daemon.log_text();
    assert!(
        log.contains("job records carry energy but no cost"),
        "{log}"
    );
    let listed = daemon.ok(&machine, &["jobs"]);
    assert!(listed.contains("No job has ended on this node"), "{listed}");
    drop(daemon);

    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = start_daemon(&machine, None);
    wait_until("the daemon says how to set a price", || {
        daemon.log_text().contains("--cost-config")
    });
}

/// The daemon's resident memory (VmRSS, kB), from /proc.
fn resident_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Eight sessions of `purpose` on the eight cards, one connection each, held for `held`: the
/// daemon's VmRSS 10 s in and at the end, and the connections with their sessions.
fn hold_eight(
    daemon: &Daemon,
    machine: &FakeMachine,
    purpose: SessionPurpose,
    held: std::time::Duration,
) -> (u64, u64, Vec<(Raw, u64)>) {
    let mut connections = Vec::new();
    for gpu in 0..8 {
        let mut raw = Raw::connect(&daemon.socket);
        raw.hello("memory measure");
        let mut request = job_request(machine, &format!("{}", 5000 + gpu));
        if let Request::StartSession { session } = &mut request {
            session.purpose = purpose;
            session.changes[0].gpu_uuid = machine.uuid(gpu);
            if purpose != SessionPurpose::Job {
                session.job = None;
            }
        }
        let Response::SessionStarted(started) = response(&raw.ask(2, request)) else {
            panic!("a session did not start");
        };
        connections.push((raw, started.session));
    }
    let early = std::time::Duration::from_secs(10).min(held);
    std::thread::sleep(early);
    let early_kb = resident_kb(daemon.child.id());
    std::thread::sleep(held - early);
    (early_kb, resident_kb(daemon.child.id()), connections)
}

/// `GPUTUNE_JOB_MEMORY_S=600 cargo test --test service job_records::daemon_memory -- --ignored
/// --nocapture`: the daemon's VmRSS with no session, with eight job sessions held (no readings
/// kept) 10 s in and at the end, after their eight records are written, and with eight `run`
/// sessions held as long (their readings kept) for comparison. Numbers in docs/benchmarks.md.
#[test]
#[ignore = "a measurement: minutes of wall time"]
fn daemon_memory_with_eight_jobs_held_and_recorded() {
    let held = std::time::Duration::from_secs(
        std::env::var("GPUTUNE_JOB_MEMORY_S")
            .ok()
            .and_then(|seconds| seconds.parse().ok())
            .unwrap_or(60),
    );
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let daemon = start_daemon(&machine, Some("price_per_kwh = 0.3\ncurrency = \"€\"\n"));
    std::thread::sleep(std::time::Duration::from_secs(5));
    let idle_kb = resident_kb(daemon.child.id());
    let (jobs_early_kb, jobs_kb, connections) =
        hold_eight(&daemon, &machine, SessionPurpose::Job, held);
    for (mut raw, session) in connections {
        let ended = raw.ask(
            3,
            Request::EndSession {
                session,
                keep: false,
            },
        );
        assert!(ended.contains("session_ended"), "{ended}");
    }
    assert_eq!(record_files(&daemon).len(), 8);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let recorded_kb = resident_kb(daemon.child.id());
    let (runs_early_kb, runs_kb, connections) =
        hold_eight(&daemon, &machine, SessionPurpose::Run, held);
    drop(connections);
    println!(
        "daemon VmRSS, 8 GPUs, sessions held {} s: idle {idle_kb} kB; 8 job sessions {jobs_early_kb} kB at 10 s, {jobs_kb} kB at the end; after their 8 records {recorded_kb} kB; 8 run sessions {runs_early_kb} kB at 10 s, {runs_kb} kB at the end",
        held.as_secs()
    );
    assert!(idle_kb > 0 && jobs_kb > 0);
}

#[test]
fn an_engine_without_the_daemon_says_the_daemon_keeps_job_records() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let mut client = gputune_core::service::client::connect_in_process(
        &gputune_core::service::client::ConnectOptions {
            backend: gputune_core::device::BackendOptions {
                choice: gputune_core::device::BackendChoice::Sim,
                ..Default::default()
            },
            socket: gputune_core::service::client::SocketChoice::from_option(None),
            folders: gputune_core::folders::Folders::inside(folder.path()),
            label: "a test without a daemon".to_string(),
        },
    )
    .unwrap_or_else(|error| panic!("{error}"));
    for request in [
        Request::Jobs { limit: 5 },
        Request::Job {
            job_id: "4242".to_string(),
        },
    ] {
        match client.request(request) {
            Err(gputune_core::service::client::ClientError::Refused(error)) => {
                assert!(
                    error
                        .message
                        .starts_with("Job records are kept by the gputune daemon"),
                    "{}",
                    error.message
                );
            }
            other => panic!("not refused: {other:?}"),
        }
    }
}
