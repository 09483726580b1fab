//! What the engine tells its clients: what a card runs and who holds it, how an apply, a trial
//! or a session went, and why a request was refused. Those types cross the daemon's socket, so
//! they are formats, defined in `formats::tuning`; here are their methods and what the engine
//! keeps of its own (who asks: `ClientInfo`).

use gputune_formats::tuning::ClientId;

/// The client a kept fan curve's session belongs to: no connection has it, so no client's
/// going away ends the curve (service clients are numbered from 1; 0 is the daemon's boot
/// defaults).
pub const KEPT_CURVE_CLIENT: ClientId = ClientId::MAX;

/// Who is asking: what the service knows of a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub id: ClientId,
    /// From the socket's peer credentials (or this process, in-process).
    pub pid: Option<u32>,
    pub uid: Option<u32>,
    pub user: Option<String>,
    /// What the client says it is ("gputune apply --try 60"), already made printable.
    pub label: String,
    /// Whether it may change settings (root, the daemon's own user, or the socket's group).
    pub may_write: bool,
}

impl ClientInfo {
    /// "gputune apply --try 60 (pid 4242, user alice)", for messages that name a holder.
    pub fn describe(&self) -> String {
        let mut details = Vec::new();
        if let Some(pid) = self.pid {
            details.push(format!("pid {pid}"));
        }
        match (&self.user, self.uid) {
            (Some(user), _) => details.push(format!("user {user}")),
            (None, Some(uid)) => details.push(format!("uid {uid}")),
            (None, None) => {}
        }
        if details.is_empty() {
            self.label.clone()
        } else {
            format!("{} ({})", self.label, details.join(", "))
        }
    }
}
