//! Every type that crosses the daemon's socket, is stored on disk or is printed for scripts,
//! defined here and nowhere else, in one serde style. A field renamed here changes bytes that old clients and old files
//! hold: `crates/core/tests/core/formats.rs` compares them with the golden files in
//! `tests/data/formats/` and says what to do (docs/architecture.md, "Formats").
//!
//! The style (protocol 5):
//! - a value with a kind is internally tagged `"type"`, names in snake_case
//!   (`{"type":"power_limit","power_limit_mw":315000}`, `{"type":"reset_gpu_clocks"}`); a
//!   closed set without data is a snake_case string (`"fan_curve"`);
//! - a reading that may have failed is `{"type":"ok","telemetry":{…}}` or
//!   `{"type":"error","error":{…}}` ([`readings`]), never serde's `{"Ok":…}`;
//! - pairs are objects with named fields, never arrays; the one exception is a history row,
//!   a compact `[time_ms,[values…],throttle_bits]` on purpose (a page holds 1,200 of them);
//! - what gputune acts on refuses fields it does not know (requests, journals, records, boot
//!   defaults, profiles, settings, fan curves); what it only shows ignores them (responses,
//!   events, readings), so a newer daemon's additions reach an older window harmlessly (a
//!   value that is its tag alone cannot refuse one: serde ignores fields beside a unit
//!   variant's tag);
//! - a file says its `format_version` (the profile its `schema_version`, the ring its header);
//!   older formats are read through [`legacy`] and converted, never written;
//! - the one exception is [`window`], the window's remembered state that eframe keeps as RON:
//!   its names stay as the window has always written them (`OneHour`, `Tune`), since renaming
//!   them would lose every user's saved state.
//!
//! This crate depends on serde and nothing of gputune's (its Cargo.toml names no gputune crate,
//! so "formats depends on nothing but units" is a compile error; `units` is a module here).
//! Every other crate imports it by its own name (`gputune_formats::card::Setting`); no room
//! re-exports its types. A type's methods live here when they need only formats, `units` and
//! std (card.rs; holds.rs, notice.rs, sessions.rs, trial_stats.rs for the types of tuning.rs;
//! fan_curve.rs and throttle.rs whole, for their private fields; window.rs's `TimeWindow`); a
//! method that needs a room is that room's trait, named for what it does
//! (`tuning::in_force::ControlsInForce`, `profiles::profile::ProfileOnCard`, ...;
//! docs/architecture.md, "Formats").

pub mod card;
pub mod fan_curve;
pub mod files;
pub mod history;
pub mod holds;
pub mod jobs;
pub mod legacy;
pub mod notice;
pub mod profile;
mod profile_summary;
pub mod protocol;
pub mod readings;
pub mod reports;
pub mod sessions;
pub mod temperature_hold;
pub mod throttle;
pub mod trial_stats;
pub mod tuning;
pub mod units;
pub mod window;
