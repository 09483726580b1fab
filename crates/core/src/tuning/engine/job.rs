//! A session's job: the process `gputune run` started for it (a sweep names its job when its
//! sessions start). Recorded so every client can mark that process among the GPU's processes;
//! nothing is ever done to it.

use super::{ClientInfo, Engine};
use gputune_formats::tuning::{SessionId, TuneError};

impl Engine {
    /// Records `pid` as the job of the client's session `id` and tells every client.
    pub fn set_session_job(
        &mut self,
        client: &ClientInfo,
        id: SessionId,
        pid: u32,
    ) -> Result<(), TuneError> {
        self.own_session(client, id)?;
        let indices: Vec<u32> = match self.sessions.get_mut(&id) {
            Some(session) => {
                session.job_pid = Some(pid);
                session.gpus.keys().copied().collect()
            }
            None => Vec::new(),
        };
        for index in indices {
            self.announce(index);
        }
        Ok(())
    }
}
