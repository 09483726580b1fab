//! Every type that crosses the daemon's socket or is stored on disk, listed in one place with
//! its serde style. The types are still defined beside the code that makes them (the engine,
//! the device layer, the stores); this module only names them, so a newcomer sees what is a
//! format before renaming a field. Changing the serde shape of anything here changes bytes that
//! old clients and old files hold: `crates/core/tests/core/formats.rs` compares them with the golden files in
//! `tests/data/formats/` and says what to do (docs/architecture.md, "Formats"). The styles are
//! mixed; none is changed here, because each change would break a stored file or an old peer.
//! The list of what a protocol 5 should unify is in docs/architecture.md.

/// The socket: one JSON object a line (protocol [`wire::PROTOCOL_VERSION`]).
pub mod wire {
    /// The envelope: `{"id":n,"request":{"type":"snake_case",...}}` (internally tagged,
    /// unknown fields refused); answers `{"id":n,"response":{"type":...}}` and events
    /// `{"event":{"type":...}}`, told apart untagged; unknown fields ignored.
    pub use crate::service::protocol::{
        BootDefault, Event, Message, PROTOCOL_VERSION, Request, RequestLine, Response, Snapshot,
        Welcome,
    };

    /// What the engine asks and answers. `EngineEvent` is tagged `event`, `TrialPhase`
    /// `phase`, `TuneError` carries a snake_case `kind`; tuples (`fan_curves`, `left`,
    /// `stats`) are arrays.
    pub use crate::tuning::engine::{
        ChangeNote, ClientId, EngineEvent, GpuApplied, GpuChange, GpuInfo, GpuRestored, GpuTuning,
        GroupTrialRequest, Holder, SessionId, SessionPurpose, SessionReport, SessionRequest,
        SessionStarted, TrialPhase, TrialRequest, TrialStatus, TuneError, TuneErrorKind,
    };

    /// The cards. `Setting` is externally tagged in PascalCase (`{"PowerLimit":{...}}`, unit
    /// variants as bare strings) and is also the journal's and the boot default's form;
    /// `FanMode` externally tagged in snake_case; `DeviceError` tagged `kind`; throttle
    /// reasons a list of snake_case names; a reading a serde `Result` (`{"Ok":...}`).
    pub use crate::device::{
        BackendKind, ClockRangeMhz, Constraints, CriticalEvent, DeviceError, EccCounts, FanMode,
        FanRangePct, FanReading, GpuIdentity, GpuProcess, OffsetRangeMhz, ProcessKind, Setting,
        Telemetry, ThrottleReason, ThrottleReasons,
    };

    /// What a card runs and how it went: the clock lock in force is tagged `state`,
    /// `TemperatureTrend` `trend`, `Notice` adjacently (`{"level":...,"text":...}`); a fan
    /// curve is `{points, hysteresis_c}`, checked when read.
    pub use crate::notice::Notice;
    pub use crate::tuning::fan_curve::{CurvePoint, FanCurve};
    pub use crate::tuning::in_force::{ClockLock, Hold, SettingsInForce};
    pub use crate::tuning::stats::{TemperatureTrend, TrialStats};

    /// The daemon's history pages: a row is the compact array `[time_ms,[values...],bits]`.
    pub use crate::telemetry::history::HistoryRow;
    pub use crate::telemetry::store::HistoryPage;
}

/// The files: what a new build must read after an upgrade.
pub mod disk {
    /// A card's journal (pretty JSON, `format_version` 2, unknown fields refused): the
    /// `Setting`s that put the card back. The clock-lock record (`{boot_id, locks}`, valid for
    /// its boot only) holds a `LockRecord`.
    pub use crate::tuning::in_force::{ClockLock, LockRecord};
    pub use crate::tuning::state_folder::GpuJournal;

    /// A card's boot default (pretty JSON in `/var/lib/gputune/defaults`), with the fan
    /// curve the daemon keeps on the card.
    pub use crate::service::protocol::BootDefault;
    pub use crate::tuning::fan_curve::FanCurve;

    /// A profile (TOML, `schema_version` 1, unknown fields refused): watts and percent, its own
    /// `{min_mhz, max_mhz}` clock lock, a curve's points only, an optional `last_check`.
    pub use crate::profiles::profile::{
        CardIdentity, ClockLock as ProfileClockLock, PowerLimit, Profile, SCHEMA_VERSION,
    };
    pub use crate::stability::report::{CheckRecord, Verdict};

    /// The daemon's history: changes as JSON lines of `ChangeNote`; the ring as a 64-byte
    /// header and 40-byte records of `HistoryRow` (format 1).
    pub use crate::telemetry::history::HistoryRow;
    pub use crate::telemetry::store::ring::{HEADER_BYTES, RECORD_BYTES};
    pub use crate::tuning::engine::ChangeNote;
}
