//! Tuning profiles: named sets of settings saved per card (`profile`), kept as one TOML file
//! each in the config folder (`store`); each card's own checked clock offsets (`checked`).

pub mod checked;
mod on_card;
pub mod profile;
pub mod store;

pub use profile::{ProfileApplication, ProfileError};
pub use store::{LoadProblem, ProfileStore, StoreError, StoredProfile};
