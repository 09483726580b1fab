//! Ending sessions: by their client (keep or put back), when their client goes away (a closed
//! window, a killed `gputune run`), and at once from anywhere (a critical error, a lost GPU, a
//! fan curve the driver refuses, shutdown). Whatever ends a session puts back exactly what it
//! changed (`restore.rs`) and tells its client.

use super::{ClientInfo, Engine, RestoreMap};
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::TrialStats;
use gputune_formats::tuning::{
    ClientId, GpuStats, SessionId, SessionPurpose, SessionReport, TuneError,
};

impl Engine {
    /// Ends the client's session `id`: keeps its changes, or puts everything back.
    pub fn end_session(
        &mut self,
        client: &ClientInfo,
        id: SessionId,
        keep: bool,
    ) -> Result<SessionReport, TuneError> {
        if let Some(report) = self.leave_job(client, id) {
            return Ok(report);
        }
        self.own_session(client, id)?;
        if let Some(report) = self.hand_over_job(id) {
            return Ok(report);
        }
        let message = if keep {
            "Kept the settings on"
        } else {
            "Put back"
        };
        Ok(self.end_session_now(id, keep, message))
    }

    /// A client disconnected (or was killed): its sessions end and their cards go back.
    pub fn client_gone(&mut self, client: ClientId) {
        self.drop_joined_steps(client);
        let ids: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, session)| session.client.id == client)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if self.hand_over_job(id).is_some() {
                continue;
            }
            let by = self
                .sessions
                .get(&id)
                .map(|session| session.client.describe())
                .unwrap_or_default();
            let report = self.end_session_now(id, false, "Put back");
            let gpus: Vec<String> = report
                .restored
                .iter()
                .map(|gpu| format!("GPU {}", gpu.gpu_index))
                .collect();
            let notice = if report.is_complete() {
                Notice::Info(format!(
                    "{by} went away during {}; its changes on {} were put back.",
                    report.purpose.describe(),
                    gpus.join(", ")
                ))
            } else {
                Notice::Error(format!(
                    "{by} went away during {}, and not everything on {} could be put back: {}",
                    report.purpose.describe(),
                    gpus.join(", "),
                    super::report_lines(&report).join(" ")
                ))
            };
            self.notice(report.restored.first().map(|gpu| gpu.gpu_index), notice);
        }
    }

    /// Ends session `id` now (nothing checked): its trials, its curves, its changes.
    pub(super) fn end_session_now(
        &mut self,
        id: SessionId,
        keep: bool,
        message: &str,
    ) -> SessionReport {
        let Some(session) = self.sessions.remove(&id) else {
            return SessionReport {
                session: id,
                purpose: SessionPurpose::Trial,
                kept: keep,
                restored: Vec::new(),
                stats: Vec::new(),
                message: format!("There is no session {id}."),
                critical_event: None,
                job_record: None,
            };
        };
        // Before the put-back: the record names the settings the job held.
        let job_record = self.job_record(id, &session, message);
        let by = session.client.describe();
        let mut restored = Vec::new();
        let mut stats = Vec::new();
        for (index, part) in session.gpus {
            if part.follows_curve {
                let fans = &mut self.gpu_mut(index).fans;
                fans.curve = None;
                fans.target_pct = None;
            }
            // Oldest value wins: the session's own record, then its trial's, then what an
            // earlier put-back in it could not write (tried again now). Kept: nothing.
            let mut map = RestoreMap::new();
            if !keep {
                map = part.restore;
                let trial = part.trial.as_ref().map(|trial| &trial.restore);
                for (control, value) in trial
                    .into_iter()
                    .flatten()
                    .chain(&self.gpu(index).unrestored)
                {
                    map.entry(*control).or_insert(*value);
                }
            }
            // The session is gone before the restore's writes, so they journal nothing new.
            let report = self.restore_map(index, &map);
            self.keep_unrestored(index, &map, &report);
            if !report.restored.is_empty() {
                self.note_change(
                    index,
                    &by,
                    format!("put back {}", crate::tuning::describe_all(&report.restored)),
                );
            }
            self.release_lock(index);
            self.announce(index);
            stats.push(GpuStats {
                gpu_index: index,
                stats: TrialStats::from_samples(&part.during),
            });
            restored.push(report);
        }
        self.box_check_ended(id);
        SessionReport {
            session: id,
            purpose: session.purpose,
            kept: keep,
            restored,
            stats,
            message: message.to_string(),
            critical_event: None,
            job_record: job_record.map(Box::new),
        }
    }
}
