//! Prometheus metrics (docs/metrics.md): `gputune exporter` and the daemon's
//! `--metrics-listen` serve `GET /metrics` from the last sample the service's sampler took.
//! A feed thread is a client of the tuning service like any front end (`feed`); it renders the
//! body once per sample (`families`, in the text format of `exposition`), and a poll-driven
//! endpoint serves those bytes to every scraper (`server`, `http`). No scrape makes an NVML
//! call, renders anything or waits for the service.

pub mod exposition;
pub mod families;
pub mod feed;
pub mod http;
pub mod server;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use feed::{Connector, Feed, FeedOptions, Published};
use server::{Limits, Server};

use crate::service::client::TuningClient;

/// Where `gputune exporter` listens by default: dcgm-exporter's port, on this machine only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9400";

/// How long the start waits for the service's first snapshot before serving anyway (503 until
/// it comes).
const FIRST_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A running metrics endpoint: its feed and its server.
pub struct MetricsEndpoint {
    feed: Option<Feed>,
    server: Option<Server>,
    address: SocketAddr,
}

impl MetricsEndpoint {
    /// Serves the metrics of `client`'s service on `listener` (bound with [`server::bind`]),
    /// subscribed at `interval_ms`; `reconnect` reaches the service again when the connection
    /// ends.
    pub fn start(
        listener: TcpListener,
        client: TuningClient,
        reconnect: Connector,
        interval_ms: u64,
    ) -> anyhow::Result<MetricsEndpoint> {
        let address = listener.local_addr()?;
        let published = Arc::new(Published::default());
        let options = FeedOptions {
            interval_ms,
            hostname: hostname(),
        };
        let feed = Feed::start(client, reconnect, options, Arc::clone(&published))?;
        // The first body (one snapshot, and the sampler's first reading when the snapshot has
        // none) before the first scrape is answered; a scrape that comes meanwhile waits in
        // the listen queue.
        let deadline = std::time::Instant::now() + FIRST_BODY_WAIT;
        while published.body().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let server = Server::start(listener, published, Limits::default())?;
        Ok(MetricsEndpoint {
            feed: Some(feed),
            server: Some(server),
            address,
        })
    }

    /// The address it listens on (the port the system chose, for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops the server and the feed (whose connection to the service closes).
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
        if let Some(feed) = self.feed.take() {
            feed.stop();
        }
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.stop();
    }
}

/// This machine's name, for dcgm-exporter's `Hostname` label.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .map(|name| crate::text::printable(&name.to_string_lossy()))
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// An address to listen on, as `--listen` and `--metrics-listen` take it: `ADDR:PORT`
/// (`127.0.0.1:9400`, `[::1]:9400`, `0.0.0.0:9400`), or `:PORT` for every IPv4 address as
/// dcgm-exporter's `-a :9400` means.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_string(),
    };
    full.parse().map_err(|_| {
        format!(
            "\"{}\" is not ADDRESS:PORT (e.g. 127.0.0.1:9400, [::1]:9400, 0.0.0.0:9400 or :9400)",
            crate::text::printable(text)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_are_read_like_dcgm_exporter_reads_them() {
        let address = |text: &str| text.parse::<SocketAddr>().map_err(|e| e.to_string());
        assert_eq!(parse_listen(DEFAULT_LISTEN), address("127.0.0.1:9400"));
        assert_eq!(parse_listen(":9400"), address("0.0.0.0:9400"));
        assert_eq!(parse_listen("[::1]:0"), address("[::1]:0"));
        for bad in ["localhost", "9400", "1.2.3.4:99999", "", ":x"] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }
}
