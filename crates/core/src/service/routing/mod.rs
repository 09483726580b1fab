//! The engine thread's switchboard: who is connected, what each asked, and who gets which
//! event. A client that stops reading is dropped (and its sessions put back) rather than
//! allowed to make the service hold its messages forever. What each request is answered is in
//! `answers.rs`; `history` pages go to the recorder and job requests to `job_records`.

mod answers;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, TrySendError};

use super::recorder::{Recorder, RecorderInput};
use super::{DEFAULT_INTERVAL_MS, Input};
use crate::clock::wall_clock_ms;
use crate::telemetry::history::MetricRow;
use crate::tuning::boot_defaults::BootDefaultStore;
use crate::tuning::engine::{ClientInfo, Engine};
use gputune_formats::card::{DeviceError, Telemetry};
use gputune_formats::history::HistoryRow;
use gputune_formats::protocol::{Event, Message, Request, Response, Welcome};
use gputune_formats::tuning::{ClientId, EngineEvent, TuneError, TuneErrorKind};

struct ClientSlot {
    info: ClientInfo,
    outbox: SyncSender<Message>,
    /// The sampling interval it asked for, once subscribed.
    subscribed_ms: Option<u64>,
    /// Closes its connection (a socket client's), when it is dropped.
    hang_up: Option<super::HangUp>,
}

pub(crate) struct Router {
    welcome: Welcome,
    clients: HashMap<ClientId, ClientSlot>,
    latest: Vec<Option<Result<Telemetry, DeviceError>>>,
    boot_defaults: Option<BootDefaultStore>,
    pace: Arc<super::sampler::Pace>,
    /// Clients to drop once the current message is handled.
    dropped: Vec<ClientId>,
    /// The daemon's history on disk; `None` in-process.
    recorder: Option<Recorder>,
    /// Why the daemon's recorder could not start, when it could not.
    no_history_because: Option<String>,
    /// The group whose members may write through the daemon.
    write_group: Option<String>,
    /// The users already told the news of the service's start (see [`Router::welcome_for`]).
    told_start_news: std::collections::HashSet<Option<u32>>,
    /// The daemon's job records; `None` in-process.
    jobs: Option<crate::job_energy::store::JobStore>,
}

impl Router {
    pub fn new(
        welcome: Welcome,
        boot_defaults: Option<BootDefaultStore>,
        pace: Arc<super::sampler::Pace>,
        recorder: Option<Recorder>,
        no_history_because: Option<String>,
        write_group: Option<String>,
        jobs: Option<crate::job_energy::store::JobStore>,
    ) -> Router {
        let gpu_count = welcome.gpus.len();
        Router {
            welcome,
            clients: HashMap::new(),
            latest: vec![None; gpu_count],
            boot_defaults,
            pace,
            dropped: Vec::new(),
            recorder,
            no_history_because,
            write_group,
            told_start_news: std::collections::HashSet::new(),
            jobs,
        }
    }

    pub fn handle(&mut self, engine: &mut Engine, input: Input) {
        match input {
            Input::Open {
                client,
                outbox,
                hang_up,
            } => {
                self.clients.insert(
                    client.id,
                    ClientSlot {
                        info: client,
                        outbox,
                        subscribed_ms: None,
                        hang_up,
                    },
                );
            }
            Input::Closed { client } => self.drop_client(engine, client, false),
            Input::Idle {
                client,
                holds_something,
            } => {
                let subscribed = self
                    .clients
                    .get(&client)
                    .is_some_and(|slot| slot.subscribed_ms.is_some());
                let _ = holds_something.try_send(subscribed || engine.has_sessions(client));
            }
            Input::Request {
                client,
                id,
                request,
            } => {
                let response = match request {
                    Request::History {
                        gpu_uuid,
                        from_ms,
                        to_ms,
                    } => self.history(client, id, &gpu_uuid, from_ms, to_ms),
                    Request::Jobs { limit } => {
                        Some(super::job_records::list(self.jobs.as_ref(), limit))
                    }
                    Request::Job { job_id } => {
                        Some(super::job_records::show(self.jobs.as_ref(), &job_id))
                    }
                    request => Some(self.answer(engine, client, request)),
                };
                // A job's record is on disk before its client hears the job ended.
                super::job_records::file(self.jobs.as_ref(), engine.take_job_records());
                if let Some(response) = response {
                    self.send(client, Message::Response { id, response });
                }
            }
            Input::Samples(readings) => {
                engine.on_samples(&readings);
                self.record(&readings);
                for (slot, reading) in self.latest.iter_mut().zip(&readings) {
                    *slot = Some(reading.clone());
                }
                for client in self.subscribers() {
                    self.send(
                        client,
                        Message::Event {
                            event: Event::Samples {
                                readings: readings.clone(),
                            },
                        },
                    );
                }
            }
            Input::Settings {
                gpu_index,
                current,
                read_started,
            } => engine.on_settings(gpu_index, &current, read_started),
            Input::CriticalEvent(event) => engine.on_critical_event(event),
            Input::Stop => {}
        }
        for client in std::mem::take(&mut self.dropped) {
            self.drop_client(engine, client, true);
        }
    }

    /// Forgets a client and ends its sessions; `hang_up` also closes its connection (a client
    /// dropped by the service, rather than one whose connection already ended: that one's
    /// last messages, an error reply, are still being written).
    fn drop_client(&mut self, engine: &mut Engine, client: ClientId, hang_up: bool) {
        if let Some(slot) = self.clients.remove(&client) {
            if hang_up && let Some(close) = &slot.hang_up {
                close();
            }
            engine.client_gone(client);
            self.update_interval();
        }
    }

    /// Sends the engine's news to whom it concerns.
    pub fn route(&mut self, engine: &mut Engine) {
        if engine.take_box_check_ended() {
            // A box check since ran with the machine up: the start's "went down" is old news
            // (it stays in the log).
            self.welcome
                .notices
                .retain(|notice| !notice.text().starts_with(crate::tuning::engine::WENT_DOWN));
        }
        super::job_records::file(self.jobs.as_ref(), engine.take_job_records());
        for event in engine.take_events() {
            if let EngineEvent::Tuning { tuning } = &event
                && let (Some(recorder), Some(note)) = (&mut self.recorder, &tuning.last_change)
            {
                // Behind: this change is still the card's last one, and is offered again.
                let _ = recorder.send(RecorderInput::Change {
                    gpu_uuid: tuning.gpu_uuid.clone(),
                    note: note.clone(),
                });
            }
            match &event {
                EngineEvent::Tuning { .. }
                | EngineEvent::Notice { .. }
                | EngineEvent::Critical { .. } => {
                    for client in self.subscribers() {
                        self.send(
                            client,
                            Message::Event {
                                event: Event::Engine {
                                    event: Box::new(event.clone()),
                                },
                            },
                        );
                    }
                }
                EngineEvent::Trial { client, .. } | EngineEvent::SessionEnded { client, .. } => {
                    let client = *client;
                    self.send(
                        client,
                        Message::Event {
                            event: Event::Engine {
                                event: Box::new(event),
                            },
                        },
                    );
                }
            }
        }
        for client in std::mem::take(&mut self.dropped) {
            self.drop_client(engine, client, true);
        }
    }

    /// A `history` request: handed to the recorder, which answers it itself (`None`), or
    /// the answer now when it cannot be.
    fn history(
        &mut self,
        client: ClientId,
        id: u64,
        gpu_uuid: &str,
        from_ms: u64,
        to_ms: u64,
    ) -> Option<Response> {
        let Some(slot) = self.clients.get(&client) else {
            return Some(error(TuneErrorKind::NotFound, "This connection is closed."));
        };
        let Some(recorder) = &mut self.recorder else {
            let why = if !self.welcome.daemon {
                "No history is kept while no window is open: the gputune daemon keeps it (`sudo gputune daemon install`).".to_string()
            } else {
                // The daemon runs but could not keep history: its start said why.
                self.no_history_because
                    .as_ref()
                    .map_or_else(
                        || "This gputune daemon keeps no history: it was started with --history-hours 0.".to_string(),
                        |notice| format!("This gputune daemon keeps no history. {notice}"),
                    )
            };
            return Some(error(TuneErrorKind::NotFound, why));
        };
        if !self
            .welcome
            .gpus
            .iter()
            .any(|gpu| gpu.identity.uuid == gpu_uuid)
        {
            return Some(error(
                TuneErrorKind::NotFound,
                format!("There is no GPU {gpu_uuid} on this machine."),
            ));
        }
        let page = RecorderInput::Page {
            gpu_uuid: gpu_uuid.to_string(),
            from_ms,
            to_ms,
            id,
            outbox: slot.outbox.clone(),
        };
        if recorder.send(page) {
            None
        } else {
            Some(error(
                TuneErrorKind::Device,
                "The daemon's history recorder is busy (a slow disk?); try again in a moment.",
            ))
        }
    }

    /// Hands this round of readings to the recorder (it keeps one a second).
    fn record(&mut self, readings: &[Result<Telemetry, DeviceError>]) {
        let Some(recorder) = &mut self.recorder else {
            return;
        };
        let now_ms = wall_clock_ms();
        let rows = self
            .welcome
            .gpus
            .iter()
            .zip(readings)
            .map(|(gpu, reading)| {
                let row = match reading {
                    Ok(reading) => HistoryRow::from_reading(reading.sampled_at_ms, Some(reading)),
                    Err(_) => HistoryRow::gap(now_ms),
                };
                (gpu.identity.uuid.clone(), row)
            })
            .collect();
        // Behind: this round is skipped (the recorder said so once).
        let _ = recorder.send(RecorderInput::Samples(rows));
    }

    /// The clients that asked for readings and news.
    fn subscribers(&self) -> Vec<ClientId> {
        self.clients
            .iter()
            .filter(|(_, slot)| slot.subscribed_ms.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    fn send(&mut self, client: ClientId, message: Message) {
        let Some(slot) = self.clients.get(&client) else {
            return;
        };
        match slot.outbox.try_send(message) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                tracing::warn!(
                    "{} stopped reading its messages; disconnecting it",
                    slot.info.describe()
                );
                self.dropped.push(client);
            }
            Err(TrySendError::Disconnected(_)) => self.dropped.push(client),
        }
    }

    fn update_interval(&self) {
        let fastest = self
            .clients
            .values()
            .filter_map(|slot| slot.subscribed_ms)
            .min()
            .unwrap_or(DEFAULT_INTERVAL_MS);
        self.pace.set_interval_ms(fastest);
    }
}

fn error(kind: TuneErrorKind, message: impl Into<String>) -> Response {
    Response::Error {
        error: TuneError::new(kind, message),
    }
}
