//! The tuning service: the device-owner threads around the one [`Engine`]. An engine thread
//! answers clients' requests and ends trials on time; a sampler thread reads every GPU on its
//! own handle (a slow driver slows the readings, never a revert) and reads the settings back,
//! so a change made by another process shows. The daemon serves it on a Unix socket; without
//! a daemon, the window and the CLI run it in their own process. Either way a client speaks
//! the same [`protocol`].

pub mod boot_profile;
pub mod client;
pub mod history_pages;
mod job_records;
use gputune_formats::protocol;
mod recorder;
mod routing;
mod sampler;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::device::{CurrentSettings, OpenedBackend};
use crate::tuning::boot_defaults::BootDefaultStore;
use crate::tuning::engine::{ClientInfo, Engine, EngineOptions};
use gputune_formats::card::{DeviceError, Telemetry};
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{ClientId, TuneError};

use protocol::{Message, Request, Welcome};
use routing::Router;

/// The fastest and slowest sampling a client may ask for.
pub const INTERVAL_RANGE_MS: (u64, u64) = (100, 5_000);
/// The sampling interval before any client asks for one.
pub const DEFAULT_INTERVAL_MS: u64 = 1_000;
/// Messages waiting for one client before the service gives up on it (a client that stopped
/// reading must not make the service hold its events forever).
const CLIENT_BACKLOG: usize = 4_096;

/// Closes a client's connection from the service's side: a client dropped for not reading
/// its messages must lose its socket too, not only its place in the service.
pub(crate) type HangUp = Box<dyn Fn() + Send>;

/// What reaches the engine thread.
pub(crate) enum Input {
    Open {
        client: ClientInfo,
        outbox: SyncSender<Message>,
        hang_up: Option<HangUp>,
    },
    Request {
        client: ClientId,
        id: u64,
        request: Request,
    },
    Closed {
        client: ClientId,
    },
    /// A socket client was silent for the idle timeout: does it hold a session or a
    /// subscription (answered on `holds_something`)?
    Idle {
        client: ClientId,
        holds_something: SyncSender<bool>,
    },
    Samples(Vec<Result<Telemetry, DeviceError>>),
    Settings {
        gpu_index: u32,
        current: CurrentSettings,
        read_started: Instant,
    },
    /// The driver reported a critical error (an Xid).
    CriticalEvent(gputune_formats::card::CriticalEvent),
    Stop,
}

/// How a service is set up.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    pub engine: EngineOptions,
    /// True for the daemon: clients are told so (and the daemon keeps boot defaults).
    pub daemon: bool,
    /// Where boot defaults are kept (the daemon's own folder); `None` in-process.
    pub boot_defaults_dir: Option<std::path::PathBuf>,
    /// Where and how long the daemon keeps history on disk; `None` in-process.
    pub history: Option<crate::telemetry::store::HistoryOptions>,
    /// The group whose members may write through the daemon (named in its refusals).
    pub write_group: Option<String>,
    /// `gputune daemon --boot-profile`: made every card's boot default before they are
    /// applied (needs `boot_defaults_dir`).
    pub boot_profile: Option<boot_profile::BootProfile>,
    /// Where the daemon files job records (`jobs/` of its state folder); `None` in-process.
    pub jobs_dir: Option<std::path::PathBuf>,
    /// The price job records are costed at (the daemon's cost.toml).
    pub job_price: Option<crate::job_energy::cost::Price>,
}

/// A running service; dropping it stops it (sessions are put back, kept settings stay).
pub struct Service {
    input: Sender<Input>,
    next_client: Arc<AtomicU64>,
    engine_thread: Option<JoinHandle<()>>,
    sampler: Option<sampler::SamplerHandle>,
    welcome: Welcome,
}

impl Service {
    /// Opens the engine on the backend (restoring what journals say), applies boot defaults
    /// when it is the daemon, and starts the engine and sampler threads.
    pub fn start(opened: OpenedBackend, options: ServiceOptions) -> Result<Service, TuneError> {
        let reopener = opened.backend.reopener();
        let (mut engine, mut notices) = Engine::open(
            opened.backend,
            &options.engine,
            Arc::new(crate::clock::WallClock),
        )?;
        let boot_defaults = options.boot_defaults_dir.clone().map(BootDefaultStore::new);
        if let Some(store) = &boot_defaults {
            if let Some(boot) = &options.boot_profile {
                notices.extend(boot_profile::make_boot_defaults(&engine, store, boot));
            }
            notices.extend(store.apply_all(&mut engine));
        }
        let mut no_history_because = None;
        let recorder = match options.history.clone().map(recorder::Recorder::start) {
            Some(Ok(recorder)) => Some(recorder),
            Some(Err(error)) => {
                let why = format!("History is not kept while no window is open: {error}");
                notices.push(Notice::Warning(why.clone()));
                no_history_because = Some(why);
                None
            }
            None => None,
        };
        let welcome = Welcome {
            protocol: protocol::PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            backend: engine.backend_kind(),
            simulated_because: opened.fallback_reason,
            gpus: engine.gpus(),
            daemon: options.daemon,
            notices,
            job_price: options.job_price.as_ref().map(|price| price.config.clone()),
        };
        engine.set_job_price(options.job_price.clone());
        let (input, inputs) = mpsc::channel();
        let pace = sampler::Pace::new(DEFAULT_INTERVAL_MS);
        let sampler = sampler::start(
            reopener,
            engine.gpus().len() as u32,
            Arc::clone(&pace),
            input.clone(),
        );
        let router = Router::new(
            welcome.clone(),
            boot_defaults,
            pace,
            recorder,
            no_history_because,
            options.write_group.clone(),
            options
                .jobs_dir
                .clone()
                .map(crate::job_energy::store::JobStore::new),
        );
        let engine_thread = std::thread::Builder::new()
            .name("gputune-service".to_string())
            .spawn(move || run_engine(engine, router, &inputs))
            .map_err(|error| {
                TuneError::new(
                    gputune_formats::tuning::TuneErrorKind::State,
                    format!("The tuning thread could not start: {error}"),
                )
            })?;
        Ok(Service {
            input,
            next_client: Arc::new(AtomicU64::new(1)),
            engine_thread: Some(engine_thread),
            sampler: Some(sampler),
            welcome,
        })
    }

    /// What the service says to a new client.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// A new client number.
    pub fn next_client_id(&self) -> ClientId {
        self.next_client.fetch_add(1, Ordering::SeqCst)
    }

    /// Registers a client; what the service says to it arrives on the returned receiver.
    pub(crate) fn open_client(&self, client: ClientInfo) -> Receiver<Message> {
        let (outbox, messages) = mpsc::sync_channel(CLIENT_BACKLOG);
        self.open_client_with(client, outbox, None);
        messages
    }

    /// Registers a client whose messages go to `outbox`; `hang_up` closes its connection.
    pub(crate) fn open_client_with(
        &self,
        client: ClientInfo,
        outbox: SyncSender<Message>,
        hang_up: Option<HangUp>,
    ) {
        // A stopped service drops the message; the client then sees its channel close.
        let _ = self.input.send(Input::Open {
            client,
            outbox,
            hang_up,
        });
    }

    /// A channel for a client's messages, of the size the service allows.
    pub(crate) fn client_channel() -> (SyncSender<Message>, Receiver<Message>) {
        mpsc::sync_channel(CLIENT_BACKLOG)
    }

    /// Where requests from a client go.
    pub(crate) fn input(&self) -> Sender<Input> {
        self.input.clone()
    }

    /// Stops the service: every session is put back first. Waits at most a few seconds for a
    /// driver call in progress.
    pub fn stop(&mut self) {
        let _ = self.input.send(Input::Stop);
        if let Some(sampler) = self.sampler.take() {
            sampler.stop();
        }
        if let Some(thread) = self.engine_thread.take()
            && !crate::join::join_within(thread, Duration::from_secs(30))
        {
            tracing::error!("the tuning thread is stuck in a driver call; not waiting for it");
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The engine thread: requests, readings and deadlines, until told to stop.
fn run_engine(mut engine: Engine, mut router: Router, inputs: &Receiver<Input>) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        loop {
            let wait = engine
                .next_wakeup()
                .map_or(Duration::from_secs(1), |wakeup| {
                    wakeup.saturating_duration_since(Instant::now())
                })
                .min(Duration::from_secs(1));
            match inputs.recv_timeout(wait) {
                Ok(Input::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Ok(input) => router.handle(&mut engine, input),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            engine.tick();
            router.route(&mut engine);
        }
    }));
    if outcome.is_err() {
        tracing::error!(
            "the tuning thread stopped after an internal error; putting every card back"
        );
    }
    engine.shutdown();
    router.route(&mut engine);
}
