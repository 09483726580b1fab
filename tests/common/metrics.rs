//! Metrics tests' tools: a `gputune exporter` process and its port, a plain HTTP GET, and a
//! reader of the Prometheus text format.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use super::process::{PATIENCE, Running, spawn_piped};

/// A running `gputune exporter` (or daemon with `--metrics-listen`); killed when dropped.
pub struct Exporter {
    pub running: Running,
    pub address: SocketAddr,
}

impl Exporter {
    /// Starts `command` and waits for the line that says where it serves.
    pub fn start(command: Command, serving_line: &str) -> Exporter {
        let mut running = spawn_piped(command);
        running.wait_for_line(serving_line);
        let line = running.stderr.last().cloned().unwrap_or_default();
        let address = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|address| address.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Exporter { running, address }
    }

    /// `GET /metrics`, parsed; panics unless it is a 200.
    pub fn scrape(&self) -> Vec<Sample> {
        let response = get(self.address, "/metrics");
        assert_eq!(response.status, 200, "{}", response.body);
        parse(&response.body)
    }

    /// Scrapes until `condition` holds for a scrape; returns that scrape.
    pub fn scrape_until(&self, what: &str, condition: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let samples = self.scrape();
            if condition(&samples) {
                return samples;
            }
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.running.child.kill();
        let _ = self.running.child.wait();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// A plain HTTP/1.0 GET (the server closes the connection after the answer).
pub fn get(address: SocketAddr, path: &str) -> Response {
    request(
        address,
        &format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n"),
    )
}

/// Sends `raw` as it is and reads the whole answer.
pub fn request(address: SocketAddr, raw: &str) -> Response {
    let mut stream =
        TcpStream::connect_timeout(&address, PATIENCE).expect("the server accepts a connection");
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("a read timeout");
    stream
        .write_all(raw.as_bytes())
        .expect("the request is sent");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("the answer is read");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Response {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// One sample line: its name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// The samples of a text exposition (comments skipped), strictly: a line that does not parse
/// fails the test.
pub fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (
                name,
                parse_labels(rest.strip_suffix('}').expect("labels end with }")),
            ),
            None => (series, BTreeMap::new()),
        };
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    samples
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "a quoted value after {name}");
        let mut value = String::new();
        loop {
            match chars.next().expect("a closing quote") {
                '\\' => match chars.next().expect("an escaped character") {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break,
                other => value.push(other),
            }
        }
        labels.insert(name, value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    labels
}

/// The samples named `name`, by their `gpu` label.
pub fn by_gpu<'a>(samples: &'a [Sample], name: &str) -> BTreeMap<u32, &'a Sample> {
    samples
        .iter()
        .filter(|sample| sample.name == name)
        .filter_map(|sample| Some((sample.label("gpu").parse().ok()?, sample)))
        .collect()
}

/// A TCP port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// `text` percent-encoded for a URL's query.
pub fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}
