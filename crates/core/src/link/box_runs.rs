//! The runs over the whole box that the window's Box view starts (the box check,
//! box_check.rs; the ranking, rank.rs; the link test, copy_test.rs), driven by the link thread on its own connection as
//! stability.rs drives a check: the same engines the CLI runs, their sessions the link's
//! (closing the window ends them and the cards are put back). One run at a time, as each
//! loads every card; the window sees views, a refusal included.

use std::time::{Duration, Instant};

use crate::device::BackendOptions;
use crate::link::LinkEvent;
use crate::link::box_check::BoxCheckRun;
use crate::link::copy_test::CopyTestRun;
use crate::link::rank::RankRun;
use crate::pcie::busy::BusyCard;
use crate::service::client::TuningClient;
use crate::stability::busy::OtherWork;
use gputune_formats::card::GpuProcess;
use gputune_formats::protocol::Event;
use gputune_formats::reports::box_check::BoxCheckReport;
use gputune_formats::reports::links::LinksReport;
use gputune_formats::reports::rank::RankReport;

/// How often the window hears of a running run.
const VIEW_EVERY: Duration = Duration::from_millis(500);
/// The box check's tick, as `gputune stability --together` ticks it.
const BOX_CHECK_TICK: Duration = crate::stability::together::TICK;

/// What the window asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum BoxRunKind {
    /// Rank the cards (`gputune rank`): `together_s` of load on all at once, half of it on
    /// each alone first.
    Rank { together_s: f64 },
    /// Test the links (`gputune links`): copies of `size_bytes` each, checked bit for bit.
    Links { size_bytes: u64 },
    /// Check the whole box (`gputune stability --together`): every card at once, in phase, for
    /// `duration_s`; at `clock_cap_mhz` when given (a recommended cap being proven).
    BoxCheck {
        duration_s: f64,
        clock_cap_mhz: Option<u32>,
    },
}

impl BoxRunKind {
    /// "ranking", for sentences.
    pub fn noun(&self) -> &'static str {
        match self {
            BoxRunKind::Rank { .. } => "ranking",
            BoxRunKind::Links { .. } => "link test",
            BoxRunKind::BoxCheck { .. } => "box check",
        }
    }
}

/// A run over these cards.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxLaunch {
    pub kind: BoxRunKind,
    pub gpu_indices: Vec<u32>,
}

impl BoxLaunch {
    /// The news that it did not start, and why.
    pub(super) fn refused(&self, message: String) -> BoxRunNews {
        match self.kind {
            BoxRunKind::Rank { .. } => BoxRunNews::Rank(BoxRunView::refused(message)),
            BoxRunKind::Links { .. } => BoxRunNews::Links(BoxRunView::refused(message)),
            BoxRunKind::BoxCheck { .. } => BoxRunNews::BoxCheck(BoxRunView::refused(message)),
        }
    }
}

/// Where a run stands: its phase, how far into it, what is left.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoxProgress {
    /// "GPU 3 alone (4 of 8)", "all 8 together", "GPU 2 → GPU 5".
    pub phase: String,
    /// How far: `done` of `of`, in seconds of the phase or in steps of the whole run.
    pub done: f64,
    pub of: f64,
    pub unit: ProgressUnit,
    /// Seconds the whole run has left, about, when known.
    pub left_s: Option<f64>,
    /// A line for each card under load now.
    pub cards: Vec<String>,
}

/// What a progress counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressUnit {
    /// Seconds of the phase under way.
    #[default]
    Seconds,
    /// Steps (cards and pairs) of the whole run.
    Steps,
}

/// One run as the window sees it: running with its progress, ended with its report, or
/// refused before anything was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxRunView<R> {
    pub running: bool,
    /// Stopped from the window, still ending (the link test's copies under way finish first).
    pub stopping: bool,
    pub progress: Option<BoxProgress>,
    pub report: Option<R>,
    /// Why it did not run (a busy card, cards at different settings, no CUDA).
    pub refused: Option<String>,
}

impl<R> BoxRunView<R> {
    fn refused(message: String) -> BoxRunView<R> {
        BoxRunView {
            running: false,
            stopping: false,
            progress: None,
            report: None,
            refused: Some(message),
        }
    }
}

/// News of a run, by kind.
#[derive(Debug, Clone, PartialEq)]
pub enum BoxRunNews {
    Rank(BoxRunView<RankReport>),
    Links(BoxRunView<LinksReport>),
    BoxCheck(BoxRunView<BoxCheckReport>),
}

/// An engine of the box as the link thread drives it: never blocks; fed the service's events,
/// ticked often; its report once it has ended and put the cards back.
pub(super) trait BoxEngine {
    type Report: Clone;
    fn take_event(&mut self, event: &Event);
    /// Moves it on; true once it has its report.
    fn tick(&mut self, client: &mut TuningClient) -> bool;
    fn stop(&mut self, client: &mut TuningClient, reason: &str);
    fn progress(&self) -> BoxProgress;
    fn report(&self) -> Option<&Self::Report>;
    /// Why it could not run, when that came out after it started.
    fn failure(&self) -> Option<String> {
        None
    }
    /// Stopped, still ending.
    fn stopping(&self) -> bool {
        false
    }
    /// The view's news for the window.
    fn news(view: BoxRunView<Self::Report>) -> BoxRunNews;
}

/// A running engine and when the window last heard of it.
struct Driven<E> {
    engine: E,
    viewed_at: Instant,
}

impl<E: BoxEngine> Driven<E> {
    fn new(engine: E) -> Driven<E> {
        Driven {
            engine,
            // The window hears of it at the first tick.
            viewed_at: Instant::now() - VIEW_EVERY,
        }
    }

    /// Moves it on and tells the window (each half second, and at the end); true once ended.
    fn tick(&mut self, client: &mut TuningClient, send: &dyn Fn(LinkEvent) -> bool) -> bool {
        let ended = self.engine.tick(client);
        if ended || self.viewed_at.elapsed() >= VIEW_EVERY {
            self.viewed_at = Instant::now();
            let view = BoxRunView {
                running: !ended,
                stopping: !ended && self.engine.stopping(),
                progress: Some(self.engine.progress()),
                report: self.engine.report().cloned(),
                refused: self.engine.failure(),
            };
            send(LinkEvent::BoxRun(Box::new(E::news(view))));
        }
        ended
    }
}

/// The run the window started, if one runs.
pub struct BoxRuns {
    /// How the link test opens the cards (as the window was started).
    backend: BackendOptions,
    /// Each card's processes, as the last readings listed them: the link test and the box
    /// check refuse a card others compute on, as `gputune links` and `stability` do.
    processes: Vec<Option<Vec<GpuProcess>>>,
    rank: Option<Driven<RankRun>>,
    links: Option<Driven<CopyTestRun>>,
    box_check: Option<Driven<BoxCheckRun>>,
}

impl BoxRuns {
    pub fn new(backend: BackendOptions) -> BoxRuns {
        BoxRuns {
            backend,
            processes: Vec::new(),
            rank: None,
            links: None,
            box_check: None,
        }
    }

    fn running(&self) -> bool {
        self.rank.is_some() || self.links.is_some() || self.box_check.is_some()
    }

    /// How long the link thread may wait for the service's next event: a few milliseconds
    /// while a box check runs (its pulses' shared edges are handed out at its ticks).
    pub fn longest_wait(&self) -> Option<Duration> {
        self.box_check.as_ref().map(|_| BOX_CHECK_TICK)
    }

    /// Starts what the window asked for; a refusal is said in the kind's view.
    pub fn start(
        &mut self,
        client: &mut TuningClient,
        launch: BoxLaunch,
        send: &dyn Fn(LinkEvent) -> bool,
    ) {
        let refuse = |message: String| {
            send(LinkEvent::BoxRun(Box::new(launch.refused(message))));
        };
        if self.running() {
            refuse(format!(
                "Another run over the box is on (or a stopped link test still finishes its copies); stop it or let it end before the {}.",
                launch.kind.noun()
            ));
            return;
        }
        let started = match &launch.kind {
            BoxRunKind::Rank { together_s } => {
                RankRun::start(client, &launch.gpu_indices, *together_s)
                    .map(|run| self.rank = Some(Driven::new(run)))
            }
            BoxRunKind::Links { size_bytes } => self
                .refuse_busy(&launch.gpu_indices)
                .and_then(|()| CopyTestRun::start(&self.backend, &launch.gpu_indices, *size_bytes))
                .map(|run| self.links = Some(Driven::new(run))),
            BoxRunKind::BoxCheck {
                duration_s,
                clock_cap_mhz,
            } => BoxCheckRun::start(
                client,
                &launch.gpu_indices,
                &self.processes,
                *duration_s,
                *clock_cap_mhz,
            )
            .map(|run| self.box_check = Some(Driven::new(run))),
        };
        if let Err(message) = started {
            refuse(message);
        }
    }

    /// Other programs computing on a card: its copies would share the bus with theirs (the
    /// link test's own refusal, in the CLI's words).
    fn refuse_busy(&self, gpu_indices: &[u32]) -> Result<(), String> {
        let refusals: Vec<String> = gpu_indices
            .iter()
            .filter_map(|&gpu| {
                let work = OtherWork {
                    processes: self.processes.get(gpu as usize).cloned().flatten(),
                    force: false,
                    force_hint: String::new(),
                };
                let processes: Vec<GpuProcess> = work.computing().into_iter().cloned().collect();
                (!processes.is_empty()).then(|| {
                    crate::pcie::busy::refusal(
                        &BusyCard { gpu, processes },
                        " (or test beside them with `gputune links --force`)",
                    )
                })
            })
            .collect();
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(refusals.join("\n"))
        }
    }

    /// Stops the run now: what was measured is reported (a link test stops between copies:
    /// the one under way finishes first).
    pub fn stop(&mut self, client: &mut TuningClient) {
        if let Some(rank) = &mut self.rank {
            rank.engine.stop(client, "stopped from the window");
        }
        if let Some(links) = &mut self.links {
            links.engine.stop(client, "stopped from the window");
        }
        if let Some(box_check) = &mut self.box_check {
            box_check.engine.stop(client, "stopped from the window");
        }
    }

    pub fn on_event(&mut self, event: &Event) {
        if let Event::Samples { readings } = event {
            self.processes = readings
                .iter()
                .map(|reading| reading.as_ref().ok().and_then(|r| r.processes.clone()))
                .collect();
        }
        if let Some(rank) = &mut self.rank {
            rank.engine.take_event(event);
        }
        if let Some(links) = &mut self.links {
            links.engine.take_event(event);
        }
        if let Some(box_check) = &mut self.box_check {
            box_check.engine.take_event(event);
        }
    }

    /// Moves the run on; an ended one is let go (the window keeps its report).
    pub fn tick(&mut self, client: &mut TuningClient, send: &dyn Fn(LinkEvent) -> bool) {
        if let Some(rank) = &mut self.rank
            && rank.tick(client, send)
        {
            self.rank = None;
        }
        if let Some(links) = &mut self.links
            && links.tick(client, send)
        {
            self.links = None;
        }
        if let Some(box_check) = &mut self.box_check
            && box_check.tick(client, send)
        {
            self.box_check = None;
        }
    }
}
