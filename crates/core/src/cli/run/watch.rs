//! What `gputune run` sees while the command runs: the card's readings (for the log and the
//! closing figures), the engine's notices, a session the engine ended by itself, and the
//! command marked as the session's job among the GPU's processes.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::service::client::TuningClient;
use crate::telemetry::csv::TelemetryCsvWriter;
use gputune_formats::card::Telemetry;
use gputune_formats::protocol::{Event, Request};
use gputune_formats::tuning::{EngineEvent, SessionId, SessionReport};

/// How often readings arrive for the log and the statistics.
pub(super) const SAMPLE_INTERVAL_MS: u64 = 1_000;

/// One card the run watches, with its readings.
pub(super) struct WatchedCard {
    pub(super) index: u32,
    pub(super) identity: gputune_formats::card::GpuIdentity,
    pub(super) samples: Vec<Telemetry>,
}

/// What the run sees while the command runs: readings of each of its cards for the log and the
/// statistics, and a session the engine ended by itself.
pub(super) struct Watcher {
    pub(super) cards: Vec<WatchedCard>,
    pub(super) log: Option<TelemetryCsvWriter<std::fs::File>>,
    pub(super) log_failed: bool,
    pub(super) ended_by_engine: Option<SessionReport>,
}

impl Watcher {
    pub(super) fn take_event(&mut self, event: Event, messages: &mut dyn Write) {
        match event {
            Event::Samples { readings } => {
                for card in &mut self.cards {
                    let Some(Ok(reading)) = readings.get(card.index as usize) else {
                        continue;
                    };
                    card.samples.push(reading.clone());
                    if let Some(writer) = self.log.as_mut()
                        && !self.log_failed
                    {
                        let written = writer
                            .write_row(&card.identity, reading)
                            .and_then(|()| writer.flush());
                        if let Err(error) = written {
                            // The command matters more than the log: say so once and go on.
                            let _ = writeln!(messages, "gputune: logging stopped: {error}");
                            self.log_failed = true;
                        }
                    }
                }
            }
            Event::Engine { event } => match *event {
                EngineEvent::SessionEnded { report, .. } => {
                    let _ = writeln!(
                        messages,
                        "gputune: the engine ended the session: {}",
                        report.message
                    );
                    self.ended_by_engine = Some(report);
                }
                // After the engine ended the session, its notice about this card tells the
                // same story (an Xid) a third time: the session's report says it.
                EngineEvent::Notice { gpu_index, notice }
                    if gpu_index
                        .is_none_or(|gpu| self.cards.iter().any(|card| card.index == gpu))
                        && !(self.ended_by_engine.is_some() && gpu_index.is_some()) =>
                {
                    let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
                }
                _ => {}
            },
        }
    }

    /// Every card's readings so far, counted together.
    fn sample_count(&self) -> usize {
        self.cards.iter().map(|card| card.samples.len()).sum()
    }

    /// Each card's readings, for the closing figures.
    pub(super) fn samples_by_card(&self) -> Vec<&[Telemetry]> {
        self.cards
            .iter()
            .map(|card| card.samples.as_slice())
            .collect()
    }

    /// Takes whatever arrived, then waits (two sampling intervals at most) for one reading
    /// newer than those.
    pub(super) fn wait_for_reading(&mut self, client: &mut TuningClient, messages: &mut dyn Write) {
        while let Ok(Some(event)) = client.next_event(Duration::ZERO) {
            self.take_event(event, messages);
        }
        let taken = self.sample_count();
        let deadline = Instant::now() + Duration::from_millis(SAMPLE_INTERVAL_MS * 2);
        while self.sample_count() == taken && Instant::now() < deadline {
            match client.next_event(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(event)) => self.take_event(event, messages),
                Ok(None) | Err(_) => break,
            }
        }
    }
}

/// Tells the service which process is the session's job, so every client of a daemon (the
/// window) marks it among the GPU's processes. Not worth stopping the command for when it fails.
pub(super) fn name_the_job(
    client: &mut TuningClient,
    session: SessionId,
    pid: u32,
    messages: &mut dyn Write,
) {
    if let Err(error) = client.request(Request::SessionJob { session, pid }) {
        // A session the engine ended already (an Xid at the start) has no job to mark; the
        // engine's own message says why it ended.
        if error
            .refusal()
            .is_some_and(|refusal| refusal.kind == gputune_formats::tuning::TuneErrorKind::NotFound)
        {
            return;
        }
        let _ = writeln!(
            messages,
            "gputune: the command (pid {pid}) is not marked as this run's job: {error}"
        );
    }
}
