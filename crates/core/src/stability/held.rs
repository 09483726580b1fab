//! What a check or a scan holds through a session of the tuning engine, and what was put back
//! when that session ended: one piece both share, with the card's news from the service fed
//! to their run the same way.

use super::run::{CheckRun, SettingsSeen};
use crate::service::client::TuningClient;
use crate::tuning::engine::report_lines;
use gputune_formats::card::CriticalEvent;
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::tuning::{EngineEvent, GpuTuning, SessionId, SessionReport};

/// The session (if any) and what its ends put back.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    session: Option<SessionId>,
    put_back: Vec<String>,
    put_back_complete: bool,
}

impl Held {
    /// Nothing held yet.
    pub fn nothing() -> Held {
        Held {
            session: None,
            put_back: Vec::new(),
            put_back_complete: true,
        }
    }

    pub fn session(&self) -> Option<SessionId> {
        self.session
    }

    /// The session the engine started for the settings.
    pub fn started(&mut self, session: SessionId) {
        self.session = Some(session);
    }

    /// Feeds card `index`'s news in `event` to `run`: its readings, settings and critical
    /// errors; the engine ending this session (an Xid, a lost GPU) ends the run as the engine
    /// said, with what it put back. Returns the card's tuning state when the event carried it.
    pub fn feed<'e>(
        &mut self,
        run: &mut CheckRun,
        index: u32,
        event: &'e Event,
    ) -> Option<&'e GpuTuning> {
        if let Some((critical, message)) = self.ended_by_engine(event) {
            match critical {
                Some(critical) => run.take_critical_event(critical),
                None => run.stop(&format!("the tuning engine ended it: {message}")),
            }
            return None;
        }
        match event {
            Event::Samples { readings } => {
                if let Some(Ok(reading)) = readings.get(index as usize) {
                    run.take_reading(reading);
                }
            }
            Event::Engine { event } => match event.as_ref() {
                EngineEvent::Tuning { tuning } if tuning.gpu_index == index => {
                    run.take_settings(SettingsSeen::of(&tuning.in_force));
                    return Some(tuning);
                }
                EngineEvent::Critical { critical } if critical.gpu_index == index => {
                    run.take_critical_event(*critical);
                }
                _ => {}
            },
        }
        None
    }

    /// When `event` says the engine ended this session (an Xid, a lost GPU): what it put back
    /// is kept, and the critical error that ended it (if one did) and the engine's message are
    /// returned. `None` for any other event.
    pub fn ended_by_engine(&mut self, event: &Event) -> Option<(Option<CriticalEvent>, String)> {
        let Event::Engine { event } = event else {
            return None;
        };
        let EngineEvent::SessionEnded { report, .. } = event.as_ref() else {
            return None;
        };
        if Some(report.session) != self.session {
            return None;
        }
        self.session = None;
        self.take(report);
        Some((report.critical_event, report.message.clone()))
    }

    /// Ends the session, if one is held, putting everything it changed back.
    pub fn end(&mut self, client: &mut TuningClient) {
        let Some(session) = self.session.take() else {
            return;
        };
        match client.request(Request::EndSession {
            session,
            keep: false,
        }) {
            Ok(Response::SessionEnded { report }) => self.take(&report),
            Ok(other) => self.put_back.push(format!(
                "The service answered {other:?} to ending the check's session."
            )),
            Err(error) => {
                // The service is gone or cannot answer: nothing here can tell what the card
                // runs now.
                self.put_back_complete = false;
                self.put_back.push(format!(
                    "The connection to the tuning service was lost ({error}), so the check's session could not be ended from here: whether the card was put back cannot be known here. A daemon that still runs puts it back as the connection closes; one that died puts it back from its journal when it starts again. `gputune status` shows what the card runs now."
                ));
            }
        }
    }

    /// What was put back so far, and whether everything could be; cleared.
    pub fn take_put_back(&mut self) -> (Vec<String>, bool) {
        (std::mem::take(&mut self.put_back), self.put_back_complete)
    }

    fn take(&mut self, report: &SessionReport) {
        self.put_back_complete &= report.is_complete();
        // A check at the card's own settings holds nothing: there is nothing to say.
        let nothing = report
            .restored
            .iter()
            .all(|gpu| gpu.restored.is_empty() && gpu.left.is_empty() && gpu.exact);
        if nothing {
            return;
        }
        self.put_back.extend(report_lines(report));
    }
}
