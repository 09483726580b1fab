//! The daemon's history recorder: a thread of its own that keeps every GPU's samples (one a
//! second) and setting changes on disk, and answers clients' history pages from there. The
//! engine thread only hands it messages, so a slow disk never delays a revert.

use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::wall_clock_ms;
use crate::fsafe::FileError;
use crate::telemetry::store::{HistoryOptions, HistoryStore};
use gputune_formats::history::HistoryRow;
use gputune_formats::protocol::{Message, Response};
use gputune_formats::tuning::{ChangeNote, TuneError, TuneErrorKind};

/// Messages waiting for the recorder before new ones are dropped (a stuck disk must not make
/// the daemon's memory grow).
const BACKLOG: usize = 1_024;

pub(crate) enum RecorderInput {
    /// One reading of each GPU, by UUID.
    Samples(Vec<(String, HistoryRow)>),
    Change {
        gpu_uuid: String,
        note: ChangeNote,
    },
    /// A client's `history` request: the answer goes to its outbox.
    Page {
        gpu_uuid: String,
        from_ms: u64,
        to_ms: u64,
        id: u64,
        outbox: SyncSender<Message>,
    },
}

pub(crate) struct Recorder {
    input: Option<SyncSender<RecorderInput>>,
    thread: Option<JoinHandle<()>>,
    /// Whether a full backlog was reported already (once, not every second).
    said_full: bool,
}

impl Recorder {
    /// Opens the history folder (here, so a problem is said when the daemon starts) and starts
    /// the thread.
    pub fn start(options: HistoryOptions) -> Result<Recorder, FileError> {
        let store = HistoryStore::open(options)?;
        let (input, inputs) = mpsc::sync_channel(BACKLOG);
        let thread = std::thread::Builder::new()
            .name("gputune-history".to_string())
            .spawn(move || run(store, &inputs))
            .map_err(|error| FileError::Write {
                path: std::path::PathBuf::from("(history thread)"),
                detail: error.to_string(),
            })?;
        Ok(Recorder {
            input: Some(input),
            thread: Some(thread),
            said_full: false,
        })
    }

    /// Hands `input` over; false when the recorder is behind or gone.
    pub fn send(&mut self, input: RecorderInput) -> bool {
        let Some(sender) = &self.input else {
            return false;
        };
        match sender.try_send(input) {
            Ok(()) => {
                self.said_full = false;
                true
            }
            Err(TrySendError::Full(_)) => {
                if !self.said_full {
                    tracing::warn!(
                        "the history recorder is behind (a slow disk?); samples are skipped until it catches up"
                    );
                    self.said_full = true;
                }
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

impl Drop for Recorder {
    /// Ends the thread once it has written what it was given; never waits long on a stuck disk.
    fn drop(&mut self) {
        self.input = None;
        if let Some(thread) = self.thread.take()
            && !crate::join::join_within(thread, Duration::from_secs(5))
        {
            tracing::warn!("the history recorder is stuck writing; not waiting for it");
        }
    }
}

fn run(mut store: HistoryStore, inputs: &Receiver<RecorderInput>) {
    while let Ok(input) = inputs.recv() {
        match input {
            RecorderInput::Samples(rows) => {
                for (uuid, row) in rows {
                    store.record(&uuid, &row);
                }
            }
            RecorderInput::Change { gpu_uuid, note } => store.note_change(&gpu_uuid, &note),
            RecorderInput::Page {
                gpu_uuid,
                from_ms,
                to_ms,
                id,
                outbox,
            } => {
                let response = match store.page(&gpu_uuid, from_ms, to_ms, wall_clock_ms()) {
                    Ok(page) => Response::History(Box::new(page)),
                    Err(message) => Response::Error {
                        error: TuneError::new(TuneErrorKind::Refused, message),
                    },
                };
                // A client that stopped reading is dropped by the engine thread.
                let _ = outbox.try_send(Message::Response { id, response });
            }
        }
    }
}
