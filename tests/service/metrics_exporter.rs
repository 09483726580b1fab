//! `gputune exporter` and the daemon's `--metrics-listen` as Prometheus sees them: on the fake
//! libnvidia-ml's eight GPUs, dcgm-exporter's names and labels with the values `status --json`
//! gives; a power limit changed by another process shows; what a session holds shows; hostile
//! clients (a huge request, slow clients, a flood of connections) never keep a scrape waiting.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::FakeMachine;
use common::metrics::{Exporter, Sample, by_gpu, get, request};
use serde_json::Value;

use crate::common;

const SERVING: &str = "gputune exporter: serving http://";

fn exporter(machine: &FakeMachine, interval_ms: &str) -> Exporter {
    let command = machine.command(&[
        "exporter",
        "--listen",
        "127.0.0.1:0",
        "--interval-ms",
        interval_ms,
    ]);
    Exporter::start(command, SERVING)
}

fn status(machine: &FakeMachine) -> Vec<Value> {
    let output = machine.gputune(&["status", "--json"]);
    assert!(output.status.success(), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("status --json is JSON");
    report["gpus"].as_array().cloned().unwrap_or_default()
}

/// Whether every one of the eight GPUs has a reading in the scrape.
fn all_read(samples: &[Sample]) -> bool {
    by_gpu(samples, "DCGM_FI_DEV_GPU_TEMP").len() == 8
}

fn value(samples: &[Sample], name: &str, gpu: u32) -> f64 {
    by_gpu(samples, name)
        .get(&gpu)
        .map_or(f64::NAN, |sample| sample.value)
}

#[test]
fn eight_fake_gpus_are_exported_with_dcgm_exporter_names_and_status_values() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let exporter = exporter(&machine, "200");
    let first = exporter.scrape_until("every GPU read", all_read);
    let gpus = status(&machine);
    assert_eq!(gpus.len(), 8);
    let hostname = gputune_core::metrics::hostname();
    for (index, gpu) in gpus.iter().enumerate() {
        let index = index as u32;
        let power = by_gpu(&first, "DCGM_FI_DEV_POWER_USAGE")[&index];
        let labels = &power.labels;
        assert_eq!(labels["gpu"], index.to_string());
        assert_eq!(labels["UUID"], gpu["uuid"].as_str().unwrap_or_default());
        assert_eq!(
            labels["pci_bus_id"],
            gpu["pci_bus_id"].as_str().unwrap_or_default()
        );
        assert_eq!(labels["device"], format!("nvidia{index}"));
        assert_eq!(
            labels["modelName"],
            gpu["name"].as_str().unwrap_or_default()
        );
        assert_eq!(labels["Hostname"], hostname);
        let own = by_gpu(&first, "gputune_power_limit_default_watts")[&index];
        assert_eq!(own.label("gpu_uuid"), labels["UUID"]);
        assert_eq!(own.label("model_name"), labels["modelName"]);
        let watts = |field: &str| gpu[field].as_f64().unwrap_or(f64::NAN) / 1000.0;
        assert_eq!(own.value, watts("power_limit_default_mw"));
        let min = value(&first, "gputune_power_limit_min_watts", index);
        let max = value(&first, "gputune_power_limit_max_watts", index);
        assert_eq!(
            (min, max),
            (watts("power_limit_min_mw"), watts("power_limit_max_mw"))
        );
        // Readings move between status and the scrape; the card's own facts do not.
        for (name, field) in [
            ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "pcie_link_gen_max"),
            ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "pcie_link_width_max"),
            ("DCGM_FI_DEV_PCIE_LINK_GEN", "pcie_link_gen"),
        ] {
            assert_eq!(
                value(&first, name, index),
                gpu[field].as_f64().unwrap_or(-1.0),
                "{name}"
            );
        }
        assert!(power.value > 20.0 && power.value <= watts("power_limit_max_mw") * 1.05);
        let temperature = value(&first, "DCGM_FI_DEV_GPU_TEMP", index);
        let status_temperature = gpu["temperature_c"].as_f64().unwrap_or(f64::NAN);
        assert!(
            (temperature - status_temperature).abs() <= 15.0,
            "{temperature}"
        );
        let total_mib = gpu["memory_total_bytes"].as_f64().unwrap_or(0.0) / 1_048_576.0;
        let used = value(&first, "DCGM_FI_DEV_FB_USED", index);
        let free = value(&first, "DCGM_FI_DEV_FB_FREE", index);
        assert!(
            (used + free - total_mib).abs() <= 1.0,
            "{used} + {free} vs {total_mib}"
        );
        let reasons = by_gpu(&first, "gputune_throttle_reason");
        assert!(reasons.contains_key(&index));
        assert_eq!(value(&first, "gputune_reading_ok", index), 1.0);
    }
    assert_eq!(
        first
            .iter()
            .filter(|s| s.name == "gputune_fan_speed_percent")
            .count(),
        16
    );

    // Energy only grows.
    let energy = |samples: &[Sample]| value(samples, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 4);
    let before = energy(&first);
    exporter.scrape_until("energy grows", |samples| energy(samples) > before);

    // A power limit changed by another gputune shows within a second or two.
    let applied = machine.gputune(&["apply", "--gpu", "5", "--power-limit", "300W"]);
    assert!(applied.status.success(), "{applied:?}");
    let after = exporter.scrape_until("the new limit", |samples| {
        value(samples, "gputune_power_limit_watts", 5) == 300.0
            && value(samples, "gputune_power_limit_enforced_watts", 5) == 300.0
    });
    assert!(by_gpu(&after, "gputune_last_change_timestamp_seconds").contains_key(&5));
    assert_eq!(value(&after, "gputune_power_limit_watts", 4), 450.0);
}

/// Prometheus may scrape the moment the exporter says it serves: that scrape has a reading of
/// every GPU, not only the cards' facts.
#[test]
fn the_first_scrape_right_after_the_start_has_every_gpus_reading() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    // A slow interval: nothing but the start itself can have taken the first reading.
    let exporter = exporter(&machine, "5000");
    let first = exporter.scrape();
    assert!(
        all_read(&first),
        "{:?}",
        by_gpu(&first, "DCGM_FI_DEV_GPU_TEMP").keys()
    );
    assert_eq!(by_gpu(&first, "DCGM_FI_DEV_POWER_USAGE").len(), 8);
}

/// A daemon on `machine` serving metrics on a free port of 127.0.0.1 (its folders under
/// `name`), and its socket.
fn daemon_with_metrics(machine: &FakeMachine, name: &str) -> (Exporter, std::path::PathBuf) {
    let base = machine.state_dir().with_file_name(name);
    let runtime = base.join("run");
    let mut command = machine.command(&[
        "daemon",
        "--runtime-dir",
        runtime.to_str().unwrap_or_default(),
        "--state-dir",
        base.join("state").to_str().unwrap_or_default(),
        "--driver-wait-s",
        "0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let socket = runtime.join("gputune.sock");
    command.env("GPUTUNE_SOCKET", &socket);
    (
        Exporter::start(command, "serving metrics on http://"),
        socket,
    )
}

#[test]
fn the_daemon_serves_metrics_of_what_its_sessions_hold() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let (metrics, socket) = daemon_with_metrics(&machine, "metrics-daemon");
    let samples = metrics.scrape_until("every GPU read", all_read);
    let info: Vec<&Sample> = samples
        .iter()
        .filter(|sample| sample.name == "gputune_exporter_info")
        .collect();
    assert_eq!(info[0].label("daemon"), "true");
    assert_eq!(value(&samples, "gputune_session_active", 1), 0.0);
    let mut trial = common::process::spawn_piped({
        let mut client = machine.command(&[
            "apply",
            "--gpu",
            "1",
            "--try",
            "600",
            "--baseline-s",
            "0",
            "--power-limit",
            "300W",
        ]);
        client.env("GPUTUNE_SOCKET", &socket);
        client
    });
    trial.wait_for_line("Trying the new settings");
    let held = metrics.scrape_until("the trial shows", |samples| {
        value(samples, "gputune_session_active", 1) == 1.0
            && value(samples, "gputune_power_limit_watts", 1) == 300.0
    });
    let info = by_gpu(&held, "gputune_session_info")[&1];
    assert_eq!(info.label("purpose"), "trial");
    assert!(info.label("holder").contains("gputune apply"), "{info:?}");
    assert!(by_gpu(&held, "gputune_trial_end_timestamp_seconds").contains_key(&1));
    // The session's energy: the card's counter since the session began, growing while it lasts
    // and never more than the highest power limit over the session's age.
    let counting = metrics.scrape_until("the session's energy counts", |samples| {
        by_gpu(samples, "gputune_session_energy_joules")
            .get(&1)
            .is_some_and(|sample| sample.value > 0.0)
    });
    let energy_j = value(&counting, "gputune_session_energy_joules", 1);
    let age_s = value(&counting, "gputune_sample_timestamp_seconds", 1)
        - value(&counting, "gputune_session_start_timestamp_seconds", 1);
    assert!(
        energy_j <= (age_s + 1.0) * 450.0,
        "{energy_j} J in {age_s} s"
    );
    assert!(!by_gpu(&counting, "gputune_session_energy_joules").contains_key(&0));
    metrics.scrape_until("the session's energy grows", |samples| {
        value(samples, "gputune_session_energy_joules", 1) > energy_j
    });
    // The client dies: the daemon puts the card back, and the metrics say so.
    let _ = trial.child.kill();
    metrics.scrape_until("the trial ended", |samples| {
        value(samples, "gputune_session_active", 1) == 0.0
            && value(samples, "gputune_power_limit_watts", 1) == 450.0
            && !by_gpu(samples, "gputune_session_info").contains_key(&1)
    });
}

/// The series of GPU `gpu` in `samples` that carry the scheduler's job labels.
fn job_labelled(samples: &[Sample], gpu: u32) -> Vec<&Sample> {
    samples
        .iter()
        .filter(|sample| {
            sample.label("gpu") == gpu.to_string() && !sample.label("hpc_job").is_empty()
        })
        .collect()
}

#[test]
fn a_jobs_gpus_carry_its_labels_and_energy_while_it_holds_them_and_not_after() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let (metrics, socket) = daemon_with_metrics(&machine, "metrics-job");
    let before = metrics.scrape_until("every GPU read", all_read);
    assert!(
        before
            .iter()
            .all(|sample| sample.label("hpc_job").is_empty())
    );

    // What the SPANK plugin sends for a step of job 4242 on GPUs 1 and 2 (the tests run as
    // root, who alone may start a job's session).
    let mut plugin = common::raw::Raw::connect(&socket);
    plugin.hello("slurmstepd job 4242 (test)");
    let change = |gpu: usize| {
        format!(
            "{{\"gpu_uuid\":\"{}\",\"settings\":[{{\"type\":\"power_limit\",\"power_limit_mw\":300000}}]}}",
            machine.uuid(gpu)
        )
    };
    let start = format!(
        "{{\"id\":2,\"request\":{{\"type\":\"start_session\",\"session\":{{\"purpose\":\"job\",\"changes\":[{},{}],\"fan_curves\":[],\"job\":{{\"scheduler\":\"slurm\",\"job_id\":\"4242\",\"step\":\"batch\",\"user\":\"alice\",\"uid\":1000}}}}}}}}\n",
        change(1),
        change(2)
    );
    plugin.send(start.as_bytes()).expect("the request is sent");
    let started = loop {
        let line = plugin.line().expect("an answer");
        if line.starts_with("{\"id\":2,") {
            break line;
        }
    };
    assert!(started.contains("\"session_started\""), "{started}");
    let answer: Value = serde_json::from_str(&started).expect("JSON");
    let session = answer["response"]["session"]
        .as_u64()
        .expect("a session id");

    let during = metrics.scrape_until("the job's labels show", |samples| {
        value(samples, "gputune_power_limit_watts", 1) == 300.0
            && by_gpu(samples, "gputune_job_energy_joules")
                .get(&2)
                .is_some_and(|sample| sample.value > 0.0)
    });
    for gpu in [1, 2] {
        let labelled = job_labelled(&during, gpu);
        let all = during
            .iter()
            .filter(|sample| sample.label("gpu") == gpu.to_string())
            .count();
        // Every series of the job's GPUs: dcgm-exporter's and gputune's own.
        assert_eq!(labelled.len(), all, "GPU {gpu}");
        assert!(labelled.iter().any(|s| s.name == "DCGM_FI_DEV_POWER_USAGE"));
        assert!(
            labelled
                .iter()
                .all(|s| s.label("hpc_job") == "4242" && s.label("hpc_user") == "alice")
        );
    }
    for gpu in [0, 3, 4, 5, 6, 7] {
        assert!(job_labelled(&during, gpu).is_empty(), "GPU {gpu}");
        assert!(!by_gpu(&during, "gputune_job_energy_joules").contains_key(&gpu));
    }
    // The job's energy is its one session's: the same counter since the same start.
    let energy_j = value(&during, "gputune_job_energy_joules", 2);
    assert_eq!(energy_j, value(&during, "gputune_session_energy_joules", 2));
    metrics.scrape_until("the job's energy grows", |samples| {
        value(samples, "gputune_job_energy_joules", 2) > energy_j
    });

    // The job ends: its cards are put back and lose its labels and energy.
    let end = format!(
        "{{\"id\":3,\"request\":{{\"type\":\"end_session\",\"session\":{session},\"keep\":false}}}}\n"
    );
    plugin.send(end.as_bytes()).expect("the request is sent");
    let after = metrics.scrape_until("the job's labels are gone", |samples| {
        value(samples, "gputune_power_limit_watts", 1) == 450.0
            && samples
                .iter()
                .all(|sample| sample.label("hpc_job").is_empty())
    });
    assert!(!after.iter().any(|s| s.name == "gputune_job_energy_joules"));
    assert!(
        after
            .iter()
            .all(|sample| sample.label("hpc_user").is_empty())
    );
    assert_eq!(by_gpu(&after, "DCGM_FI_DEV_POWER_USAGE").len(), 8);
}

/// A scrape answers, whole, within `limit`.
fn scrape_within(address: SocketAddr, limit: Duration) {
    let started = Instant::now();
    let response = get(address, "/metrics");
    assert_eq!(response.status, 200);
    assert!(response.body.contains("gputune_exporter_info"));
    assert!(
        started.elapsed() < limit,
        "a scrape took {:?}",
        started.elapsed()
    );
}

#[test]
fn hostile_clients_never_keep_a_scrape_waiting() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let exporter = exporter(&machine, "100");
    let address = exporter.address;
    exporter.scrape_until("every GPU read", all_read);
    let quick = Duration::from_secs(2);

    // Other paths and methods.
    assert_eq!(get(address, "/").status, 200);
    assert_eq!(get(address, "/metrics/../../etc/passwd").status, 404);
    assert_eq!(get(address, "/favicon.ico").status, 404);
    let post = request(
        address,
        "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(post.status, 405);
    assert!(post.head.contains("Allow: GET, HEAD"));
    let head = request(address, "HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    assert_eq!(request(address, "GARBAGE\r\n\r\n").status, 400);

    // A huge request head: refused after 8 KiB, without reading the rest.
    let mut huge = TcpStream::connect(address).expect("connects");
    let mut sent = huge.write_all(b"GET /metrics HTTP/1.1\r\nX-Long: ");
    for _ in 0..256 {
        sent = sent.and_then(|()| huge.write_all(&[b'a'; 4096]));
        if sent.is_err() {
            break;
        }
    }
    let mut answer = String::new();
    let _ = huge.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer:.80}");
    scrape_within(address, quick);

    // Slow clients: each sends part of a request and stalls.
    let slow: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut stream = TcpStream::connect(address).expect("connects");
            let _ = stream.write_all(b"GET /metr");
            stream
        })
        .collect();
    scrape_within(address, quick);
    // And a client that asks but never reads its (large) answer.
    let mut deaf = TcpStream::connect(address).expect("connects");
    let _ = deaf.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
    scrape_within(address, quick);

    // More connections than the endpoint keeps: the oldest give way, scrapes still answer.
    let flood: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect(address).ok())
        .collect();
    assert!(flood.len() >= 300, "{} connections", flood.len());
    scrape_within(address, quick);

    // Many scrapes at once, each whole; the readings keep moving meanwhile (the sampler never
    // waited for a client).
    let energy = |samples: &[Sample]| value(samples, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 0);
    let before = energy(&exporter.scrape());
    let scrapers: Vec<_> = (0..16)
        .map(|_| {
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| common::metrics::parse(&get(address, "/metrics").body).len())
                    .collect::<Vec<usize>>()
            })
        })
        .collect();
    for scraper in scrapers {
        let counts = scraper.join().expect("a scraper ends");
        assert!(counts.iter().all(|count| *count > 300), "{counts:?}");
    }
    exporter.scrape_until("energy grows", |samples| energy(samples) > before);
    drop((slow, flood, deaf));
    scrape_within(address, quick);
}

#[test]
fn a_port_in_use_is_one_clear_error() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().map(|a| a.port()).unwrap_or_default();
    let listen = format!("127.0.0.1:{port}");
    let output = machine.gputune(&["exporter", "--listen", &listen]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("Cannot listen for metrics on {listen}"))
            && stderr.contains("choose another port"),
        "{stderr}"
    );
    let bad = machine.gputune(&["exporter", "--listen", "localhost"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not ADDRESS:PORT"));
    let fast = machine.gputune(&["exporter", "--interval-ms", "10"]);
    assert!(String::from_utf8_lossy(&fast.stderr).contains("outside 100 to 5000 ms"));
}
