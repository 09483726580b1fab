//! One connection of the window's link: greets, reads the snapshot, subscribes, reads the
//! daemon's history (all of it on opening, the missed time after a reconnect), then passes the
//! window's commands and the service's events until the window closes or the service goes.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use crate::link::history::HistoryFetch;
use crate::link::stability::StabilityRuns;
use crate::link::sweep::{ActiveSweep, SweepLaunch};
use crate::link::{LinkCommand, LinkEvent, reconnect};
use crate::service::client::{ClientError, TuningClient};
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{EngineEvent, GpuInfo};

/// How one connection ended.
pub(super) enum Served {
    /// The window closed: dropping the client ends its sessions.
    WindowClosed,
    /// The service failed and will not come back (an engine in this window, a refusal).
    Failed(String),
    /// The daemon went away; the window's readings end at `gap.from_ms`.
    Lost { why: String, gap: reconnect::Gap },
}

/// Serves the window over one connection until it ends. `gap`: this connection follows a
/// lost one, and the daemon's history fills the time between.
pub(super) fn serve(
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
