//! A [`ComputeDevice`] on its own thread, so a kernel that never returns cannot hang the
//! check: the check hands it one piece of work at a time and gives up on it past a deadline.
//! A worker given up on is left behind (its thread cannot be stopped); the process ending
//! frees the card's context.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

use super::compute::{CardConditions, ComputeDevice, ComputeError, ComputeSetup, VramPattern};
use gputune_formats::reports::stability::{Checked, Prepared};

/// One piece of work.
#[derive(Debug, Clone)]
pub enum Work {
    Prepare {
        setup: ComputeSetup,
        fma_reference: Vec<u32>,
    },
    Gemm {
        passes: u32,
        /// Wait for this instant before starting (a box check's shared pulse edge).
        not_before: Option<Instant>,
    },
    Fma,
    Vram {
        pattern: VramPattern,
    },
}

/// What a piece of work gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    Prepared(Result<Prepared, ComputeError>),
    Checked(Result<Checked, ComputeError>),
}

enum Message {
    Work(Work),
    Observe(CardConditions),
}

/// Where the worker stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Poll {
    /// Nothing handed out.
    Idle,
    /// Working, for `waited` so far.
    Busy {
        waited: Duration,
    },
    Done(Done),
    /// The work ran past its deadline: the kernel hung.
    Hung {
        waited: Duration,
    },
    /// The thread is gone (it cannot be after a panic, which is caught; kept for safety).
    Gone,
}

struct Pending {
    sent: Instant,
    deadline: Duration,
}

/// The worker thread and the one piece of work it has.
pub struct ComputeWorker {
    to_worker: Sender<Message>,
    from_worker: Receiver<(Done, Instant)>,
    /// The work handed out, oldest first: one piece, or two where the next was queued behind
    /// it ([`ComputeWorker::queue`]).
    pending: VecDeque<Pending>,
    hung: bool,
    /// When the device began the last piece of work that came back (after any wait).
    last_began: Option<Instant>,
}

impl ComputeWorker {
    pub fn start(device: Box<dyn ComputeDevice>, name: &str) -> Result<ComputeWorker, String> {
        let (to_worker, inbox) = mpsc::channel::<Message>();
        let (outbox, from_worker) = mpsc::channel::<(Done, Instant)>();
        thread::Builder::new()
            .name(format!("check {name}"))
            .spawn(move || serve(device, &inbox, &outbox))
            .map_err(|error| format!("The check's worker thread could not start: {error}."))?;
        Ok(ComputeWorker {
            to_worker,
            from_worker,
            pending: VecDeque::new(),
            hung: false,
            last_began: None,
        })
    }

    /// Hands out `work`, which must end within `deadline`. False when work is pending or the
    /// worker hung.
    pub fn send(&mut self, work: Work, deadline: Duration) -> bool {
        self.pending.is_empty() && self.queue(work, deadline)
    }

    /// Queues `work` behind what is pending (at most one piece): a box check hands out the next
    /// pulse while the last runs, so no tick's lateness delays an edge. Its deadline counts
    /// from when the piece before it ends. False when two are pending or the worker hung.
    pub fn queue(&mut self, work: Work, deadline: Duration) -> bool {
        if self.pending.len() >= 2 || self.hung {
            return false;
        }
        if self.to_worker.send(Message::Work(work)).is_err() {
            return false;
        }
        let deadline = deadline
            + self
                .pending
                .front()
                .map_or(Duration::ZERO, |front| front.deadline);
        self.pending.push_back(Pending {
            sent: Instant::now(),
            deadline,
        });
        true
    }

    /// How many pieces of work are handed out and not yet back.
    pub fn queued(&self) -> usize {
        self.pending.len()
    }

    /// Tells the device what the card is doing; it takes it before its next work.
    pub fn observe(&self, conditions: CardConditions) {
        let _ = self.to_worker.send(Message::Observe(conditions));
    }

    /// When the device began the last piece of work that came back (after any wait).
    pub fn last_began(&self) -> Option<Instant> {
        self.last_began
    }

    pub fn is_busy(&self) -> bool {
        !self.pending.is_empty()
    }

    pub fn poll(&mut self) -> Poll {
        let Some(pending) = self.pending.front() else {
            return if self.hung { Poll::Gone } else { Poll::Idle };
        };
        match self.from_worker.try_recv() {
            Ok((done, began)) => {
                self.pending.pop_front();
                self.last_began = Some(began);
                Poll::Done(done)
            }
            Err(TryRecvError::Empty) => {
                let waited = pending.sent.elapsed();
                if waited > pending.deadline {
                    self.pending.clear();
                    self.hung = true;
                    Poll::Hung { waited }
                } else {
                    Poll::Busy { waited }
                }
            }
            Err(TryRecvError::Disconnected) => {
                self.pending.clear();
                self.hung = true;
                Poll::Gone
            }
        }
    }
}

fn serve(
    mut device: Box<dyn ComputeDevice>,
    inbox: &Receiver<Message>,
    outbox: &Sender<(Done, Instant)>,
) {
    while let Ok(message) = inbox.recv() {
        let work = match message {
            Message::Observe(conditions) => {
                device.observe(conditions);
                continue;
            }
            Message::Work(work) => work,
        };
        if let Work::Gemm {
            not_before: Some(at),
            ..
        } = work
            && let Some(wait) = at.checked_duration_since(Instant::now())
        {
            thread::sleep(wait);
        }
        let began = Instant::now();
        let done = catch_unwind(AssertUnwindSafe(|| run(device.as_mut(), work)))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|text| (*text).to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Done::Checked(Err(ComputeError::Unavailable(format!(
                    "The check's device code failed ({what}); nothing was concluded about the card. Please report this."
                ))))
            });
        if outbox.send((done, began)).is_err() {
            return;
        }
    }
}

fn run(device: &mut dyn ComputeDevice, work: Work) -> Done {
    match work {
        Work::Prepare {
            setup,
            fma_reference,
        } => Done::Prepared(device.prepare(&setup, &fma_reference)),
        Work::Gemm { passes, .. } => Done::Checked(device.gemm(passes)),
        Work::Fma => Done::Checked(device.fma()),
        Work::Vram { pattern } => Done::Checked(device.vram(pattern)),
    }
}
