//! A message for the user about something that happened (a profile clamped to a card, a
//! setting restored, the fan safety net engaged), with how much it matters. The type crosses
//! the socket, so it is defined in `formats::tuning`.

pub use crate::formats::tuning::Notice;
