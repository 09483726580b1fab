//! Tuning profiles: named sets of settings saved per card (`profile`), kept as one TOML file
//! each in the config folder (`store`, its text `toml_text`); each card's own checked clock
//! offsets (`checked`).

pub mod checked;
mod defaults;
mod on_card;
pub mod profile;
mod profile_file;
pub mod store;
pub mod toml_text;

pub use profile::{ProfileApplication, ProfileError};
pub use store::{LoadProblem, ProfileStore, StoreError, StoredProfile};
