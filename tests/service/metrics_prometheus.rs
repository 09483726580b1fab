//! A real Prometheus (Debian's `prometheus` package, installed by `bash .ci/setup test`)
//! scrapes `gputune exporter` on the fake libnvidia-ml's eight GPUs every second; its HTTP API
//! gives back the values and labels (power, temperature, energy growing, a power-limit change
//! made by `gputune apply`), and `promtool check metrics` accepts the scrape.

use crate::common;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::FakeMachine;
use common::metrics::{Exporter, by_gpu, free_port, get, url_encode};
use common::process::PATIENCE;
use serde_json::Value;

/// A program on the PATH (or Debian's /usr/bin), or a failure that says how to install it.
fn program(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|folder| folder.join(name))
        .find(|candidate| candidate.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "{name} is not installed: run `bash .ci/setup test` (it installs Debian's prometheus package, which has prometheus and promtool)"
        )
    })
}

/// A Prometheus server in a temporary folder; killed when dropped.
struct Prometheus {
    child: Child,
    address: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    fn start(folder: &Path, target: SocketAddr) -> Prometheus {
        let config = folder.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: gputune\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("the configuration is written");
        let address: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("an address");
        let log = folder.join("prometheus.log");
        let child = Command::new(program("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                folder.join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the log is made"))
            .spawn()
            .expect("prometheus starts");
        let prometheus = Prometheus {
            child,
            address,
            log,
        };
        prometheus.wait("ready", || {
            std::net::TcpStream::connect(address).is_ok() && get(address, "/-/ready").status == 200
        });
        prometheus
    }

    fn wait(&self, what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !condition() {
            assert!(
                Instant::now() < deadline,
                "Prometheus never: {what}; its log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// An instant query's result: one (labels, value) per series.
    fn query(&self, query: &str) -> Vec<(serde_json::Map<String, Value>, f64)> {
        let response = get(
            self.address,
            &format!("/api/v1/query?query={}", url_encode(query)),
        );
        assert_eq!(response.status, 200, "{query}: {}", response.body);
        let answer: Value = serde_json::from_str(&response.body).expect("the API answers JSON");
        assert_eq!(answer["status"], "success", "{answer}");
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|series| {
                let labels = series["metric"].as_object().cloned().unwrap_or_default();
                let value = series["value"][1]
                    .as_str()
                    .and_then(|text| text.parse().ok())
                    .unwrap_or(f64::NAN);
                (labels, value)
            })
            .collect()
    }

    /// The value of a query that gives one series per GPU, for `gpu`.
    fn gpu_value(&self, query: &str, gpu: &str) -> Option<f64> {
        self.query(query)
            .into_iter()
            .find(|(labels, _)| labels.get("gpu").and_then(Value::as_str) == Some(gpu))
            .map(|(_, value)| value)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn prometheus_scrapes_the_exporter_and_its_values_and_labels_round_trip() {
    let promtool = program("promtool");
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let exporter = Exporter::start(
        machine.command(&["exporter", "--listen", "127.0.0.1:0"]),
        "gputune exporter: serving http://",
    );
    let scrape = exporter.scrape_until("every GPU read", |samples| {
        by_gpu(samples, "DCGM_FI_DEV_GPU_TEMP").len() == 8
    });

    // promtool reads the scrape; its only remarks are the names dcgm-exporter itself uses.
    let body = get(exporter.address, "/metrics").body;
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    check
        .stdin
        .take()
        .expect("a pipe")
        .write_all(body.as_bytes())
        .expect("promtool reads the scrape");
    let checked = check.wait_with_output().expect("promtool ends");
    let remarks = String::from_utf8_lossy(&checked.stdout).to_string()
        + &String::from_utf8_lossy(&checked.stderr);
    // 0: no remark; 3: lint remarks only (1 would be a format error).
    assert!(matches!(checked.status.code(), Some(0 | 3)), "{remarks}");
    for remark in remarks.lines().filter(|line| !line.trim().is_empty()) {
        let dcgm_name = remark.starts_with("DCGM_FI_DEV_")
            && (remark.ends_with("label names should be written in 'snake_case' not 'camelCase'")
                || remark
                    == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter metrics should have \"_total\" suffix");
        assert!(dcgm_name, "promtool: {remark}");
    }

    let folder = tempfile::tempdir().expect("a temporary folder");
    let prometheus = Prometheus::start(folder.path(), exporter.address);
    prometheus.wait("all eight GPUs scraped", || {
        prometheus.query("DCGM_FI_DEV_POWER_USAGE").len() == 8
    });

    // Labels: dcgm-exporter's, plus Prometheus's job and instance.
    let hostname = gputune_core::metrics::hostname();
    let power = prometheus.query("DCGM_FI_DEV_POWER_USAGE");
    for (labels, watts) in &power {
        let gpu = labels["gpu"].as_str().unwrap_or_default();
        let scraped = by_gpu(&scrape, "DCGM_FI_DEV_POWER_USAGE")[&gpu.parse::<u32>().unwrap_or(99)];
        for name in ["UUID", "pci_bus_id", "device", "modelName", "Hostname"] {
            assert_eq!(labels[name].as_str(), Some(scraped.label(name)), "{name}");
        }
        assert_eq!(labels["Hostname"], hostname.as_str());
        assert_eq!(labels["job"], "gputune");
        assert_eq!(labels["instance"], exporter.address.to_string().as_str());
        assert!(*watts > 20.0 && *watts <= 600.0, "{watts} W");
    }
    let temperatures = prometheus.query("DCGM_FI_DEV_GPU_TEMP");
    assert_eq!(temperatures.len(), 8);
    assert!(temperatures.iter().all(|(_, c)| (20.0..=100.0).contains(c)));
    assert_eq!(prometheus.query("gputune_throttle_reason").len(), 72);

    // Energy grows, and its rate is the power the cards draw (once five seconds are scraped,
    // so rate() does not extrapolate over a window its samples do not cover).
    prometheus.wait("energy grows on every GPU", || {
        let grown = prometheus.query("increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5s]) > 0");
        grown.len() == 8
    });
    prometheus.wait("six seconds scraped", || {
        prometheus.gpu_value("count_over_time(gputune_energy_joules_total[6s])", "3") >= Some(6.0)
    });
    let rate = prometheus.gpu_value("rate(gputune_energy_joules_total[6s])", "3");
    let draw = prometheus.gpu_value("avg_over_time(DCGM_FI_DEV_POWER_USAGE[6s])", "3");
    if let (Some(rate), Some(draw)) = (rate, draw) {
        assert!(
            (rate - draw).abs() <= draw * 0.2,
            "{rate} J/s against {draw} W"
        );
    } else {
        panic!("no energy rate or power for GPU 3: {rate:?} {draw:?}");
    }

    // A power-limit change made by `gputune apply` reaches Prometheus.
    assert_eq!(
        prometheus.gpu_value("gputune_power_limit_watts", "6"),
        Some(450.0)
    );
    let applied = machine.gputune(&["apply", "--gpu", "6", "--power-limit", "280W"]);
    assert!(applied.status.success(), "{applied:?}");
    prometheus.wait("the new power limit", || {
        prometheus.gpu_value("gputune_power_limit_watts", "6") == Some(280.0)
            && prometheus.gpu_value("gputune_power_limit_enforced_watts", "6") == Some(280.0)
            && prometheus
                .gpu_value("DCGM_FI_DEV_POWER_USAGE", "6")
                .is_some_and(|watts| watts <= 281.0)
    });
    // Every query of the shipped Grafana dashboard runs on this Prometheus, and those that do
    // not need a session or a change in view find data.
    let dashboard: Value =
        serde_json::from_str(include_str!("../../assets/grafana-dashboard.json"))
            .expect("the dashboard is JSON");
    let mut expressions = Vec::new();
    collect_expressions(&dashboard, &mut expressions);
    assert!(expressions.len() >= 20, "{expressions:?}");
    for expression in &expressions {
        let query = expression
            .replace("$instance", ".*")
            .replace("$gpu", ".*")
            .replace("$__range", "1m")
            .replace("$__rate_interval", "10s");
        let result = prometheus.query(&query);
        let needs_an_event = ["session", "last_change", "throttle_reason", "job_energy"]
            .iter()
            .any(|name| query.contains(name));
        assert!(
            needs_an_event || !result.is_empty(),
            "the dashboard's query finds nothing: {query}"
        );
    }
    let limited = prometheus.query("gputune_power_limit_watts{gpu=\"6\"}");
    assert_eq!(limited[0].0["model_name"], "NVIDIA GeForce RTX 4090");
    assert_eq!(
        prometheus.gpu_value("gputune_power_limit_watts", "5"),
        Some(450.0)
    );
}

/// Every `expr` in a Grafana dashboard.
fn collect_expressions(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("expr", Value::String(expression)) => out.push(expression.clone()),
                    _ => collect_expressions(item, out),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_expressions(item, out);
            }
        }
        _ => {}
    }
}
