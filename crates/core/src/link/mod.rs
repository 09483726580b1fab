//! The window's link to the tuning service (the daemon, or an engine in this process): a
//! thread that connects, subscribes to readings and tuning news, and sends the window's
//! requests. The window never waits on it; it repaints when news arrives.
//!
//! No egui here: the window (`crate::ui`) reads `LinkEvent`s and sends `LinkCommand`s.
//! commands.rs turns the window's commands into requests, history.rs reads the daemon's
//! history on opening, sweep.rs and stability.rs drive a sweep, a check or a scan.

mod commands;
mod history;
mod reconnect;
pub mod stability;
pub mod sweep;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::device::{BackendKind, DeviceError, Setting, Telemetry};
use crate::link::history::HistoryFetch;
use crate::link::stability::{StabilityLaunch, StabilityRuns, StabilityView};
use crate::link::sweep::{ActiveSweep, SweepLaunch};
use crate::notice::Notice;
use crate::service::client::{ClientError, ConnectOptions, TuningClient, TuningOptions, connect};
use crate::service::protocol::{Event, Request, Response};
use crate::sweep::runner::SweepView;
use crate::telemetry::history::HistoryRow;
use crate::tuning::engine::ChangeNote;
use crate::tuning::engine::{EngineEvent, GpuApplied, GpuInfo, GpuTuning, TrialStatus, TuneError};
use crate::tuning::fan_curve::FanCurve;

/// Seconds of "before" numbers a trial in the window compares with (the recent past).
pub const WINDOW_BASELINE_S: u64 = 30;

/// What the window hears from the service.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkEvent {
    /// Connected; these are the GPUs.
    Connected {
        backend: BackendKind,
        /// Why the simulator stands in for NVML, when it does.
        simulated_because: Option<String>,
        gpus: Vec<GpuInfo>,
        /// A daemon answers (else an engine runs in this window).
        daemon: bool,
        /// What the engine restored when it started, and the like.
        notices: Vec<Notice>,
    },
    /// One reading per GPU, in index order; a GPU that failed to read carries its error.
    Samples(Vec<Result<Telemetry, DeviceError>>),
    /// No service could be reached, or it went away for good.
    Failed(String),
    /// The daemon went away (a restart, a crash): the link tries again by itself, and the
    /// window keeps what it has. What the window ran through it ended with that daemon.
    Lost { why: String },
    /// Try `attempt` to reach the daemon again failed; the next comes in `retry_in_ms`.
    Reconnecting {
        attempt: u32,
        retry_in_ms: u64,
        why: String,
    },
    /// What a card runs, who holds it, its fan state.
    Tuning(Box<GpuTuning>),
    /// What an apply did, or why it was refused.
    Applied {
        gpu_index: u32,
        result: Result<GpuApplied, TuneError>,
    },
    /// Where a trial stands (every reading while it runs, and once as it ends).
    Trial(Box<TrialStatus>),
    /// News about a card, or the refusal of a request.
    Notice {
        gpu_index: Option<u32>,
        notice: Notice,
    },
    /// Where a sweep started from the window stands (every step, and every second).
    Sweep {
        view: Box<SweepView>,
        notes: Vec<String>,
    },
    /// Where a stability check or undervolt scan started from the window stands.
    Stability(Box<StabilityView>),
    /// What the daemon kept of a GPU before the window opened, oldest first.
    History {
        gpu_index: u32,
        rows: Vec<HistoryRow>,
        changes: Vec<ChangeNote>,
    },
    /// What the daemon kept of a GPU while the window was not connected (after a reconnect),
    /// oldest first: it goes between the window's readings from before and after.
    Refilled {
        gpu_index: u32,
        rows: Vec<HistoryRow>,
        changes: Vec<ChangeNote>,
    },
}

/// What the window asks of the service.
#[derive(Debug, Clone, PartialEq)]
pub enum TuneCommand {
    Apply {
        gpu_index: u32,
        settings: Vec<Setting>,
    },
    /// Try settings for a while, then revert unless kept.
    StartTrial {
        gpu_index: u32,
        settings: Vec<Setting>,
        duration_s: u64,
    },
    KeepTrial {
        gpu_index: u32,
    },
    RevertTrial {
        gpu_index: u32,
    },
    /// Settings on several GPUs (each with its own values): one request, all or nothing.
    ApplyAll {
        changes: Vec<(u32, Vec<Setting>)>,
    },
    /// One trial over several GPUs: one session, kept or put back together.
    StartTrialAll {
        changes: Vec<(u32, Vec<Setting>)>,
        duration_s: u64,
    },
    /// Follow this curve while the window is open; `None` stops and puts the fans back.
    SetFanCurve {
        gpu_index: u32,
        curve: Option<FanCurve>,
    },
}

/// What the window sends to the link thread.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkCommand {
    SetInterval { interval_ms: u64 },
    Tune(TuneCommand),
    StartSweep(Box<SweepLaunch>),
    StopSweep { gpu_index: u32 },
    StartStability(Box<StabilityLaunch>),
    StopStability { gpu_index: u32 },
}

/// The window's end of the link. Dropping it closes the connection, which ends the window's
/// sessions (its fan curves and trials are put back).
pub struct Link {
    commands: Option<Sender<LinkCommand>>,
    events: Receiver<LinkEvent>,
    thread: Option<JoinHandle<()>>,
    /// Set once connected: only then may closing have sessions to put back, worth waiting for.
    connected: Arc<AtomicBool>,
}

impl Link {
    /// Starts the link thread. `notify` runs after every event is sent (the window passes
    /// `egui::Context::request_repaint`).
    pub fn spawn(
        options: TuningOptions,
        interval_ms: u64,
        notify: impl Fn() + Send + 'static,
    ) -> Result<Link, std::io::Error> {
        let (command_sender, commands) = mpsc::channel();
        let (event_sender, events) = mpsc::channel();
        let connected = Arc::new(AtomicBool::new(false));
        let connected_flag = Arc::clone(&connected);
        let thread = std::thread::Builder::new()
            .name("gputune-link".to_string())
            .spawn(move || {
                let send = |event: LinkEvent| {
                    if matches!(event, LinkEvent::Connected { .. }) {
                        connected_flag.store(true, Ordering::SeqCst);
                    }
                    let delivered = event_sender.send(event).is_ok();
                    notify();
                    delivered
                };
                run(&options, interval_ms, &commands, &send);
            })?;
        Ok(Link {
            commands: Some(command_sender),
            events,
            thread: Some(thread),
            connected,
        })
    }

    /// Events that arrived since the last call, oldest first; never blocks.
    pub fn drain_events(&self) -> Vec<LinkEvent> {
        self.events.try_iter().collect()
    }

    pub fn send(&self, command: LinkCommand) {
        if let Some(commands) = &self.commands {
            // A closed channel means the thread ended; its last event said why.
            let _ = commands.send(command);
        }
    }
}

/// How long closing the window waits for the link thread (and an in-process engine putting
/// the window's sessions back).
const STOP_WAIT: Duration = Duration::from_secs(15);

impl Drop for Link {
    fn drop(&mut self) {
        self.commands = None;
        let Some(thread) = self.thread.take() else {
            return;
        };
        if !self.connected.load(Ordering::SeqCst) {
            // Still connecting (a slow driver): nothing to put back yet, nothing to wait for.
            return;
        }
        if !crate::join::join_within(thread, STOP_WAIT) {
            tracing::warn!("the link thread is stuck; not waiting for it");
        }
    }
}

fn run(
    options: &TuningOptions,
    interval_ms: u64,
    commands: &Receiver<LinkCommand>,
    send: &dyn Fn(LinkEvent) -> bool,
) {
    let connected = connect(&ConnectOptions {
        backend: options.backend.clone(),
        socket: options.socket.clone(),
        folders: options.folders.clone(),
        label: WINDOW_LABEL.to_string(),
    });
    let mut interval_ms = interval_ms;
    let mut gap: Option<reconnect::Gap> = None;
    let mut client = match connected {
        Ok(client) => client,
        Err(error) => {
            // A daemon's socket is there: it is starting or restarting, so wait for it
            // (never offer the simulator instead of the daemon the machine has).
            let socket = options
                .socket
                .daemon_path()
                .filter(|path| reconnect::is_socket(path));
            let Some(path) = socket else {
                send(LinkEvent::Failed(error.to_string()));
                return;
            };
            if !send(LinkEvent::Lost {
                why: error.to_string(),
            }) {
                return;
            }
            match reconnect::again(&path, &mut interval_ms, commands, send) {
                Some(client) => client,
                None => return,
            }
        }
    };
    loop {
        match serve(&mut client, &mut interval_ms, gap.take(), commands, send) {
            Served::WindowClosed => return,
            Served::Failed(message) => {
                send(LinkEvent::Failed(message));
                return;
            }
            Served::Lost { why, gap: lost } => {
                // The daemon the window reached goes by this path; a new one listens there.
                let Some(path) = options.socket.daemon_path() else {
                    send(LinkEvent::Failed(why));
                    return;
                };
                if !send(LinkEvent::Lost { why }) {
                    return;
                }
                match reconnect::again(&path, &mut interval_ms, commands, send) {
                    Some(again) => {
                        client = again;
                        gap = Some(lost);
                    }
                    None => return,
                }
            }
        }
    }
}

/// What the window's connection is called in the daemon's messages ("held by ...").
const WINDOW_LABEL: &str = "the gputune window";

/// How one connection ended.
enum Served {
    /// The window closed: dropping the client ends its sessions.
    WindowClosed,
    /// The service failed and will not come back (an engine in this window, a refusal).
    Failed(String),
    /// The daemon went away; the window's readings end at `gap.from_ms`.
    Lost { why: String, gap: reconnect::Gap },
}

/// Serves the window over one connection until it ends. `gap`: this connection follows a
/// lost one, and the daemon's history fills the time between.
fn serve(
    client: &mut TuningClient,
    interval_ms: &mut u64,
    gap: Option<reconnect::Gap>,
    commands: &Receiver<LinkCommand>,
    send: &dyn Fn(LinkEvent) -> bool,
) -> Served {
    let welcome = client.welcome().clone();
    // Readings end where the last one was taken (or now, before the first; or where they
    // ended before, while the time missed is not read yet).
    let mut last_reading_ms = gap
        .as_ref()
        .map_or_else(crate::clock::wall_clock_ms, |gap| gap.from_ms);
    let lost = |error: ClientError, last_reading_ms: u64| match error {
        ClientError::Closed | ClientError::Timeout(_) if welcome.daemon => Served::Lost {
            why: error.to_string(),
            gap: reconnect::Gap {
                from_ms: last_reading_ms,
                gpu_uuids: welcome
                    .gpus
                    .iter()
                    .map(|gpu| gpu.identity.uuid.clone())
                    .collect(),
            },
        },
        error => Served::Failed(error.to_string()),
    };
    if !send(LinkEvent::Connected {
        backend: welcome.backend,
        simulated_because: welcome.simulated_because.clone(),
        gpus: welcome.gpus.clone(),
        daemon: welcome.daemon,
        notices: welcome.notices.clone(),
    }) {
        return Served::WindowClosed;
    }
    match client.request(Request::Snapshot) {
        Ok(Response::Snapshot(snapshot)) => {
            for tuning in snapshot.tunings {
                send(LinkEvent::Tuning(Box::new(tuning)));
            }
        }
        Ok(_) => {}
        Err(error) => return lost(error, last_reading_ms),
    }
    if let Err(error) = client.request(Request::Subscribe {
        interval_ms: *interval_ms,
    }) {
        return lost(error, last_reading_ms);
    }
    // The same cards again: only the time the window missed is read, up to the first new
    // reading (the daemon records a reading before it sends it, so by then it has all
    // before). Else the hours before, as when the window opened.
    let mut gap = gap.filter(|gap| welcome.daemon && gap.same_gpus(&welcome.gpus));
    let mut history = (welcome.daemon && gap.is_none())
        .then(|| HistoryFetch::new(&welcome.gpus, crate::clock::wall_clock_ms()));
    let mut sweeps: Vec<ActiveSweep> = Vec::new();
    let mut checks = StabilityRuns::default();
    loop {
        loop {
            match commands.try_recv() {
                Ok(LinkCommand::StartSweep(launch)) => {
                    start_sweep(*launch, &welcome.gpus, &mut sweeps, send);
                }
                Ok(LinkCommand::StopSweep { gpu_index }) => {
                    for sweep in sweeps
                        .iter_mut()
                        .filter(|sweep| sweep.gpu_index() == gpu_index)
                    {
                        sweep.stop(client);
                    }
                }
                Ok(LinkCommand::StartStability(launch)) => {
                    checks.start(client, *launch, &welcome.gpus, send);
                }
                Ok(LinkCommand::StopStability { gpu_index }) => {
                    checks.stop(client, gpu_index);
                }
                Ok(command) => {
                    if let LinkCommand::SetInterval { interval_ms: asked } = &command {
                        *interval_ms = *asked;
                    }
                    if let Err(error) =
                        crate::link::commands::handle(client, &welcome.gpus, command, send)
                    {
                        return lost(error, last_reading_ms);
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Served::WindowClosed,
            }
        }
        if let Some(fetch) = &mut history {
            if let Err(error) = fetch.turn(client, send) {
                return lost(error, last_reading_ms);
            }
            if fetch.is_done() {
                history = None;
            }
        }
        // While history is read, only a glance at the live readings between pages.
        let wait = if history.is_some() {
            Duration::ZERO
        } else {
            Duration::from_millis(50)
        };
        match client.next_event(wait) {
            Ok(Some(event)) => {
                if let Event::Samples { readings } = &event {
                    let first_ms = readings
                        .iter()
                        .filter_map(|reading| reading.as_ref().ok())
                        .map(|reading| reading.sampled_at_ms)
                        .min();
                    if let (Some(first_ms), Some(missed)) = (first_ms, gap.take()) {
                        history = Some(HistoryFetch::gap(&welcome.gpus, missed.from_ms, first_ms));
                    }
                    last_reading_ms = readings
                        .iter()
                        .filter_map(|reading| reading.as_ref().ok())
                        .map(|reading| reading.sampled_at_ms)
                        .fold(last_reading_ms, u64::max);
                }
                for sweep in &mut sweeps {
                    sweep.on_event(&event);
                }
                checks.on_event(&event);
                if !forward(event, send) {
                    return Served::WindowClosed;
                }
            }
            Ok(None) => {}
            Err(error) => return lost(error, last_reading_ms),
        }
        for sweep in &mut sweeps {
            if let Some(view) = sweep.tick(client) {
                send(LinkEvent::Sweep {
                    view: Box::new(view),
                    notes: sweep.notes.clone(),
                });
            }
        }
        sweeps.retain(|sweep| !sweep.is_finished());
        checks.tick(client, send);
    }
}

/// Starts a sweep the window asked for, one per GPU; a refusal is said as a notice.
fn start_sweep(
    launch: SweepLaunch,
    gpus: &[GpuInfo],
    sweeps: &mut Vec<ActiveSweep>,
    send: &dyn Fn(LinkEvent) -> bool,
) {
    let gpu_index = launch.gpu_index;
    let refused = |message: String| {
        send(LinkEvent::Notice {
            gpu_index: Some(gpu_index),
            notice: Notice::Error(message),
        });
    };
    if sweeps.iter().any(|sweep| sweep.gpu_index() == gpu_index) {
        refused(format!("A sweep already runs on GPU {gpu_index}."));
        return;
    }
    let Some(gpu) = gpus.get(gpu_index as usize) else {
        refused(format!("There is no GPU {gpu_index}."));
        return;
    };
    match ActiveSweep::start(launch, gpu) {
        Ok(sweep) => sweeps.push(sweep),
        Err(message) => refused(message),
    }
}

/// Passes one service event to the window; false when the window is gone.
fn forward(event: Event, send: &dyn Fn(LinkEvent) -> bool) -> bool {
    match event {
        Event::Samples { readings } => send(LinkEvent::Samples(readings)),
        Event::Engine { event } => match *event {
            EngineEvent::Tuning { tuning } => send(LinkEvent::Tuning(Box::new(tuning))),
            EngineEvent::Trial { status, .. } => send(LinkEvent::Trial(Box::new(status))),
            EngineEvent::Notice { gpu_index, notice } => {
                send(LinkEvent::Notice { gpu_index, notice })
            }
            // The engine's notice about the same Xid tells the window.
            EngineEvent::Critical { .. } => true,
            EngineEvent::SessionEnded { report, .. } => send(LinkEvent::Notice {
                gpu_index: report.restored.first().map(|gpu| gpu.gpu_index),
                notice: if report.is_complete() {
                    Notice::Info(crate::tuning::engine::report_lines(&report).join(" "))
                } else {
                    Notice::Error(crate::tuning::engine::report_lines(&report).join(" "))
                },
            }),
        },
    }
}
