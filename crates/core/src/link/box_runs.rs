//! The runs over the whole box that the window's Box view starts (the ranking, and the box
//! check and the link test as they join), driven by the link thread on its own connection as
//! stability.rs drives a check: the same engines the CLI runs, their sessions the link's
//! (closing the window ends them and the cards are put back). One run at a time, as each
//! loads every card; the window sees views, a refusal included.

use std::time::{Duration, Instant};

use crate::link::LinkEvent;
use crate::service::client::TuningClient;
use gputune_formats::protocol::Event;
use gputune_formats::reports::rank::RankReport;

/// How often the window hears of a running run.
const VIEW_EVERY: Duration = Duration::from_millis(500);

/// What the window asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum BoxRunKind {
    /// Rank the cards (`gputune rank`): `together_s` of load on all at once, half of it on
    /// each alone first.
    Rank { together_s: f64 },
}

impl BoxRunKind {
    /// "ranking", for sentences.
    pub fn noun(&self) -> &'static str {
        match self {
            BoxRunKind::Rank { .. } => "ranking",
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
        }
    }
}

/// Where a run stands: its phase, how far into it, what is left.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoxProgress {
    /// "GPU 3 alone (4 of 8)", "all 8 together".
    pub phase: String,
    pub phase_elapsed_s: f64,
    pub phase_s: f64,
    /// Seconds the whole run has left, about.
    pub left_s: f64,
    /// A line for each card under load now.
    pub cards: Vec<String>,
}

/// One run as the window sees it: running with its progress, ended with its report, or
/// refused before anything was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxRunView<R> {
    pub running: bool,
    pub progress: Option<BoxProgress>,
    pub report: Option<R>,
    /// Why it did not start (a busy card, cards at different settings, no CUDA).
    pub refused: Option<String>,
}

impl<R> BoxRunView<R> {
    fn refused(message: String) -> BoxRunView<R> {
        BoxRunView {
            running: false,
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
                progress: Some(self.engine.progress()),
                report: self.engine.report().cloned(),
                refused: None,
            };
            send(LinkEvent::BoxRun(Box::new(E::news(view))));
        }
        ended
    }
}

/// The run the window started, if one runs.
#[derive(Default)]
pub struct BoxRuns {
    rank: Option<Driven<super::rank::RankRun>>,
}

impl BoxRuns {
    fn running(&self) -> bool {
        self.rank.is_some()
    }

    /// Starts what the window asked for; a refusal is said in the kind's view.
    pub fn start(
        &mut self,
        client: &mut TuningClient,
        launch: BoxLaunch,
        send: &dyn Fn(LinkEvent) -> bool,
    ) {
        let refuse = |news: BoxRunNews| {
            send(LinkEvent::BoxRun(Box::new(news)));
        };
        if self.running() {
            refuse(launch.refused(format!(
                "Another run over the box is on; stop it or let it end before the {}.",
                launch.kind.noun()
            )));
            return;
        }
        match launch.kind {
            BoxRunKind::Rank { together_s } => {
                match super::rank::RankRun::start(client, &launch.gpu_indices, together_s) {
                    Ok(run) => self.rank = Some(Driven::new(run)),
                    Err(message) => refuse(BoxRunNews::Rank(BoxRunView::refused(message))),
                }
            }
        }
    }

    /// Stops the run now: what was measured is reported.
    pub fn stop(&mut self, client: &mut TuningClient) {
        if let Some(rank) = &mut self.rank {
            rank.engine.stop(client, "stopped from the window");
        }
    }

    pub fn on_event(&mut self, event: &Event) {
        if let Some(rank) = &mut self.rank {
            rank.engine.take_event(event);
        }
    }

    /// Moves the run on; an ended one is let go (the window keeps its report).
    pub fn tick(&mut self, client: &mut TuningClient, send: &dyn Fn(LinkEvent) -> bool) {
        if let Some(rank) = &mut self.rank
            && rank.tick(client, send)
        {
            self.rank = None;
        }
    }
}
