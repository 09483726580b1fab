//! A trial over several GPUs at once ("All GPUs" in the window, `apply --try` with several
//! `--gpu`): one session holds every card, one countdown runs, and the cards are kept or put
//! back together — by the clock, by the client on any of them, by a GPU error on one of them,
//! or when the client goes away.

use std::time::Duration;

use super::{ClientInfo, Engine};
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::{
    GroupTrialRequest, SessionPurpose, TrialRequest, TrialStatus, TuneError, TuneErrorKind,
};

impl Engine {
    /// Starts one trial session over every card of `request`, all or nothing: every value is
    /// checked on its card first, no card may be in a session, and when a write fails on one
    /// card every card is put back. Returns each card's status, in the request's order.
    pub fn start_group_trial(
        &mut self,
        client: &ClientInfo,
        request: &GroupTrialRequest,
    ) -> Result<Vec<TrialStatus>, TuneError> {
        self.check_may_write(client)?;
        Engine::check_trial_times(request.duration_s, request.baseline_s)?;
        if request.changes.is_empty() {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                "A trial needs a GPU and a setting to try.",
            ));
        }
        let mut cards = Vec::new();
        for change in &request.changes {
            let index = self.index_of(&change.gpu_uuid)?;
            if cards.iter().any(|(seen, _, _)| *seen == index) {
                return Err(TuneError::new(
                    TuneErrorKind::Refused,
                    format!("GPU {index} is named twice in one trial."),
                ));
            }
            self.check_present(index)?;
            if change.settings.is_empty() {
                return Err(TuneError::new(
                    TuneErrorKind::Refused,
                    format!("GPU {index} has no setting to try."),
                ));
            }
            // Its refusal names the card.
            let validated = self.validate_all(index, &change.settings)?;
            let single = TrialRequest {
                gpu_uuid: change.gpu_uuid.clone(),
                settings: change.settings.clone(),
                duration_s: request.duration_s,
                baseline_s: request.baseline_s,
            };
            cards.push((index, single, validated));
        }
        let indices: Vec<u32> = cards.iter().map(|(index, _, _)| *index).collect();
        // Refuses a card whose tried controls anyone holds, this client included; a card's
        // other controls may be held (the window's fan curve beside a power-limit trial).
        let parts: Vec<(u32, std::collections::BTreeSet<Hold>)> = cards
            .iter()
            .map(|(index, single, _)| (*index, single.settings.iter().map(Hold::of).collect()))
            .collect();
        let id = self.open_session(client, SessionPurpose::Trial, &parts)?;
        let mut longest_missing_ms = 0;
        let mut trials = Vec::new();
        for (index, single, validated) in cards {
            let (trial, missing_ms) = self.prepare_trial(index, &single, validated, client.id);
            longest_missing_ms = longest_missing_ms.max(missing_ms);
            trials.push((index, trial));
        }
        // Every card's baseline ends at the same moment, so they apply together.
        let until = self.clock.now() + Duration::from_millis(longest_missing_ms);
        for (index, mut trial) in trials {
            trial.measure_until(until);
            if let Some(part) = self.session_part_mut(id, index) {
                part.trial = Some(trial);
            }
            self.announce(index);
        }
        if longest_missing_ms > 0 {
            // A card whose writes the driver refuses ends the trial before any baseline.
            for index in &indices {
                if let Some(refusal) = self.refused_before_baseline(*index) {
                    self.finish_trial_with(id, *index, false, &refusal, true);
                    return Ok(self.endings_told(id, &indices));
                }
            }
            return Ok(indices
                .iter()
                .filter_map(|index| self.trial_status_of(id, *index))
                .collect());
        }
        let mut statuses = Vec::new();
        for index in &indices {
            let status = self.apply_trial(id, *index);
            if status.failed {
                // Every card was put back with it: each card's ending, as told to the client.
                return Ok(self.endings_told(id, &indices));
            }
            statuses.push(status);
        }
        Ok(statuses)
    }

    /// The last ending told for each of `indices` in session `id`, in that order.
    fn endings_told(
        &self,
        id: gputune_formats::tuning::SessionId,
        indices: &[u32],
    ) -> Vec<TrialStatus> {
        indices
            .iter()
            .filter_map(|index| {
                self.events.iter().rev().find_map(|event| match event {
                    gputune_formats::tuning::EngineEvent::Trial { status, .. }
                        if status.session == id
                            && status.gpu_index == *index
                            && status.phase == gputune_formats::tuning::TrialPhase::Ended =>
                    {
                        Some(status.clone())
                    }
                    _ => None,
                })
            })
            .collect()
    }
}
