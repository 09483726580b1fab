//! Trials: settings tried for a while and reverted unless kept, ended by the engine's clock
//! (`tick`). A trial measures a baseline first (from the engine's recent history when it has
//! one), then applies, counts down, and reports before / during numbers all along. How a trial
//! ends is `trial_end.rs`; its data (`Trial`, its phase) is in `state.rs`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::state::{Phase, SessionGpu, Trial, ended_status};
use super::{ClientInfo, Engine, LONGEST_BASELINE_S, LONGEST_TRIAL_S, Layer, RestoreMap};
use crate::device::gate::ValidatedSetting;
use gputune_formats::card::Telemetry;
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::{
    EngineEvent, SessionId, SessionPurpose, TrialRequest, TrialStatus, TuneError, TuneErrorKind,
};

impl Engine {
    /// Starts a trial on one GPU, in a new trial session that holds the controls it tries:
    /// beside other sessions on the card (the window's fan curve, another client's run) as
    /// long as they hold other controls.
    pub fn start_trial(
        &mut self,
        client: &ClientInfo,
        request: &TrialRequest,
    ) -> Result<TrialStatus, TuneError> {
        self.check_may_write(client)?;
        let index = self.index_of(&request.gpu_uuid)?;
        self.check_present(index)?;
        if request.settings.is_empty() {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                "A trial needs a setting to try.",
            ));
        }
        Engine::check_trial_times(request.duration_s, request.baseline_s)?;
        let settings = self.validate_all(index, &request.settings)?;
        let holds: BTreeSet<Hold> = request.settings.iter().map(Hold::of).collect();
        self.check_free(index, client.id, &holds, true)?;
        if self.own_trial(client.id, index).is_some() {
            return Err(TuneError::new(
                TuneErrorKind::Held,
                format!("A trial already runs on GPU {index}: keep or revert it first."),
            ));
        }
        let follows_own_curve = self
            .holding(index, Hold::Fans)
            .and_then(|id| self.sessions.get(&id)?.gpus.get(&index))
            .is_some_and(|part| part.follows_curve);
        if follows_own_curve && holds.contains(&Hold::Fans) {
            return Err(TuneError::new(
                TuneErrorKind::Held,
                format!(
                    "gputune follows a fan curve on GPU {index}: stop following it before trying fan speeds."
                ),
            ));
        }
        let id = self.open_session(client, SessionPurpose::Trial, &[(index, holds)])?;

        let (trial, missing_ms) = self.prepare_trial(index, request, settings, client.id);
        if let Some(part) = self.session_part_mut(id, index) {
            part.trial = Some(trial);
        }
        self.announce(index);
        if missing_ms == 0 {
            return Ok(self.apply_trial(id, index));
        }
        if let Some(refusal) = self.refused_before_baseline(index) {
            return Ok(self.finish_trial_with(id, index, false, &refusal, true));
        }
        Ok(self
            .trial_status(id, index, None)
            .unwrap_or_else(|| ended_status(index, id, "The trial vanished.")))
    }

    /// Whether the driver refuses this engine's writes to GPU `index`, found out before a
    /// trial spends its baseline measuring: without a daemon, a normal user's writes on a real
    /// driver fail with NO_PERMISSION, and today that showed only after the 10 s baseline.
    /// The probe writes the power limit the card has now (read back this moment, under the
    /// card's lock, through the gate like every write): a no-op for the card, and NVML asks the
    /// same permission for every setting. A daemon's clients are checked by `may_write`
    /// before this; a card without a readable or changeable power limit is not probed (its
    /// trial finds out at its first write, as before). Returns the trial's ending message.
    pub(super) fn refused_before_baseline(&mut self, index: u32) -> Option<String> {
        self.refresh_settings(index);
        let power_limit_mw = self.gpu(index).in_force.power_limit_mw?;
        let probe = crate::device::gate::validate(
            &self.gpu(index).info.constraints,
            gputune_formats::card::Setting::PowerLimit { power_limit_mw },
        )
        .ok()?;
        match self.write(index, probe) {
            Err(error @ gputune_formats::card::DeviceError::NoPermission { .. }) => Some(format!(
                "The trial could not start: GPU {index}: {error} Nothing was changed."
            )),
            _ => None,
        }
    }

    /// Refuses a trial's times out of range.
    pub(super) fn check_trial_times(duration_s: u64, baseline_s: u64) -> Result<(), TuneError> {
        if !(1..=LONGEST_TRIAL_S).contains(&duration_s) {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                format!("A trial lasts 1 to {LONGEST_TRIAL_S} seconds, not {duration_s}."),
            ));
        }
        if baseline_s > LONGEST_BASELINE_S {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                format!("A baseline lasts at most {LONGEST_BASELINE_S} seconds, not {baseline_s}."),
            ));
        }
        Ok(())
    }

    /// A trial of `settings` on GPU `index`, measuring its baseline: from the engine's recent
    /// readings as far as they go back, and for the milliseconds returned before it applies.
    pub(super) fn prepare_trial(
        &self,
        index: u32,
        request: &TrialRequest,
        settings: Vec<ValidatedSetting>,
        client: gputune_formats::tuning::ClientId,
    ) -> (Trial, u64) {
        let now_ms = self.clock.now_ms();
        let baseline_ms = request.baseline_s * 1000;
        let recent: Vec<Telemetry> = self
            .gpu(index)
            .recent
            .iter()
            .filter(|reading| now_ms.saturating_sub(reading.sampled_at_ms) <= baseline_ms)
            .cloned()
            .collect();
        // Covered when the oldest usable reading is about as old as the baseline asks.
        let covered_ms = recent
            .first()
            .map_or(0, |oldest| now_ms.saturating_sub(oldest.sampled_at_ms));
        // A quarter of a second short is close enough: readings come once a second or faster.
        let missing_ms = match baseline_ms.saturating_sub(covered_ms) {
            short if short <= 250 => 0,
            missing => missing,
        };
        let trial = Trial {
            what: crate::tuning::describe_all(&request.settings),
            settings,
            duration: Duration::from_secs(request.duration_s),
            phase: Phase::Measuring {
                until: self.clock.now() + Duration::from_millis(missing_ms),
            },
            baseline_from_ms: now_ms.saturating_sub(baseline_ms),
            baseline: recent,
            during: Vec::new(),
            restore: RestoreMap::new(),
            baseline_warning: None,
            client: Some(client),
        };
        (trial, missing_ms)
    }

    /// Keeps or reverts the client's trial on a GPU.
    pub fn finish_trial(
        &mut self,
        client: &ClientInfo,
        gpu_uuid: &str,
        keep: bool,
    ) -> Result<TrialStatus, TuneError> {
        let index = self.index_of(gpu_uuid)?;
        let id = self.own_trial(client.id, index).ok_or_else(|| {
            TuneError::new(
                TuneErrorKind::NotFound,
                format!("You have no trial running on GPU {index} (it may have ended already)."),
            )
        })?;
        let measuring = self
            .sessions
            .get(&id)
            .and_then(|session| session.gpus.get(&index))
            .and_then(|part| part.trial.as_ref())
            .is_some_and(|trial| matches!(trial.phase, Phase::Measuring { .. }));
        if measuring {
            // Nothing is on the card yet: there is nothing to keep or put back.
            return Ok(self.finish_trial_now(
                id,
                index,
                false,
                "Cancelled before anything was changed.",
            ));
        }
        let reason = if keep { "Kept" } else { "Reverted: put back" };
        Ok(self.finish_trial_now(id, index, keep, reason))
    }

    /// The session of `client` with a trial on GPU `index`, if one runs.
    fn own_trial(
        &self,
        client: gputune_formats::tuning::ClientId,
        index: u32,
    ) -> Option<SessionId> {
        self.sessions_on(index).into_iter().find(|id| {
            self.sessions.get(id).is_some_and(|session| {
                session.client.id == client
                    && session
                        .gpus
                        .get(&index)
                        .is_some_and(|part| part.trial.is_some())
            })
        })
    }

    /// Applies a trial whose baseline is complete; ends it at once when a write fails.
    pub(super) fn apply_trial(&mut self, id: SessionId, index: u32) -> TrialStatus {
        let Some(mut trial) = self
            .session_part_mut(id, index)
            .and_then(|part| part.trial.take())
        else {
            return ended_status(index, id, "The trial vanished.");
        };
        if let Some(change) = self
            .gpu(index)
            .last_change
            .as_ref()
            .filter(|change| change.at_ms >= trial.baseline_from_ms)
        {
            trial.baseline_warning = Some(format!(
                "The baseline is not clean: {} ({}) within it, so its numbers mix two settings.",
                change.what, change.by
            ));
        }
        let settings = trial.settings.clone();
        let duration = trial.duration;
        let mut map = std::mem::take(&mut trial.restore);
        let part_trial = |engine: &mut Engine, trial: Trial| {
            if let Some(part) = engine.session_part_mut(id, index) {
                part.trial = Some(trial);
            }
        };
        // The trial goes back in place while it writes, so the journal sees the session's layer.
        part_trial(self, trial);
        // The trial's time runs from its first write: with a slow driver, the first setting
        // must not be held for the time it takes to write the others on top of the trial's.
        let writing_from = self.clock.now();
        let deadline = writing_from + duration;
        let result =
            self.write_temporary_until(index, &settings, &mut map, Layer::Trial, Some(deadline));
        let by = self
            .sessions
            .get(&id)
            .map(|session| session.client.describe())
            .unwrap_or_default();
        let (now_ms, now) = (self.clock.now_ms(), self.clock.now());
        let Some(trial) = self
            .session_part_mut(id, index)
            .and_then(|part| part.trial.as_mut())
        else {
            return ended_status(index, id, "The trial vanished.");
        };
        trial.restore = map;
        match result {
            Ok(written) => {
                let ends_at_ms =
                    now_ms + deadline.saturating_duration_since(now).as_millis() as u64;
                trial.phase = Phase::Running {
                    deadline,
                    ends_at_ms,
                };
                self.note_change(
                    index,
                    &by,
                    format!("trying {}", crate::tuning::describe_all(&written)),
                );
                let status = self
                    .trial_status(id, index, None)
                    .unwrap_or_else(|| ended_status(index, id, "The trial vanished."));
                self.send_trial(id, status.clone());
                status
            }
            Err((written, error)) => {
                let outcome = if written.is_empty() {
                    "Nothing was changed.".to_string()
                } else {
                    format!(
                        "{} was written and is put back.",
                        crate::tuning::describe_all(&written)
                    )
                };
                let message = format!("The trial could not start: {} {outcome}", error.message);
                self.finish_trial_with(id, index, false, &message, true)
            }
        }
    }

    /// Ends a trial now: reverts it (or keeps it), tells its client, and ends a session that
    /// existed only for it.
    fn finish_trial_now(
        &mut self,
        id: SessionId,
        index: u32,
        keep: bool,
        reason: &str,
    ) -> TrialStatus {
        self.finish_trial_with(id, index, keep, reason, false)
    }

    /// Moves trials on: an ended baseline applies, a passed deadline reverts; and tries again
    /// to put back what the driver refused earlier.
    pub fn tick(&mut self) {
        self.retry_unrestored();
        let now = self.clock.now();
        let due: Vec<(SessionId, u32, bool)> = self
            .sessions
            .iter()
            .flat_map(|(id, session)| {
                session.gpus.iter().filter_map(move |(index, part)| {
                    let trial = part.trial.as_ref()?;
                    (trial.wakeup() <= now).then_some((
                        *id,
                        *index,
                        matches!(trial.phase, Phase::Measuring { .. }),
                    ))
                })
            })
            .collect();
        for (id, index, measuring) in due {
            if measuring {
                self.apply_trial(id, index);
            } else {
                self.finish_trial_now(id, index, false, "Time is up: put back");
            }
        }
    }

    /// Sends every running trial's status to its client (after each round of readings).
    pub(super) fn trial_progress(&mut self) {
        let running: Vec<(SessionId, u32)> = self
            .sessions
            .iter()
            .flat_map(|(id, session)| {
                session
                    .gpus
                    .iter()
                    .filter(|(_, part)| part.trial.is_some())
                    .map(move |(index, _)| (*id, *index))
            })
            .collect();
        for (id, index) in running {
            if let Some(status) = self.trial_status(id, index, None) {
                self.send_trial(id, status);
            }
        }
    }

    /// The status of the trial on GPU `index` in session `id`, if one runs.
    pub(super) fn trial_status_of(&self, id: SessionId, index: u32) -> Option<TrialStatus> {
        self.trial_status(id, index, None)
    }

    fn trial_status(
        &self,
        id: SessionId,
        index: u32,
        message: Option<String>,
    ) -> Option<TrialStatus> {
        let part: &SessionGpu = self.sessions.get(&id)?.gpus.get(&index)?;
        Some(
            part.trial
                .as_ref()?
                .status(index, id, message, self.clock.now()),
        )
    }

    fn send_trial(&mut self, id: SessionId, status: TrialStatus) {
        if let Some(session) = self.sessions.get(&id) {
            self.events.push(EngineEvent::Trial {
                client: session.client.id,
                status,
            });
        }
    }
}
