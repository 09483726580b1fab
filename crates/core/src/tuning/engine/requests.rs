//! What clients ask the engine for: a session, a trial on one GPU or on several (the types are
//! formats, defined in `formats::tuning`), and the bounds the engine holds them to.

use gputune_formats::tuning::{GpuChange, TuneError, TuneErrorKind};

/// The longest trial: a day. Longer is a setting to apply, not to try.
pub const LONGEST_TRIAL_S: u64 = 86_400;
/// The longest baseline a trial waits for.
pub const LONGEST_BASELINE_S: u64 = 600;

/// The most GPU changes (and fan curves) in one session request: more than any machine has
/// cards.
pub const MAX_SESSION_CHANGES: usize = 64;
/// The most settings in one GPU change: each control a few times over at most.
pub const MAX_CHANGE_SETTINGS: usize = 32;

/// What a client may make the engine hold, counted in session cards (a session on one card:
/// one entry in that card's `holders`), so every message that lists them stays bounded
/// whatever the number of cards (see docs/architecture.md, "The protocol"). A session that
/// holds no control (a stability check at the card's own settings) counts like any other.
/// The most session cards of one client (one connection).
pub const MAX_SESSION_CARDS_PER_CLIENT: usize = 24;
/// The most session cards of one user (by the kernel's uid), over all its connections.
pub const MAX_SESSION_CARDS_PER_USER: usize = 32;
/// The most session cards of every user but root together; root has only its own bound, so
/// members of the group cannot lock root out.
pub const MAX_SESSION_CARDS_OF_OTHERS: usize = 64;

/// Refuses a request with more GPU changes and curves than [`MAX_SESSION_CHANGES`].
pub(super) fn check_change_count(count: usize) -> Result<(), TuneError> {
    if count > MAX_SESSION_CHANGES {
        return Err(TuneError::new(
            TuneErrorKind::Refused,
            format!(
                "A session request may name at most {MAX_SESSION_CHANGES} GPU changes and fan curves; this one names {count}."
            ),
        ));
    }
    Ok(())
}

/// Refuses a change with more settings than [`MAX_CHANGE_SETTINGS`].
pub(super) fn check_settings_count(changes: &[GpuChange]) -> Result<(), TuneError> {
    match changes
        .iter()
        .find(|change| change.settings.len() > MAX_CHANGE_SETTINGS)
    {
        Some(change) => Err(TuneError::new(
            TuneErrorKind::Refused,
            format!(
                "A change may hold at most {MAX_CHANGE_SETTINGS} settings for one GPU; this one holds {}.",
                change.settings.len()
            ),
        )),
        None => Ok(()),
    }
}
