//! A profile's file (TOML, written for people: watts and percent, its own clock-lock shape, a
//! curve's points only) and the stability check it remembers. Their code is in `profiles` and
//! `stability::report`.

use serde::{Deserialize, Serialize};

use super::fan_curve::CurvePoint;

/// The version of the profile file format this gputune writes and reads. A file with a higher
/// version is refused (never rewritten), so an older gputune cannot mangle a newer profile.
pub const SCHEMA_VERSION: u32 = 1;

/// Which card a profile was saved from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardIdentity {
    /// NVML UUID ("GPU-..."): how gputune recognizes the same card again.
    pub uuid: String,
    /// Model name ("NVIDIA GeForce RTX 4090").
    pub name: String,
    /// PCI bus id when it was saved, for people only.
    pub pci_bus_id: String,
}

/// A power limit, kept both ways: watts for the card it was saved from, a share of the default
/// limit for any other card.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerLimit {
    pub percent_of_default: f64,
    pub watts: f64,
}

/// A clock lock, inclusive, in MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileClockLock {
    pub min_mhz: u32,
    pub max_mhz: u32,
}

/// A named set of settings for a card. `None` leaves that control as it is when the profile is
/// applied. One hand-editable TOML file per profile (see `profiles::store`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The file format's version: [`SCHEMA_VERSION`] for what this gputune writes.
    pub schema_version: u32,
    pub name: String,
    #[serde(default)]
    pub notes: String,
    /// The card the profile was saved from.
    pub card: CardIdentity,
    /// Applied at boot by `gputune profile apply-defaults` (one default per card UUID).
    #[serde(default)]
    pub default_for_card: bool,
    pub power_limit: Option<PowerLimit>,
    pub gpu_clock_lock: Option<ProfileClockLock>,
    pub memory_clock_lock: Option<ProfileClockLock>,
    pub gpu_clock_offset_mhz: Option<i32>,
    pub memory_clock_offset_mhz: Option<i32>,
    /// Temperature → fan speed points, followed by the window or `gputune run`.
    pub fan_curve: Option<Vec<CurvePoint>>,
    /// The last stability check of these settings (`gputune stability --profile`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check: Option<CheckRecord>,
    /// Each card's own checked clock offsets, one entry per card UUID (`[[checked_cards]]`): a
    /// clock offset does not carry from one chip to another, so on a card other than
    /// [`Profile::card`] the profile's offsets are applied only from that card's entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checked_cards: Vec<CheckedCard>,
    /// The cards of a box the profile covers, [`Profile::card`] among them (`[[box_cards]]`,
    /// written by `gputune sweep --gpu LIST --save-profile`): applied to every one at once by
    /// `gputune run`, the boot default and the window. Empty: the profile is `card`'s alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub box_cards: Vec<BoxCard>,
}

/// One card of the box a profile covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxCard {
    /// NVML UUID: the entry counts only on that card.
    pub gpu_uuid: String,
    /// Its model name when it was swept, for people only.
    pub gpu_name: String,
    /// This card's own power limit (a hot slot's, from the sweep's advice), in its own watts;
    /// `None`: the profile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit: Option<PowerLimit>,
}

/// What found a card's offsets stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckedBy {
    /// `gputune scan` (or the window's scan) confirmed the offset on the card.
    Scan,
    /// `gputune stability --profile` held the profile's settings on the card.
    Check,
}

/// One card's own clock offsets for a profile, as a scan or a check of that card left them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckedCard {
    /// The card checked (NVML UUID): the entry counts only on that card.
    pub gpu_uuid: String,
    /// Its model name when it was checked, for people only.
    pub gpu_name: String,
    /// The offsets found stable on it; `None` leaves that offset as it is.
    pub gpu_clock_offset_mhz: Option<i32>,
    pub memory_clock_offset_mhz: Option<i32>,
    /// Unix time the check ended, ms.
    pub checked_at_ms: u64,
    pub ran_s: f64,
    pub by: CheckedBy,
    /// Only a stable verdict is kept (an unstable one removes the card's entry); an entry
    /// edited to another verdict counts as no check.
    pub verdict: Verdict,
}

/// The verdict in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Stable,
    Unstable,
    /// Stopped before its time: what ran was clean, but it is not a verdict.
    Stopped,
    /// It could not run at all.
    NotRun,
}

/// A profile's memory of its last stability check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// Unix time the check ended, ms.
    pub ended_at_ms: u64,
    pub ran_s: f64,
    pub verdict: Verdict,
    /// The verdict sentence.
    pub summary: String,
    pub driver_version: Option<String>,
    pub gputune_version: String,
    /// The card that was checked (NVML UUID): the record counts only on that card. `None` in a
    /// record an older gputune wrote: the card is unknown, so it counts on no card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_uuid: Option<String>,
    /// That card's model name when it was checked, for people only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_name: Option<String>,
}
