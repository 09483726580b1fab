//! One connection of the window's link: greets, reads the snapshot, subscribes, reads the
//! daemon's history (all of it on opening, the missed time after a reconnect), then passes the
//! window's commands and the service's events until the window closes or the service goes.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use crate::device::BackendOptions;
use crate::link::box_runs::BoxRuns;
use crate::link::history::HistoryFetch;
use crate::link::stability::StabilityRuns;
use crate::link::sweep::{ActiveSweep, SweepLaunch};
use crate::link::{LinkCommand, LinkEvent, reconnect};
use crate::service::client::{ClientError, TuningClient};
use gputune_formats::protocol::{Event, Request, Response, Welcome};
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
    backend: &BackendOptions,
    interval_ms: &mut u64,
    gap: Option<reconnect::Gap>,
    commands: &Receiver<LinkCommand>,
    send: &dyn Fn(LinkEvent) -> bool,
) -> Served {
    let welcome = client.welcome().clone();
    // Readings end where the last one was taken (or now, before the first; or where they
    // ended before, while the time missed is not read yet).
    let last_reading_ms = gap
        .as_ref()
        .map_or_else(crate::clock::wall_clock_ms, |gap| gap.from_ms);
    let ended = |ended: Ended, last_reading_ms: u64| match ended {
        Ended::WindowClosed => Served::WindowClosed,
        Ended::Client(error @ (ClientError::Closed | ClientError::Timeout(_)))
            if welcome.daemon =>
        {
            Served::Lost {
                why: error.to_string(),
                gap: reconnect::Gap {
                    from_ms: last_reading_ms,
                    gpu_uuids: welcome
                        .gpus
                        .iter()
                        .map(|gpu| gpu.identity.uuid.clone())
                        .collect(),
                },
            }
        }
        Ended::Client(error) => Served::Failed(error.to_string()),
    };
    if let Err(why) = greet(client, &welcome, *interval_ms, send) {
        return ended(why, last_reading_ms);
    }
    let mut live = Live::new(&welcome, gap, last_reading_ms, backend);
    loop {
        let turn = live
            .take_commands(client, commands, interval_ms, send)
            .and_then(|()| live.read_history(client, send))
            .and_then(|()| live.next_event(client, send));
        if let Err(why) = turn {
            return ended(why, live.last_reading_ms);
        }
        live.tick(client, send);
    }
}

/// Why a connection's loop stopped.
enum Ended {
    WindowClosed,
    Client(ClientError),
}

impl From<ClientError> for Ended {
    fn from(error: ClientError) -> Ended {
        Ended::Client(error)
    }
}

/// Tells the window it is connected, then sends it what each card holds and subscribes.
fn greet(
    client: &mut TuningClient,
    welcome: &Welcome,
    interval_ms: u64,
    send: &dyn Fn(LinkEvent) -> bool,
) -> Result<(), Ended> {
    if !send(LinkEvent::Connected {
        backend: welcome.backend,
        simulated_because: welcome.simulated_because.clone(),
        gpus: welcome.gpus.clone(),
        daemon: welcome.daemon,
        notices: welcome.notices.clone(),
    }) {
        return Err(Ended::WindowClosed);
    }
    if let Response::Snapshot(snapshot) = client.request(Request::Snapshot)? {
        for tuning in snapshot.tunings {
            send(LinkEvent::Tuning(Box::new(tuning)));
        }
    }
    client.request(Request::Subscribe { interval_ms })?;
    Ok(())
}

/// What one connection keeps while it serves the window.
struct Live<'a> {
    gpus: &'a [GpuInfo],
    /// When the last reading was taken: where the window's readings end if the daemon goes.
    last_reading_ms: u64,
    /// The time a reconnect missed, read from the history at the first new reading.
    gap: Option<reconnect::Gap>,
    history: Option<HistoryFetch>,
    sweeps: Vec<ActiveSweep>,
    checks: StabilityRuns,
    /// The run over the whole box the Box view started.
    box_runs: BoxRuns,
}

impl<'a> Live<'a> {
    fn new(
        welcome: &'a Welcome,
        gap: Option<reconnect::Gap>,
        last_reading_ms: u64,
        backend: &BackendOptions,
    ) -> Live<'a> {
        // The same cards again: only the time the window missed is read, up to the first new
        // reading (the daemon records a reading before it sends it, so by then it has all
        // before). Else the hours before, as when the window opened.
        let gap = gap.filter(|gap| welcome.daemon && gap.same_gpus(&welcome.gpus));
        let history = (welcome.daemon && gap.is_none())
            .then(|| HistoryFetch::new(&welcome.gpus, crate::clock::wall_clock_ms()));
        Live {
            gpus: &welcome.gpus,
            last_reading_ms,
            gap,
            history,
            sweeps: Vec::new(),
            checks: StabilityRuns::default(),
            box_runs: BoxRuns::new(backend.clone()),
        }
    }

    /// Every command the window sent since the last turn.
    fn take_commands(
        &mut self,
        client: &mut TuningClient,
        commands: &Receiver<LinkCommand>,
        interval_ms: &mut u64,
        send: &dyn Fn(LinkEvent) -> bool,
    ) -> Result<(), Ended> {
        loop {
            match commands.try_recv() {
                Ok(LinkCommand::StartSweep(launch)) => {
                    start_sweep(*launch, self.gpus, &mut self.sweeps, send);
                }
                Ok(LinkCommand::StopSweep { gpu_index }) => {
                    for sweep in self
                        .sweeps
                        .iter_mut()
                        .filter(|sweep| sweep.gpu_indices().contains(&gpu_index))
                    {
                        sweep.stop(client);
                    }
                }
                Ok(LinkCommand::StartStability(launch)) => {
                    self.checks.start(client, *launch, self.gpus, send);
                }
                Ok(LinkCommand::StopStability { gpu_index }) => {
                    self.checks.stop(client, gpu_index);
                }
                Ok(LinkCommand::StartBoxRun(launch)) => {
                    self.box_runs.start(client, *launch, send);
                }
                Ok(LinkCommand::StopBoxRun) => self.box_runs.stop(client),
                Ok(command) => {
                    if let LinkCommand::SetInterval { interval_ms: asked } = &command {
                        *interval_ms = *asked;
                    }
                    crate::link::commands::handle(client, self.gpus, command, send)?;
                }
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => return Err(Ended::WindowClosed),
            }
        }
    }

    /// One page of the daemon's history, while there is some to read.
    fn read_history(
        &mut self,
        client: &mut TuningClient,
        send: &dyn Fn(LinkEvent) -> bool,
    ) -> Result<(), Ended> {
        if let Some(fetch) = &mut self.history {
            fetch.turn(client, send)?;
            if fetch.is_done() {
                self.history = None;
            }
        }
        Ok(())
    }

    /// The service's next event, to the sweeps, the checks and the window.
    fn next_event(
        &mut self,
        client: &mut TuningClient,
        send: &dyn Fn(LinkEvent) -> bool,
    ) -> Result<(), Ended> {
        // While history is read, only a glance at the live readings between pages.
        let wait = if self.history.is_some() {
            Duration::ZERO
        } else {
            self.box_runs
                .longest_wait()
                .unwrap_or(Duration::from_millis(50))
        };
        let Some(event) = client.next_event(wait)? else {
            return Ok(());
        };
        if let Event::Samples { readings } = &event {
            let taken_ms = || {
                readings
                    .iter()
                    .filter_map(|reading| reading.as_ref().ok())
                    .map(|reading| reading.sampled_at_ms)
            };
            if let (Some(first_ms), Some(missed)) = (taken_ms().min(), self.gap.take()) {
                self.history = Some(HistoryFetch::gap(self.gpus, missed.from_ms, first_ms));
            }
            self.last_reading_ms = taken_ms().fold(self.last_reading_ms, u64::max);
        }
        for sweep in &mut self.sweeps {
            sweep.on_event(&event);
        }
        self.checks.on_event(&event);
        self.box_runs.on_event(&event);
        if forward(event, send) {
            Ok(())
        } else {
            Err(Ended::WindowClosed)
        }
    }

    /// The sweeps' and checks' next steps; a finished sweep is let go.
    fn tick(&mut self, client: &mut TuningClient, send: &dyn Fn(LinkEvent) -> bool) {
        for sweep in &mut self.sweeps {
            if let Some(view) = sweep.tick(client) {
                send(LinkEvent::Sweep {
                    view: Box::new(view),
                    notes: sweep.notes.clone(),
                });
            }
        }
        self.sweeps.retain(|sweep| !sweep.is_finished());
        self.checks.tick(client, send);
        self.box_runs.tick(client, send);
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
    let asked: Vec<u32> = std::iter::once(gpu_index)
        .chain(launch.also.iter().map(|(index, _)| *index))
        .collect();
    if let Some(busy) = asked.iter().find(|index| {
        sweeps
            .iter()
            .any(|sweep| sweep.gpu_indices().contains(index))
    }) {
        refused(format!("A sweep already runs on GPU {busy}."));
        return;
    }
    match ActiveSweep::start(launch, gpus) {
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
