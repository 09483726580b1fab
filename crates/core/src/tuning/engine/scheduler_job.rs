//! A scheduler's job (a Slurm job, through the SPANK plugin): a session of purpose `job` that
//! only root may start (slurmstepd runs the plugin as root; a job's name on a card is what the
//! exporter labels and the job's energy record trust). A job's steps on one node share its
//! cards: the batch step holds them for the job's life and each `srun` inside asks again for a
//! subset, so a step whose cards are all held by its own job's session joins that session
//! instead of being refused. The session ends when its last step has gone: the holder that
//! goes (or ends it) hands it to a step still running.

use super::state::Session;
use super::{ClientInfo, Engine};
use gputune_formats::tuning::{ClientId, SessionId, TuneError, TuneErrorKind};
use gputune_formats::tuning::{
    JobInfo, SessionPurpose, SessionReport, SessionRequest, SessionStarted,
};

/// The most steps one job's session takes in (a step is a connection, and connections are
/// bounded too; this keeps a job's list short whatever a client sends).
const MAX_JOINED_STEPS: usize = 64;

/// The longest job id, step, user or scheduler name, in characters.
const JOB_TEXT_MAX_CHARS: usize = 128;

impl Engine {
    /// Refuses a job session from anyone but root, a job without its `JobInfo` or with text
    /// no scheduler writes, and a `JobInfo` on any other purpose.
    pub(super) fn check_job_request(
        &self,
        client: &ClientInfo,
        request: &SessionRequest,
    ) -> Result<(), TuneError> {
        let refused = |message: &str| Err(TuneError::new(TuneErrorKind::Refused, message));
        match (request.purpose, &request.job) {
            (SessionPurpose::Job, None) => {
                refused("A job session names its job (scheduler, job id, step, user).")
            }
            (SessionPurpose::Job, Some(job)) => {
                if client.uid != Some(0) {
                    return Err(TuneError::new(
                        TuneErrorKind::NotAllowed,
                        "Only root starts job sessions: they come from the scheduler's plugin on the node (gputune_spank.so in slurmstepd), not from users.",
                    ));
                }
                let fields = [&job.scheduler, &job.job_id, &job.step, &job.user];
                if fields.iter().any(|text| {
                    text.is_empty()
                        || text.chars().count() > JOB_TEXT_MAX_CHARS
                        || text.chars().any(char::is_control)
                }) {
                    return refused(
                        "A job's scheduler, id, step and user must each be 1 to 128 printable characters.",
                    );
                }
                Ok(())
            }
            (_, Some(_)) => refused("Only a session of purpose job names a scheduler's job."),
            (_, None) => Ok(()),
        }
    }

    /// A later step of a job whose session already holds every card the step asks for joins
    /// that session: nothing is written, and the session ends only after this step too.
    pub(super) fn join_job(
        &mut self,
        client: &ClientInfo,
        request: &SessionRequest,
    ) -> Result<Option<SessionStarted>, TuneError> {
        let Some(job) = &request.job else {
            return Ok(None);
        };
        let mut wanted = Vec::new();
        for change in &request.changes {
            wanted.push(self.index_of(&change.gpu_uuid)?);
        }
        let found = self.sessions.iter_mut().find(|(_, session)| {
            same_job(session, job)
                && !wanted.is_empty()
                && wanted.iter().all(|index| session.gpus.contains_key(index))
        });
        let Some((&id, session)) = found else {
            return Ok(None);
        };
        if session.steps.len() >= MAX_JOINED_STEPS {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                format!(
                    "Job {} already has {MAX_JOINED_STEPS} steps on this node's cards: end some first.",
                    job.job_id
                ),
            ));
        }
        if session.client.id != client.id && !session.steps.iter().any(|s| s.id == client.id) {
            session.steps.push(client.clone());
        }
        Ok(Some(SessionStarted {
            session: id,
            applied: Vec::new(),
            joined: true,
        }))
    }

    /// A step that joined a job's session leaves it (its `end_session`): the session goes on
    /// for the job's other steps. `None` when `client` is not a joined step of session `id`.
    pub(super) fn leave_job(
        &mut self,
        client: &ClientInfo,
        id: SessionId,
    ) -> Option<SessionReport> {
        let session = self.sessions.get_mut(&id)?;
        let position = session.steps.iter().position(|step| step.id == client.id)?;
        session.steps.remove(position);
        Some(goes_on_report(id, session))
    }

    /// The holder of job session `id` is going (it ended it, or its connection dropped): a
    /// step still running takes the session over, and nothing is put back. False when no step
    /// is left (the session must end).
    pub(super) fn hand_over_job(&mut self, id: SessionId) -> Option<SessionReport> {
        let session = self.sessions.get_mut(&id)?;
        if session.steps.is_empty() {
            return None;
        }
        session.client = session.steps.remove(0);
        let report = goes_on_report(id, session);
        let indices: Vec<u32> = session.gpus.keys().copied().collect();
        for index in indices {
            self.announce(index);
        }
        Some(report)
    }

    /// Takes a client that went away out of every job session it had joined.
    pub(super) fn drop_joined_steps(&mut self, client: ClientId) {
        for session in self.sessions.values_mut() {
            session.steps.retain(|step| step.id != client);
        }
    }

    /// Whether `client` is a step that joined some job's session (it holds that session's cards
    /// as much as its first step does).
    pub(super) fn is_joined_step(&self, client: ClientId) -> bool {
        self.sessions
            .values()
            .any(|session| session.steps.iter().any(|step| step.id == client))
    }
}

fn same_job(session: &Session, job: &JobInfo) -> bool {
    session.purpose == SessionPurpose::Job
        && session.job.as_ref().is_some_and(|held| {
            held.scheduler == job.scheduler && held.job_id == job.job_id && held.uid == job.uid
        })
}

/// What a step that leaves a job's session (or hands it over) is told: nothing was put back,
/// the session goes on.
fn goes_on_report(id: SessionId, session: &Session) -> SessionReport {
    let job_id = session
        .job
        .as_ref()
        .map_or_else(String::new, |job| format!(" {}", job.job_id));
    SessionReport {
        session: id,
        purpose: session.purpose,
        kept: true,
        restored: Vec::new(),
        stats: Vec::new(),
        message: format!(
            "Job{job_id}'s settings stay on its cards for its {} other step(s) still running; they go back when the last one ends.",
            session.steps.len() + 1
        ),
        critical_event: None,
        job_record: None,
    }
}
