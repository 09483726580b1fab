//! `gputune fan curve show --json`: each card's fan curve, who follows it, and the one in its
//! boot default.

use serde::Serialize;

use crate::fan_curve::FanCurve;
use crate::tuning::CriticalNote;

/// The fan curve report's `format_version`.
pub const FAN_CURVE_REPORT_FORMAT: u32 = 1;

/// One card as `fan curve show --json` prints it.
#[derive(Debug, Serialize)]
pub struct ShownGpu {
    pub index: u32,
    pub uuid: String,
    /// The curve followed now, kept or not.
    pub curve: Option<FanCurve>,
    /// Whether the daemon keeps it (else a window or a run follows it while it runs).
    pub kept: bool,
    /// Who set the kept curve, or which client follows it.
    pub by: Option<String>,
    /// The curve in the card's boot default.
    pub boot_curve: Option<FanCurve>,
    pub safety_net_engaged: bool,
    /// The card's last critical error (Xid), and what went back (never the fans).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_critical: Option<CriticalNote>,
}

/// The whole of `fan curve show --json`.
#[derive(Debug, Serialize)]
pub struct FanCurveReport {
    pub format_version: u32,
    /// Whether a daemon answered (without one, no curve is kept).
    pub daemon: bool,
    pub gpus: Vec<ShownGpu>,
}
