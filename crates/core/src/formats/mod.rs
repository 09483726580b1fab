//! Every type that crosses the daemon's socket or is stored on disk, defined here and nowhere
//! else, in one serde style. A field renamed here changes bytes that old clients and old files
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
//!   older formats are read through [`legacy`] and converted, never written.
//!
//! This module imports nothing of gputune's but the leaves (`units`); every room above builds
//! on it and re-exports what it uses (`device::Setting` is `formats::card::Setting`). Methods
//! stay with their rooms, except where a type's private fields need them here: a fan curve's
//! checks and interpolation (`fan_curve`), NVML's throttle bits and their names (`throttle`).

pub mod card;
pub mod fan_curve;
pub mod files;
pub mod history;
pub mod jobs;
pub mod legacy;
pub mod profile;
pub mod protocol;
pub mod readings;
pub mod reports;
pub mod throttle;
pub mod tuning;
