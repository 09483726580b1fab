//! A profile in words and what it changes: `Profile::summary`, shared by `profile list` and the
//! Profiles tab, and the questions every room asks of it (whether it changes clocks, which
//! card it was saved from, which card a stability check counts on).

use crate::profile::{BoxCard, CheckRecord, CheckedCard, Profile, Verdict};

impl Profile {
    /// What the profile sets, in a few words each and in the words the window uses for what a
    /// card runs: "power limit 315 W (70 %)", "GPU clocks 210-2520 MHz", "memory clocks
    /// 405-810 MHz", "GPU offset +150 MHz", "memory offset +500 MHz", "fan curve".
    pub fn summary_parts(&self) -> Vec<String> {
        let mut parts = Vec::new();
        if let Some(power) = self.power_limit {
            parts.push(format!(
                "power limit {} W ({} %)",
                crate::units::plain_number(power.watts),
                crate::units::plain_number(power.percent_of_default)
            ));
        }
        for (clock, lock) in [
            ("GPU", self.gpu_clock_lock),
            ("memory", self.memory_clock_lock),
        ] {
            if let Some(lock) = lock {
                parts.push(format!(
                    "{clock} clocks {}-{} MHz",
                    lock.min_mhz, lock.max_mhz
                ));
            }
        }
        for (clock, offset) in [
            ("GPU", self.gpu_clock_offset_mhz),
            ("memory", self.memory_clock_offset_mhz),
        ] {
            if let Some(offset_mhz) = offset {
                parts.push(format!("{clock} offset {offset_mhz:+} MHz"));
            }
        }
        if self.fan_curve.is_some() {
            parts.push("fan curve".to_string());
        }
        parts
    }

    /// [`Profile::summary_parts`] in one line, or "nothing".
    pub fn summary(&self) -> String {
        let parts = self.summary_parts();
        if parts.is_empty() {
            "nothing".to_string()
        } else {
            parts.join(", ")
        }
    }

    /// Whether applying it changes clocks (a lock or an offset): what a stability check is for.
    pub fn changes_clocks(&self) -> bool {
        self.gpu_clock_lock.is_some()
            || self.memory_clock_lock.is_some()
            || self.gpu_clock_offset_mhz.is_some_and(|offset| offset != 0)
            || self
                .memory_clock_offset_mhz
                .is_some_and(|offset| offset != 0)
    }

    /// Whether the profile was saved from this card (same UUID).
    pub fn is_for(&self, uuid: &str) -> bool {
        self.card.uuid.trim().eq_ignore_ascii_case(uuid.trim())
    }

    /// The box card `uuid`'s entry, when the profile covers a box with it.
    pub fn box_card(&self, uuid: &str) -> Option<&BoxCard> {
        self.box_cards
            .iter()
            .find(|card| card.gpu_uuid.trim().eq_ignore_ascii_case(uuid.trim()))
    }

    /// Whether the profile is for the card `uuid`: its own card, or one of its box's.
    pub fn covers(&self, uuid: &str) -> bool {
        self.is_for(uuid) || self.box_card(uuid).is_some()
    }
}

impl CheckRecord {
    /// Whether it counts as a check of the card `uuid`: only on the card that was checked (a
    /// record that names no card counts on none).
    pub fn counts_on(&self, uuid: &str) -> bool {
        self.gpu_uuid
            .as_deref()
            .is_some_and(|checked| checked.trim().eq_ignore_ascii_case(uuid.trim()))
    }
}

impl CheckedCard {
    /// Whether it counts as a check of the card `uuid`: its own card, a stable verdict.
    pub fn counts_on(&self, uuid: &str) -> bool {
        self.verdict == Verdict::Stable && self.gpu_uuid.trim().eq_ignore_ascii_case(uuid.trim())
    }
}
