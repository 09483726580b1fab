//! What one client, one user and every user but root may make the engine hold: session cards
//! (a session on one card, one entry in that card's `holders`), bounded so that a member of
//! the group cannot grow the daemon's memory or its messages without end, nor lock root out.
//! The bounds themselves are in `requests.rs`.

use super::{
    ClientInfo, Engine, KEPT_CURVE_CLIENT, MAX_SESSION_CARDS_OF_OTHERS,
    MAX_SESSION_CARDS_PER_CLIENT, MAX_SESSION_CARDS_PER_USER,
};
use gputune_formats::tuning::{ClientId, TuneError, TuneErrorKind};

impl Engine {
    /// Whether `client` has a session open (its connection is not idle then, however silent).
    pub fn has_sessions(&self, client: ClientId) -> bool {
        self.sessions
            .values()
            .any(|session| session.client.id == client)
            || self.is_joined_step(client)
    }

    /// Refuses a new session on `cards` cards past the bounds on what a client, a user and
    /// every user but root may make the engine hold. The daemon's own sessions (a kept fan
    /// curve, one per card at most) are not counted.
    pub(super) fn check_room(&self, client: &ClientInfo, cards: usize) -> Result<(), TuneError> {
        if client.id == KEPT_CURVE_CLIENT {
            return Ok(());
        }
        let is_root = client.uid == Some(0);
        let (mut of_client, mut of_user, mut of_others) = (0, 0, 0);
        for session in self.sessions.values() {
            if session.client.id == KEPT_CURVE_CLIENT {
                continue;
            }
            let count = session.gpus.len();
            if session.client.id == client.id {
                of_client += count;
            }
            if session.client.uid == client.uid {
                of_user += count;
            }
            if session.client.uid != Some(0) {
                of_others += count;
            }
        }
        let refuse = |message: String| Err(TuneError::new(TuneErrorKind::Refused, message));
        if of_client + cards > MAX_SESSION_CARDS_PER_CLIENT {
            return refuse(format!(
                "This client already has {of_client} session(s) open, counting each GPU of a session, and one client may have at most {MAX_SESSION_CARDS_PER_CLIENT}: end one first."
            ));
        }
        if of_user + cards > MAX_SESSION_CARDS_PER_USER {
            let who = client
                .user
                .clone()
                .or_else(|| client.uid.map(|uid| format!("uid {uid}")))
                .unwrap_or_else(|| "this user".to_string());
            return refuse(format!(
                "{who} already has {of_user} session(s) open, counting each GPU of a session, the most for one user ({MAX_SESSION_CARDS_PER_USER}): end one, or close a gputune command or window that holds one."
            ));
        }
        if !is_root && of_others + cards > MAX_SESSION_CARDS_OF_OTHERS {
            return refuse(format!(
                "The gputune daemon already holds {of_others} sessions of its users, counting each GPU of a session, the most it takes for users other than root ({MAX_SESSION_CARDS_OF_OTHERS}): try again when one ends."
            ));
        }
        Ok(())
    }
}
