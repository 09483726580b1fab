//! The window's link to the tuning service (the daemon, or an engine in this process): a
//! thread that connects, subscribes to readings and tuning news, and sends the window's
//! requests. The window never waits on it; it repaints when news arrives.
//!
//! No egui here: the window (`crate::ui`) reads `LinkEvent`s and sends `LinkCommand`s.
//! commands.rs turns the window's commands into requests, history.rs reads the daemon's
//! history on opening, sweep.rs and stability.rs drive a sweep, a check or a scan.

mod commands;
mod connection;
mod history;
mod reconnect;
pub mod stability;
pub mod sweep;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::link::connection::{Served, serve};
use crate::link::stability::{StabilityLaunch, StabilityView};
use crate::link::sweep::SweepLaunch;
use crate::service::client::{ConnectOptions, TuningOptions, connect};
use crate::sweep::runner::SweepView;
use gputune_formats::card::{BackendKind, DeviceError, Setting, Telemetry};
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::history::HistoryRow;
use gputune_formats::tuning::ChangeNote;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{GpuApplied, GpuInfo, GpuTuning, TrialStatus, TuneError};

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
    /// Have the daemon keep the card at or below a temperature by moving its power limit
    /// (it outlives the window); `None` clears it and the limit goes back.
    SetTemperatureHold {
        gpu_index: u32,
        hold: Option<gputune_formats::temperature_hold::TemperatureHold>,
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
pub(crate) const WINDOW_LABEL: &str = "the gputune window";
