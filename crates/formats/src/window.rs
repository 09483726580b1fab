//! What the window remembers between runs: the GPU whose graphs were open, the graphs' time
//! window, the sampling interval, the tab, and whether to apply each card's default profile
//! when it opens. eframe keeps it (its size it keeps itself) in its own storage file under the
//! key `gputune-window`, written with `eframe::set_value`: RON, through `ron::ser::to_string`,
//! which writes no struct names:
//!
//! ```text
//! (selected_gpu_uuid:Some("GPU-…"),monitor:(window:OneHour),interval_ms:500,tab:Tune,apply_default_profiles_on_start:true)
//! ```
//!
//! **Why this file breaks the crate's style.** Everything else here is JSON or TOML with
//! snake_case names; this is RON with serde's as-written names: the variants are `Monitor`,
//! `OneHour`, ..., exactly as the window has saved them since before this crate existed. A
//! `rename_all = "snake_case"` here would make every saved state fail to read, and eframe's
//! `get_value` answers a state it cannot read with nothing: every user would lose the GPU,
//! window, interval and tab they had chosen, silently. So the names stay as written, and the
//! type names may change freely (RON without struct names does not hold them:
//! `RememberedWindow` was the window's `RememberedState`, `RememberedMonitor` its `MonitorView`).
//!
//! A missing field is its default (`#[serde(default)]`), so a state saved before a field was
//! added still reads; an unknown field is ignored, so a state saved by a newer window does not
//! throw the rest away. An unknown variant (a newer window's time window) cannot be read, and
//! the whole state falls back to the defaults: add variants sparingly.
//! `crates/core/tests/core/formats/window.rs` pins the bytes and the previous version's text.

use serde::{Deserialize, Serialize};

/// The window's sampling interval when the user has not chosen one.
pub const DEFAULT_INTERVAL_MS: u64 = 500;

/// What the window remembers between runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RememberedWindow {
    /// The GPU whose graphs were open, by NVML UUID (indices can change between boots).
    pub selected_gpu_uuid: Option<String>,
    pub monitor: RememberedMonitor,
    pub interval_ms: u64,
    pub tab: Tab,
    /// Apply each card's default profile when the window opens.
    pub apply_default_profiles_on_start: bool,
}

impl Default for RememberedWindow {
    fn default() -> RememberedWindow {
        RememberedWindow {
            selected_gpu_uuid: None,
            monitor: RememberedMonitor::default(),
            interval_ms: DEFAULT_INTERVAL_MS,
            tab: Tab::Monitor,
            apply_default_profiles_on_start: false,
        }
    }
}

/// What the Monitor tab's graphs remember: the time window only (a pause is not kept: a window
/// opens on live data, not on a pause from last week).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RememberedMonitor {
    pub window: TimeWindow,
}

/// The window's top-level views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Tab {
    #[default]
    Monitor,
    Tune,
    Profiles,
    Plan,
    /// The cards of a multi-GPU box side by side (added after the others: a state saved
    /// before it still reads; a window older than it reads a state saved on it as defaults).
    Box,
}

/// The spans the graphs' time-window picker offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TimeWindow {
    OneMinute,
    #[default]
    TenMinutes,
    OneHour,
    SixHours,
    Day,
}

impl TimeWindow {
    /// Every span, shortest first (the picker's order).
    pub const ALL: [TimeWindow; 5] = [
        TimeWindow::OneMinute,
        TimeWindow::TenMinutes,
        TimeWindow::OneHour,
        TimeWindow::SixHours,
        TimeWindow::Day,
    ];

    pub fn duration_ms(self) -> u64 {
        let minute = 60_000;
        match self {
            TimeWindow::OneMinute => minute,
            TimeWindow::TenMinutes => 10 * minute,
            TimeWindow::OneHour => 60 * minute,
            TimeWindow::SixHours => 6 * 60 * minute,
            TimeWindow::Day => 24 * 60 * minute,
        }
    }

    /// The picker's text.
    pub fn label(self) -> &'static str {
        match self {
            TimeWindow::OneMinute => "1 min",
            TimeWindow::TenMinutes => "10 min",
            TimeWindow::OneHour => "1 h",
            TimeWindow::SixHours => "6 h",
            TimeWindow::Day => "24 h",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_ordered_and_labelled() {
        let durations: Vec<u64> = TimeWindow::ALL
            .iter()
            .map(|window| window.duration_ms())
            .collect();
        assert!(durations.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(TimeWindow::Day.duration_ms(), 86_400_000);
        assert_eq!(TimeWindow::OneMinute.label(), "1 min");
    }
}
