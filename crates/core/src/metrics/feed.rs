//! The feed thread (`gputune-metrics`): a client of the tuning service like the window, it asks
//! for one snapshot, subscribes to readings and tuning news, and after each one renders the
//! scrape body once and publishes it. Scrapes only copy the published bytes: no NVML call and
//! no rendering per scrape, and a scrape never waits for the service.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::families::{Context, render};
use crate::service::client::{ClientError, ConnectError, TuningClient};
use gputune_formats::protocol::{Event, Request, Response, Snapshot};
use gputune_formats::tuning::EngineEvent;

/// How long the feed waits between tries to reach the service again.
const RECONNECT_AFTER: Duration = Duration::from_secs(2);
/// How often the feed wakes when nothing arrives (to stop, and to notice stale readings).
const WAKE_EVERY: Duration = Duration::from_millis(500);
/// Readings older than this many sampling intervals (at least [`STALE_AFTER_MIN`]) are left
/// out: a hung driver must not look like a flat line.
const STALE_AFTER_INTERVALS: u32 = 5;
const STALE_AFTER_MIN: Duration = Duration::from_secs(15);
/// How long the first body waits for the sampler's first reading when the snapshot has none
/// (less than the start waits for a body, so a slow driver is served 'no reading' first).
const FIRST_READING_WAIT: Duration = Duration::from_secs(5);

/// The latest scrape body, shared between the feed and the server; `None` while the tuning
/// service is not reachable (scrapes are then answered 503, so Prometheus marks the target
/// down rather than recording nothing as if all were well).
#[derive(Debug, Default)]
pub struct Published {
    body: Mutex<Option<Arc<Vec<u8>>>>,
}

impl Published {
    /// The body to send (a cheap copy of a pointer).
    pub fn body(&self) -> Option<Arc<Vec<u8>>> {
        self.body
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, body: Option<Vec<u8>>) {
        *self.body.lock().unwrap_or_else(PoisonError::into_inner) = body.map(Arc::new);
    }
}

/// A way to (re)connect to the tuning service.
pub type Connector = Box<dyn FnMut() -> Result<TuningClient, ConnectError> + Send>;

/// How the feed runs.
pub struct FeedOptions {
    pub interval_ms: u64,
    pub hostname: String,
}

/// The running feed thread.
pub struct Feed {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Feed {
    /// Starts the feed on a client already connected (so the caller could report a failure to
    /// connect); `reconnect` is used when that connection ends.
    pub fn start(
        client: TuningClient,
        reconnect: Connector,
        options: FeedOptions,
        published: Arc<Published>,
    ) -> std::io::Result<Feed> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("gputune-metrics".to_string())
            .spawn(move || run(client, reconnect, &options, &published, &stopping))?;
        Ok(Feed {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the feed (within [`WAKE_EVERY`]); its connection closes with it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take()
            && !crate::join::join_within(thread, std::time::Duration::from_secs(5))
        {
            tracing::warn!("the metrics feed is stuck reconnecting; not waiting for it");
        }
    }
}

fn run(
    mut client: TuningClient,
    mut reconnect: Connector,
    options: &FeedOptions,
    published: &Published,
    stop: &AtomicBool,
) {
    loop {
        match follow(&mut client, options, published, stop) {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!("the metrics lost the tuning service ({error}); trying again");
            }
        }
        published.set(None);
        client = loop {
            let deadline = Instant::now() + RECONNECT_AFTER;
            while Instant::now() < deadline {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            match reconnect() {
                Ok(client) => break client,
                Err(error) => {
                    tracing::warn!("the metrics cannot reach the tuning service: {error}")
                }
            }
        };
    }
}

/// Follows one connection until told to stop (`Ok`) or the connection fails.
fn follow(
    client: &mut TuningClient,
    options: &FeedOptions,
    published: &Published,
    stop: &AtomicBool,
) -> Result<(), ClientError> {
    let welcome = client.welcome().clone();
    let context = Context {
        hostname: options.hostname.clone(),
        version: welcome.version.clone(),
        backend: welcome.backend,
        daemon: welcome.daemon,
    };
    let mut snapshot = match client.request(Request::Snapshot)? {
        Response::Snapshot(snapshot) => *snapshot,
        other => {
            return Err(ClientError::Unreadable(format!(
                "a snapshot was answered with {other:?}"
            )));
        }
    };
    client.request(Request::Subscribe {
        interval_ms: options.interval_ms,
    })?;
    let stale_after =
        (Duration::from_millis(options.interval_ms) * STALE_AFTER_INTERVALS).max(STALE_AFTER_MIN);
    let mut last_sample = snapshot
        .latest
        .iter()
        .any(Option::is_some)
        .then(Instant::now);
    let mut fresh = last_sample.is_some();
    // A snapshot taken before the sampler's first reading has none: the first body waits for
    // that reading (as the start waits for the first body), so the first scrape is not empty.
    let first_reading_by = Instant::now() + FIRST_READING_WAIT;
    let mut waiting_for_first = !fresh;
    if !waiting_for_first {
        published.set(Some(render(&snapshot, &context, fresh).into_bytes()));
    }
    while !stop.load(Ordering::SeqCst) {
        let wake = if waiting_for_first {
            first_reading_by
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), WAKE_EVERY)
        } else {
            WAKE_EVERY
        };
        let event = client.next_event(wake)?;
        let changed = match event {
            Some(Event::Samples { readings }) => {
                snapshot.latest = readings.into_iter().map(Some).collect();
                last_sample = Some(Instant::now());
                true
            }
            Some(Event::Engine { event }) => match *event {
                EngineEvent::Tuning { tuning } => {
                    replace_tuning(&mut snapshot, tuning);
                    true
                }
                _ => false,
            },
            None => false,
        };
        let now_fresh = last_sample.is_some_and(|at| at.elapsed() < stale_after);
        if waiting_for_first {
            if last_sample.is_none() && Instant::now() < first_reading_by {
                continue;
            }
            waiting_for_first = false;
            fresh = now_fresh;
            published.set(Some(render(&snapshot, &context, fresh).into_bytes()));
            continue;
        }
        if changed || now_fresh != fresh {
            if fresh && !now_fresh {
                tracing::warn!(
                    "no GPU reading for {} s: the metrics leave readings out until one arrives",
                    stale_after.as_secs()
                );
            }
            fresh = now_fresh;
            published.set(Some(render(&snapshot, &context, fresh).into_bytes()));
        }
    }
    Ok(())
}

fn replace_tuning(snapshot: &mut Snapshot, tuning: gputune_formats::tuning::GpuTuning) {
    match snapshot
        .tunings
        .iter_mut()
        .find(|known| known.gpu_index == tuning.gpu_index)
    {
        Some(known) => *known = tuning,
        None => snapshot.tunings.push(tuning),
    }
}
