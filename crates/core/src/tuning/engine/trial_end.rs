//! How a trial ends: kept, or its card put back (by the session's end when the session exists
//! for the trial), with the message its client is told; a trial over several GPUs ends on
//! every card together.

use super::Engine;
use super::state::{Trial, ended_status};
use gputune_formats::tuning::{EngineEvent, SessionId, SessionPurpose, TrialStatus};

impl Engine {
    pub(super) fn finish_trial_with(
        &mut self,
        id: SessionId,
        index: u32,
        keep: bool,
        reason: &str,
        could_not_start: bool,
    ) -> TrialStatus {
        let Some(mut trial) = self
            .session_part_mut(id, index)
            .and_then(|part| part.trial.take())
        else {
            return ended_status(index, id, "No trial is running.");
        };
        let trial_only = self
            .sessions
            .get(&id)
            .is_some_and(|session| session.purpose == SessionPurpose::Trial);
        // The other cards of a trial over several GPUs end with this one, the same way.
        let companions = if trial_only {
            self.take_companion_trials(id, index)
        } else {
            Vec::new()
        };
        let mut incomplete = false;
        let message = if keep {
            if trial_only {
                self.end_session_now(id, true, "Trial kept");
            } else {
                let _ = self.write_journal(index, None);
                self.announce(index);
            }
            for (other, companion) in &companions {
                let message = format!("{reason} {}.", companion.what);
                self.tell_trial_ended(id, *other, companion, message, could_not_start);
            }
            format!("{reason} {}.", trial.what)
        } else {
            let restore = std::mem::take(&mut trial.restore);
            let report = if trial_only {
                // The session exists for the trial: ending it puts everything back and frees the card.
                if let Some(part) = self.session_part_mut(id, index) {
                    part.restore = restore;
                }
                let ended = self.end_session_now(id, false, reason);
                for (other, companion) in &companions {
                    let report = ended.restored.iter().find(|gpu| gpu.gpu_index == *other);
                    let (message, partly) = restore_message(reason, report);
                    self.tell_trial_ended(
                        id,
                        *other,
                        companion,
                        message,
                        could_not_start || partly,
                    );
                }
                ended
                    .restored
                    .into_iter()
                    .find(|gpu| gpu.gpu_index == index)
            } else {
                let report = self.restore_map(index, &restore);
                self.keep_unrestored(index, &restore, &report);
                let by = self
                    .sessions
                    .get(&id)
                    .map(|session| session.client.describe())
                    .unwrap_or_default();
                if !report.restored.is_empty() {
                    self.note_change(
                        index,
                        &by,
                        format!("put back {}", crate::tuning::describe_all(&report.restored)),
                    );
                }
                Some(report)
            };
            let (message, partly) = restore_message(reason, report.as_ref());
            incomplete = partly;
            message
        };
        let status = trial.status_of(
            index,
            id,
            Some(message),
            could_not_start || incomplete,
            self.clock.now(),
        );
        let client = self
            .sessions
            .get(&id)
            .map(|session| session.client.id)
            .or(trial.client);
        if let Some(client) = client {
            self.events.push(EngineEvent::Trial {
                client,
                status: status.clone(),
            });
        }
        status
    }

    /// Takes the trials on the session's other cards out, leaving what they replaced in their
    /// parts, so ending the session puts those back too (what the session itself replaced
    /// first: the oldest value wins).
    fn take_companion_trials(&mut self, id: SessionId, index: u32) -> Vec<(u32, Trial)> {
        let Some(session) = self.sessions.get_mut(&id) else {
            return Vec::new();
        };
        let mut companions = Vec::new();
        for (other, part) in session
            .gpus
            .iter_mut()
            .filter(|(other, _)| **other != index)
        {
            let Some(mut companion) = part.trial.take() else {
                continue;
            };
            for (control, value) in std::mem::take(&mut companion.restore) {
                part.restore.entry(control).or_insert(value);
            }
            companions.push((*other, companion));
        }
        companions
    }

    /// Tells the client a trial ended (one of a group, after its session).
    fn tell_trial_ended(
        &mut self,
        id: SessionId,
        index: u32,
        trial: &Trial,
        message: String,
        failed: bool,
    ) {
        let status = trial.status_of(index, id, Some(message), failed, self.clock.now());
        if let Some(client) = trial.client {
            self.events.push(EngineEvent::Trial { client, status });
        }
    }
}

/// What a trial's end says about the restore of its card, and whether it was only in part.
fn restore_message(
    reason: &str,
    report: Option<&gputune_formats::tuning::GpuRestored>,
) -> (String, bool) {
    match report {
        Some(report) if !report.is_complete() => {
            let left: Vec<String> = report
                .left
                .iter()
                .map(|left| format!("{}: {}", left.setting.describe(), left.reason))
                .collect();
            (
                format!(
                    "{reason} only in part; not put back: {}. {}",
                    left.join("; "),
                    super::restore::retry_sentence()
                ),
                true,
            )
        }
        Some(report) if !report.restored.is_empty() => {
            let inexact = if report.exact {
                String::new()
            } else {
                format!(" GPU {}: {}", report.gpu_index, super::UNKNOWN_LOCK_RESET)
            };
            (
                format!(
                    "{reason} {}.{inexact}",
                    crate::tuning::describe_all(&report.restored)
                ),
                false,
            )
        }
        _ => (reason.to_string(), false),
    }
}
