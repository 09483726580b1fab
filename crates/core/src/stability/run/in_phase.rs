//! A box check's run: the same checked GEMM work, handed out by the shared in-phase schedule
//! (`together/schedule.rs`) rather than the run's own rounds. The worker waits for each pulse
//! edge itself (`Work::Gemm::not_before`), and the next piece is queued behind the one that
//! runs, so every card's burst begins at the shared instant however late the caller's tick
//! comes; the instant each began is kept, to show how well the edges lined up.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{CheckRun, State};
use crate::stability::together::schedule::InPhase;
use crate::stability::worker::Work;
use gputune_formats::reports::stability::Ending;

/// The most edges a run keeps (a ten-minute check's 20 ms pulses are about 5,000).
const MOST_EDGES: usize = 100_000;

/// When a card began one pulse edge's burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeBegun {
    pub edge: u64,
    pub began: Instant,
}

/// What a run following the schedule keeps.
#[derive(Debug, Default)]
pub(super) struct Follow {
    schedule: Option<Arc<InPhase>>,
    /// For each batch handed out, oldest first, the edge it begins at (when at one).
    pending_edges: VecDeque<Option<u64>>,
    /// Where the last batch handed out ends: the next one follows from there.
    handed_out_until: Option<Instant>,
    edges: Vec<EdgeBegun>,
}

impl Follow {
    pub(super) fn activity(&self) -> String {
        let Some(schedule) = &self.schedule else {
            return "prepared, waiting for every card".to_string();
        };
        schedule
            .step_at(Instant::now())
            .and_then(|index| schedule.steps().get(index))
            .map_or_else(
                || "waiting for the first edge".to_string(),
                |timed| timed.step.describe(),
            )
    }

    pub(super) fn batch_done(&mut self, began: Option<Instant>) {
        if let (Some(Some(edge)), Some(began)) = (self.pending_edges.pop_front(), began)
            && self.edges.len() < MOST_EDGES
        {
            self.edges.push(EdgeBegun { edge, began });
        }
    }
}

impl CheckRun {
    /// A box check's run on `worker` (prepared already when `prepared` says so): it prepares,
    /// then waits for the schedule every card shares ([`CheckRun::follow`]).
    pub fn start_in_phase(
        worker: crate::stability::worker::ComputeWorker,
        options: crate::stability::rounds::CheckOptions,
        prepared: Option<gputune_formats::reports::stability::Prepared>,
    ) -> CheckRun {
        let mut run = CheckRun::start(worker, options, prepared);
        run.in_phase = Some(Follow::default());
        run
    }

    /// Prepared and waiting for the schedule.
    pub fn is_ready(&self) -> bool {
        matches!(self.state, State::Running { .. })
            && self
                .in_phase
                .as_ref()
                .is_some_and(|follow| follow.schedule.is_none())
    }

    /// Follows `schedule` from its origin (its seconds of checked work count from there).
    pub fn follow(&mut self, schedule: Arc<InPhase>) {
        if let Some(follow) = &mut self.in_phase {
            self.started = Some(schedule.origin());
            follow.schedule = Some(schedule);
        }
    }

    /// Whether the worker has nothing pending (polling it for its answers): a finished run's
    /// last batches may still be on the card, and its worker is taken back only after.
    pub fn settled(&mut self) -> bool {
        while self.worker.is_busy() {
            match self.worker.poll() {
                crate::stability::worker::Poll::Busy { .. } => break,
                _ => continue,
            }
        }
        !self.worker.is_busy()
    }

    /// The driver lost the card (fallen off the bus): a finding, as a CUDA fault is.
    pub fn lost(&mut self, message: &str) {
        self.finish(Ending::Unstable {
            finding: gputune_formats::reports::stability::Finding::Fault {
                message: message.to_string(),
            },
        });
    }

    /// The edges this card began its bursts at.
    pub fn edges(&self) -> &[EdgeBegun] {
        self.in_phase
            .as_ref()
            .map_or(&[][..], |follow| follow.edges.as_slice())
    }

    /// Keeps two batches handed out: the one that runs and the next (its edge's wait included).
    pub(super) fn hand_out_in_phase(&mut self) {
        while matches!(self.state, State::Running { .. }) && self.worker.queued() < 2 {
            let Some(follow) = self.in_phase.as_ref() else {
                return;
            };
            let Some(schedule) = follow.schedule.clone() else {
                return;
            };
            let now = Instant::now();
            let from = follow.handed_out_until.map_or(now, |until| until.max(now));
            let Some(slot) = schedule.next_slot(from) else {
                if self.worker.queued() == 0 {
                    self.finish(Ending::Completed);
                }
                return;
            };
            let length_s = slot
                .ends
                .saturating_duration_since(slot.begins)
                .as_secs_f64();
            let pass_s = self.gemm_pass_s.unwrap_or(0.0);
            // Less than a pass left of a burst: the burst is done.
            if slot.edge.is_none() && length_s < pass_s {
                if let Some(follow) = &mut self.in_phase {
                    follow.handed_out_until = Some(slot.ends);
                }
                continue;
            }
            let passes = self.passes_for(length_s);
            let work = Work::Gemm {
                passes,
                // Only an edge waits for its instant; the rest of a burst runs on at once.
                not_before: slot.edge.and(Some(slot.begins)).filter(|at| *at > now),
            };
            let deadline = self.deadline_for(&work) + slot.begins.saturating_duration_since(now);
            if !self.worker.queue(work, deadline) {
                return;
            }
            // The batch ends when its passes do: the next one follows from there (just past the
            // edge while a pass's time is not known yet, so the next joins this burst).
            let runs_for =
                Duration::from_secs_f64(pass_s * f64::from(passes)).max(Duration::from_micros(10));
            if let Some(follow) = &mut self.in_phase {
                follow.pending_edges.push_back(slot.edge);
                follow.handed_out_until = Some(slot.begins.max(now) + runs_for);
            }
        }
    }
}
