//! A [`ComputeDevice`] on its own thread, so a kernel that never returns cannot hang the
//! check: the check hands it one piece of work at a time and gives up on it past a deadline.
//! A worker given up on is left behind (its thread cannot be stopped); the process ending
//! frees the card's context.

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
    from_worker: Receiver<Done>,
    pending: Option<Pending>,
    hung: bool,
}

impl ComputeWorker {
    pub fn start(device: Box<dyn ComputeDevice>, name: &str) -> Result<ComputeWorker, String> {
        let (to_worker, inbox) = mpsc::channel::<Message>();
        let (outbox, from_worker) = mpsc::channel::<Done>();
        thread::Builder::new()
            .name(format!("check {name}"))
            .spawn(move || serve(device, &inbox, &outbox))
            .map_err(|error| format!("The check's worker thread could not start: {error}."))?;
        Ok(ComputeWorker {
            to_worker,
            from_worker,
            pending: None,
            hung: false,
        })
    }

    /// Hands out `work`, which must end within `deadline`. False when work is pending or the
    /// worker hung.
    pub fn send(&mut self, work: Work, deadline: Duration) -> bool {
        if self.pending.is_some() || self.hung {
            return false;
        }
        if self.to_worker.send(Message::Work(work)).is_err() {
            return false;
        }
        self.pending = Some(Pending {
            sent: Instant::now(),
            deadline,
        });
        true
    }

    /// Tells the device what the card is doing; it takes it before its next work.
    pub fn observe(&self, conditions: CardConditions) {
        let _ = self.to_worker.send(Message::Observe(conditions));
    }

    pub fn is_busy(&self) -> bool {
        self.pending.is_some()
    }

    pub fn poll(&mut self) -> Poll {
        let Some(pending) = &self.pending else {
            return if self.hung { Poll::Gone } else { Poll::Idle };
        };
        match self.from_worker.try_recv() {
            Ok(done) => {
                self.pending = None;
                Poll::Done(done)
            }
            Err(TryRecvError::Empty) => {
                let waited = pending.sent.elapsed();
                if waited > pending.deadline {
                    self.pending = None;
                    self.hung = true;
                    Poll::Hung { waited }
                } else {
                    Poll::Busy { waited }
                }
            }
            Err(TryRecvError::Disconnected) => {
                self.pending = None;
                self.hung = true;
                Poll::Gone
            }
        }
    }
}

fn serve(mut device: Box<dyn ComputeDevice>, inbox: &Receiver<Message>, outbox: &Sender<Done>) {
    while let Ok(message) = inbox.recv() {
        let work = match message {
            Message::Observe(conditions) => {
                device.observe(conditions);
                continue;
            }
            Message::Work(work) => work,
        };
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
        if outbox.send(done).is_err() {
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
        Work::Gemm { passes } => Done::Checked(device.gemm(passes)),
        Work::Fma => Done::Checked(device.fma()),
        Work::Vram { pattern } => Done::Checked(device.vram(pattern)),
    }
}
