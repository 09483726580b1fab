//! A profile's undervolt, checked per card. A clock offset found stable on one chip can compute
//! wrong results on the next, so it never carries across cards: each card keeps its own checked
//! offsets ([`CheckedCard`], by UUID), and the one rule of which offsets a card gets
//! ([`Profile::offsets_for`]) is what `Profile::for_card` applies for the window, `profile
//! apply`, `run --profile`, boot defaults and the Slurm plugin alike.

use crate::text::short_uuid;
use gputune_formats::card::Setting;
use gputune_formats::profile::{CheckedBy, CheckedCard};
use gputune_formats::profile::{Profile, Verdict};

/// The most cards one profile remembers checks of: far beyond any node.
pub const CHECKED_CARDS_MAX: usize = 256;
/// The longest UUID or model name an entry keeps, in characters.
const ENTRY_TEXT_MAX_CHARS: usize = 256;

/// Which clock offsets a card gets from a profile.
#[derive(Debug, Clone, PartialEq)]
pub enum CardOffsets {
    /// The card the profile was saved from: the profile's own offsets, the user's values.
    Own,
    /// Another card, with its own stable entry: that entry's offsets.
    Checked(CheckedCard),
    /// Another card never found stable with this profile's undervolt: no offset (but stock).
    Unchecked,
    /// For a check of another card (`gputune stability --profile`): the profile's offsets,
    /// tried there so that a stable verdict becomes the card's own entry.
    Candidate,
}

impl CardOffsets {
    /// The GPU and memory clock offsets this choice sets, from `profile`.
    pub fn values(&self, profile: &Profile) -> (Option<i32>, Option<i32>) {
        match self {
            CardOffsets::Own | CardOffsets::Candidate => (
                profile.gpu_clock_offset_mhz,
                profile.memory_clock_offset_mhz,
            ),
            CardOffsets::Checked(entry) => {
                (entry.gpu_clock_offset_mhz, entry.memory_clock_offset_mhz)
            }
            // Stock (0 MHz) is safe on any card; nothing else carries.
            CardOffsets::Unchecked => (
                profile.gpu_clock_offset_mhz.filter(|offset| *offset == 0),
                profile
                    .memory_clock_offset_mhz
                    .filter(|offset| *offset == 0),
            ),
        }
    }
}

/// A card's checked-offsets entry: which card it counts on, in words, and whether it is sound.
pub trait CheckedCardEntry {
    /// "NVIDIA GeForce RTX 4090 GPU-5a1e0c2d…: GPU offset +90 MHz; a scan found it stable for
    /// 10 min on 26 Nov": one line of `profile show` and the Profiles tab.
    fn describe(&self) -> String;

    /// Whether an entry read from a file could mean something.
    fn check(&self, position: usize) -> Result<(), String>;
}

impl CheckedCardEntry for CheckedCard {
    fn describe(&self) -> String {
        let offsets = describe_offsets(self.gpu_clock_offset_mhz, self.memory_clock_offset_mhz)
            .unwrap_or_else(|| "no clock offset".to_string());
        let by = match self.by {
            CheckedBy::Scan => "a scan",
            CheckedBy::Check => "a check",
        };
        let day = gputune_formats::units::local_time(self.checked_at_ms, "%-d %b");
        let ran = gputune_formats::units::duration_s(self.ran_s);
        let verdict = match self.verdict {
            Verdict::Stable => format!("{by} found it stable for {ran} on {day}"),
            Verdict::Unstable => format!("{by} found it UNSTABLE on {day}; it counts as no check"),
            Verdict::Stopped | Verdict::NotRun => {
                format!("{by} on {day} gave no verdict; it counts as no check")
            }
        };
        format!(
            "{} {}: {offsets}; {verdict}",
            self.gpu_name,
            short_uuid(&self.gpu_uuid)
        )
    }

    fn check(&self, position: usize) -> Result<(), String> {
        let field = |name: &str| format!("checked_cards[{position}].{name}");
        if self.gpu_uuid.trim().is_empty() {
            return Err(format!("{} is empty", field("gpu_uuid")));
        }
        for (name, value) in [("gpu_uuid", &self.gpu_uuid), ("gpu_name", &self.gpu_name)] {
            if value.chars().count() > ENTRY_TEXT_MAX_CHARS {
                return Err(format!(
                    "{} is longer than {ENTRY_TEXT_MAX_CHARS} characters",
                    field(name)
                ));
            }
            if let Some(character) = crate::text::first_unsafe(value) {
                return Err(crate::text::unsafe_character(&field(name), character));
            }
        }
        if !self.ran_s.is_finite() || self.ran_s < 0.0 {
            return Err(format!(
                "{} = {} is not a duration",
                field("ran_s"),
                self.ran_s
            ));
        }
        for (name, offset) in [
            ("gpu_clock_offset_mhz", self.gpu_clock_offset_mhz),
            ("memory_clock_offset_mhz", self.memory_clock_offset_mhz),
        ] {
            if let Some(offset) = offset
                && !(-super::profile::OFFSET_MAX_MHZ..=super::profile::OFFSET_MAX_MHZ)
                    .contains(&offset)
            {
                return Err(format!(
                    "{} = {offset} is not a clock offset (-{max} to {max} MHz)",
                    field(name),
                    max = super::profile::OFFSET_MAX_MHZ
                ));
            }
        }
        Ok(())
    }
}

/// The offsets a profile's stability checks cover, card by card.
pub trait CheckedOffsets {
    /// The one rule: on the card the profile was saved from, its own offsets; on another card,
    /// that card's own stable entry, else none.
    fn offsets_for(&self, uuid: &str) -> CardOffsets;

    /// What a check of the card `uuid` holds: the offsets it gets by the rule, or, on a card
    /// with none of its own, the profile's offsets, to be found stable there.
    fn offsets_to_check_on(&self, uuid: &str) -> CardOffsets;

    /// The card `uuid`'s own stable entry. A stable `last_check` that names the card counts
    /// as its entry, at the profile's offsets (what that check held there).
    fn checked_entry_for(&self, uuid: &str) -> Option<CheckedCard>;

    /// When the profile was last found stable on the card `uuid` (Unix ms), by its
    /// `last_check` or that card's entry: where `stability --put-back` goes back to.
    fn stable_on_since(&self, uuid: &str) -> Option<u64>;

    /// Records a scan's or a check's verdict on one card: a stable one becomes (or replaces)
    /// the card's entry, an unstable one removes it, no verdict (stopped, not run) changes
    /// nothing. The other cards' entries are kept.
    fn record_checked_card(&mut self, entry: CheckedCard);

    /// The entries a profile re-saved as `self` keeps from `previous`: all of them when the
    /// power limit and locks they were checked under are the same, except the saving card's
    /// own when its offsets changed (the user's new values are not what was checked).
    fn checked_cards_kept_from(&self, previous: &Profile) -> Vec<CheckedCard>;

    /// Whether the profile sets a clock offset other than zero.
    fn sets_offsets(&self) -> bool;

    /// A line per card checked with this profile's undervolt (`profile show`, the Profiles
    /// tab), then one for every other card when the profile sets offsets.
    fn checked_card_lines(&self) -> Vec<String>;

    /// Every entry could mean something, and no card has two.
    fn check_checked_cards(&self) -> Result<(), String>;

    /// The sentence for a card that gets no offset: which card, why, and the commands that
    /// check it (by UUID: an index differs between machines and schedulers).
    fn unchecked_offsets_notice(&self, name: &str, uuid: &str) -> Option<String>;
}

impl CheckedOffsets for Profile {
    fn offsets_for(&self, uuid: &str) -> CardOffsets {
        if self.is_for(uuid) {
            return CardOffsets::Own;
        }
        // A profile that sets no offset gives none, whatever an old entry says.
        if !self.sets_offsets() {
            return CardOffsets::Unchecked;
        }
        match self.checked_entry_for(uuid) {
            Some(entry) => CardOffsets::Checked(entry),
            None => CardOffsets::Unchecked,
        }
    }

    fn offsets_to_check_on(&self, uuid: &str) -> CardOffsets {
        match self.offsets_for(uuid) {
            CardOffsets::Unchecked if self.sets_offsets() => CardOffsets::Candidate,
            offsets => offsets,
        }
    }

    fn checked_entry_for(&self, uuid: &str) -> Option<CheckedCard> {
        if let Some(entry) = self
            .checked_cards
            .iter()
            .find(|entry| same_uuid(&entry.gpu_uuid, uuid))
        {
            return entry.counts_on(uuid).then(|| entry.clone());
        }
        let record = self.last_check.as_ref()?;
        (record.verdict == Verdict::Stable && record.counts_on(uuid)).then(|| CheckedCard {
            gpu_uuid: uuid.to_string(),
            gpu_name: record.gpu_name.clone().unwrap_or_default(),
            gpu_clock_offset_mhz: self.gpu_clock_offset_mhz,
            memory_clock_offset_mhz: self.memory_clock_offset_mhz,
            checked_at_ms: record.ended_at_ms,
            ran_s: record.ran_s,
            by: CheckedBy::Check,
            verdict: Verdict::Stable,
        })
    }

    fn stable_on_since(&self, uuid: &str) -> Option<u64> {
        let record = self
            .last_check
            .as_ref()
            .filter(|record| record.verdict == Verdict::Stable && record.counts_on(uuid))
            .map(|record| record.ended_at_ms);
        let entry = self
            .checked_cards
            .iter()
            .find(|entry| entry.counts_on(uuid))
            .map(|entry| entry.checked_at_ms);
        record.max(entry)
    }

    fn record_checked_card(&mut self, entry: CheckedCard) {
        match entry.verdict {
            Verdict::Stable => {
                self.checked_cards
                    .retain(|kept| !same_uuid(&kept.gpu_uuid, &entry.gpu_uuid));
                self.checked_cards.push(entry);
                if self.checked_cards.len() > CHECKED_CARDS_MAX {
                    // The oldest check goes first.
                    if let Some(oldest) = self
                        .checked_cards
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, kept)| kept.checked_at_ms)
                        .map(|(position, _)| position)
                    {
                        self.checked_cards.remove(oldest);
                    }
                }
            }
            Verdict::Unstable => self
                .checked_cards
                .retain(|kept| !same_uuid(&kept.gpu_uuid, &entry.gpu_uuid)),
            Verdict::Stopped | Verdict::NotRun => {}
        }
    }

    fn checked_cards_kept_from(&self, previous: &Profile) -> Vec<CheckedCard> {
        let same_conditions = (
            previous.power_limit.map(|power| power.watts.to_bits()),
            previous.gpu_clock_lock,
            previous.memory_clock_lock,
        ) == (
            self.power_limit.map(|power| power.watts.to_bits()),
            self.gpu_clock_lock,
            self.memory_clock_lock,
        );
        if !same_conditions {
            return Vec::new();
        }
        previous
            .checked_cards
            .iter()
            .filter(|entry| {
                !self.is_for(&entry.gpu_uuid)
                    || (entry.gpu_clock_offset_mhz, entry.memory_clock_offset_mhz)
                        == (self.gpu_clock_offset_mhz, self.memory_clock_offset_mhz)
            })
            .cloned()
            .collect()
    }

    fn sets_offsets(&self) -> bool {
        describe_offsets(self.gpu_clock_offset_mhz, self.memory_clock_offset_mhz).is_some()
    }

    fn checked_card_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .checked_cards
            .iter()
            .map(CheckedCard::describe)
            .collect();
        if let Some(record) = &self.last_check
            && let Some(uuid) = record.gpu_uuid.as_deref()
            && !self
                .checked_cards
                .iter()
                .any(|entry| same_uuid(&entry.gpu_uuid, uuid))
            && let Some(entry) = self.checked_entry_for(uuid)
        {
            lines.insert(0, entry.describe());
        }
        if self.sets_offsets() {
            lines.push(format!(
                "any other card: no clock offset until it is checked there (`gputune stability --profile \"{}\" --gpu N`)",
                self.name
            ));
        }
        lines
    }

    fn check_checked_cards(&self) -> Result<(), String> {
        if self.checked_cards.len() > CHECKED_CARDS_MAX {
            return Err(format!(
                "checked_cards has {} entries; at most {CHECKED_CARDS_MAX} are kept",
                self.checked_cards.len()
            ));
        }
        for (position, entry) in self.checked_cards.iter().enumerate() {
            entry.check(position)?;
            if self.checked_cards[..position]
                .iter()
                .any(|earlier| same_uuid(&earlier.gpu_uuid, &entry.gpu_uuid))
            {
                return Err(format!(
                    "checked_cards has two entries for the card {}; keep one",
                    entry.gpu_uuid
                ));
            }
        }
        Ok(())
    }

    fn unchecked_offsets_notice(&self, name: &str, uuid: &str) -> Option<String> {
        let offsets = describe_offsets(self.gpu_clock_offset_mhz, self.memory_clock_offset_mhz)?;
        let found_unstable = self
            .last_check
            .as_ref()
            .is_some_and(|record| record.verdict == Verdict::Unstable && record.counts_on(uuid));
        let why = if found_unstable {
            "was found UNSTABLE with this profile's undervolt"
        } else {
            "was never checked with this profile's undervolt"
        };
        Some(format!(
            "No clock offset is applied to this {name} ({}): it {why}, and an offset found stable on one card can compute wrong results on another (the profile's {offsets} were found on its own card, {}). `gputune stability --profile \"{profile}\" --gpu {uuid}` checks them on this card, or `gputune scan --gpu {uuid} --save-profile \"{profile}\" --replace` finds its own; either records it in the profile.",
            short_uuid(uuid),
            short_uuid(&self.card.uuid),
            profile = self.name,
        ))
    }
}

/// The offsets a list of settings sets: what a check held on a card.
pub fn offsets_in(settings: &[Setting]) -> (Option<i32>, Option<i32>) {
    let mut offsets = (None, None);
    for setting in settings {
        match setting {
            Setting::GpuClockOffset { offset_mhz } => offsets.0 = Some(*offset_mhz),
            Setting::MemoryClockOffset { offset_mhz } => offsets.1 = Some(*offset_mhz),
            _ => {}
        }
    }
    offsets
}

/// "GPU offset -150 MHz, memory offset +500 MHz"; `None` when neither is set to other than 0.
pub fn describe_offsets(gpu_mhz: Option<i32>, memory_mhz: Option<i32>) -> Option<String> {
    let parts: Vec<String> = [("GPU", gpu_mhz), ("memory", memory_mhz)]
        .into_iter()
        .filter_map(|(clock, offset)| {
            offset
                .filter(|offset| *offset != 0)
                .map(|offset| format!("{clock} offset {offset:+} MHz"))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn same_uuid(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}
