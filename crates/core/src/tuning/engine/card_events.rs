//! What the cards say, as the service hands it over: a round of readings (baselines, sessions,
//! trials and fan curves follow them), a GPU that stops answering, and settings read back that
//! somebody else changed. A critical error (Xid) is `crash.rs`.

use std::time::Instant;

use super::Engine;
use crate::device::CurrentSettings;
use crate::tuning::in_force::ControlsInForce;
use gputune_formats::card::{DeviceError, Telemetry};
use gputune_formats::tuning::{EngineEvent, SessionId, SessionPurpose};

/// How much recent history each GPU keeps, for trial baselines.
const RECENT_WINDOW_MS: u64 = 120_000;

impl Engine {
    /// Takes in a round of readings (one per GPU, in index order): baselines, sessions, trials
    /// and fan curves follow them.
    pub fn on_samples(&mut self, readings: &[Result<Telemetry, DeviceError>]) {
        for (index, reading) in readings.iter().enumerate().take(self.gpus.len()) {
            let index = index as u32;
            let reading = match reading {
                Ok(reading) => reading,
                Err(error) if error.is_fatal() => {
                    self.gpu_lost(index, error);
                    continue;
                }
                Err(_) => continue,
            };
            let gpu = self.gpu_mut(index);
            // It answers: whatever was lost is back.
            gpu.lost = None;
            gpu.recent.push_back(reading.clone());
            while gpu.recent.front().is_some_and(|oldest| {
                reading.sampled_at_ms.saturating_sub(oldest.sampled_at_ms) > RECENT_WINDOW_MS
            }) {
                gpu.recent.pop_front();
            }
            self.record_in_sessions(index, reading);
            self.drive_fans(index, reading);
            self.drive_temperature_hold(index, reading);
        }
        self.box_check_readings(readings);
        self.trial_progress();
    }

    /// GPU `index` stopped answering: the sessions on it end (what cannot be put back stays in
    /// its journal for when the card is back), and their clients are told.
    pub(super) fn gpu_lost(&mut self, index: u32, error: &DeviceError) {
        let first_time = self.gpu(index).lost.is_none();
        self.gpu_mut(index).lost = Some(error.to_string());
        let ids = self.sessions_on(index);
        if ids.is_empty() {
            if first_time {
                self.announce(index);
            }
            return;
        }
        let reason = format!("{error} Its session ended:");
        for id in ids {
            if self.trial_only(id, index) {
                self.finish_trial_with(id, index, false, &reason, true);
                continue;
            }
            let client = self.sessions.get(&id).map(|session| session.client.id);
            let report = self.end_session_now(id, false, &reason);
            if let Some(client) = client {
                self.events
                    .push(EngineEvent::SessionEnded { client, report });
            }
        }
    }

    /// Whether session `id` is a trial session with a trial on GPU `index` (ending the trial
    /// ends it).
    pub(super) fn trial_only(&self, id: SessionId, index: u32) -> bool {
        self.sessions.get(&id).is_some_and(|session| {
            session.purpose == SessionPurpose::Trial
                && session
                    .gpus
                    .get(&index)
                    .is_some_and(|part| part.trial.is_some())
        })
    }

    /// Takes in settings read back from GPU `index` by the sampler, whose read began at
    /// `read_started`: a change nobody here made is somebody else's.
    pub fn on_settings(&mut self, index: u32, current: &CurrentSettings, read_started: Instant) {
        let Some(gpu) = self.gpus.get_mut(index as usize) else {
            return;
        };
        // A read begun before the engine's last write may show the value before it.
        if gpu
            .last_write
            .is_some_and(|written| read_started <= written)
        {
            return;
        }
        let before = gpu.in_force.clone();
        gpu.in_force.refresh_from_card(current);
        let changed = gpu.in_force.readable_differences(&before);
        if changed.is_empty() {
            return;
        }
        let what = changed
            .iter()
            .map(|control| control.describe())
            .collect::<Vec<_>>()
            .join(", ");
        self.note_change(index, "another program", format!("{what} changed"));
    }
}
