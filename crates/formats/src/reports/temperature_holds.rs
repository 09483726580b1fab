//! `gputune hold-temp show --json`: each card's temperature hold, where it is, and the one in
//! its boot default.

use serde::Serialize;

use crate::temperature_hold::{TemperatureHold, TemperatureHoldStatus};

/// The temperature hold report's `format_version`.
pub const TEMPERATURE_HOLD_REPORT_FORMAT: u32 = 1;

/// One card as `hold-temp show --json` prints it.
#[derive(Debug, Serialize)]
pub struct ShownHold {
    pub index: u32,
    pub uuid: String,
    /// The hold the daemon keeps now, who set it and where it is; `null` for none.
    pub hold: Option<TemperatureHoldStatus>,
    /// The hold in the card's boot default.
    pub boot_hold: Option<TemperatureHold>,
}

/// The whole of `hold-temp show --json`.
#[derive(Debug, Serialize)]
pub struct TemperatureHoldReport {
    pub format_version: u32,
    /// Whether a daemon answered (without one, no hold is kept).
    pub daemon: bool,
    pub gpus: Vec<ShownHold>,
}
