//! A tuning profile: what a card was set to, saved under a name, and how it turns into settings
//! for a card — the one it was saved from, or another one (by percentage of that card's default
//! power limit, clamped to what it accepts, with a notice for every change).

use crate::profiles::checked::CheckedOffsets;
use crate::stability::record::RecordedCheck;
use crate::text;
use gputune_formats::card::{Constraints, GpuIdentity, Setting};
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::profile::{
    CardIdentity, PowerLimit, Profile, ProfileClockLock, SCHEMA_VERSION,
};
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};

/// The longest profile name, in characters.
pub const NAME_MAX_CHARS: usize = 100;
/// The longest notes, in characters.
pub const NOTES_MAX_CHARS: usize = 10_000;
/// The longest UUID, model name or PCI bus id, in characters.
const IDENTITY_MAX_CHARS: usize = 256;
/// The most points a fan curve may have.
pub const FAN_CURVE_MAX_POINTS: usize = 32;
/// Bounds that no real card comes near: beyond them a value is a typo or a hostile file.
const POWER_PERCENT_RANGE: std::ops::RangeInclusive<f64> = 1.0..=1000.0;
const POWER_WATTS_RANGE: std::ops::RangeInclusive<f64> = 1.0..=100_000.0;
const CLOCK_MAX_MHZ: u32 = 100_000;
pub(super) const OFFSET_MAX_MHZ: i32 = 10_000;

/// What applying a profile to one card means.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileApplication {
    /// The settings to write, in order; every one passes `device::gate::validate` for the
    /// card it was made for.
    pub settings: Vec<Setting>,
    /// The fan curve to follow, when the profile has one and the card has fans.
    pub fan_curve: Option<FanCurve>,
    /// What was changed or left out, one sentence each: clamped values, another model, a
    /// control the card does not have.
    pub notices: Vec<Notice>,
}

/// Why a profile's contents cannot be used. Names the field and the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    #[error("{0}")]
    Invalid(String),
}

/// A profile for a card: its summary, its checks, and the settings it makes on a card.
pub trait ProfileOnCard {
    /// A profile of what a card runs now, as the engine knows it: the power limit (as watts
    /// and as a share of the default), the clock locks gputune set, the clock offsets, and the
    /// fan curve gputune follows. What neither the card nor gputune can tell (a clock lock set
    /// by another tool, a curve not followed now) is kept from `previous`, the profile of the
    /// same card being replaced, with its notes and default flag. The window and
    /// `gputune profile save` both save through here, so they write the same file.
    fn from_in_force(
        name: &str,
        identity: &GpuIdentity,
        constraints: &Constraints,
        in_force: &SettingsInForce,
        fan_curve: Option<&FanCurve>,
        previous: Option<&Profile>,
    ) -> Profile;

    /// This profile with `previous`'s stability check, when it sets the same clocks and
    /// limits (a check of other settings says nothing about these), and the cards' own checked
    /// offsets that still hold (see `Profile::checked_cards_kept_from`).
    fn keeping_check_of(self, previous: Option<&Profile>) -> Profile;

    /// "checked stable for 10 min on 26 Nov", "never checked", as seen from the profile's
    /// own card (a check of another card is named as such: it does not count here).
    fn check_text(&self) -> String;

    /// [`Profile::check_text`] as seen from the card `uuid` (the window's selected card).
    fn check_text_for(&self, uuid: &str) -> String;

    /// Checks that every value could mean something: a usable name, finite numbers in sane
    /// bounds, locks with min ≤ max, a fan curve `FanCurve` accepts. Files that fail are
    /// refused when loaded and never written.
    fn check(&self) -> Result<(), ProfileError>;

    /// The settings that apply this profile to a card. On the card it was saved from, the
    /// power limit is its watts; on another card, the same share of that card's default limit.
    /// Clock offsets follow the one rule of `Profile::offsets_for`: the profile's own on its
    /// card, a card's own checked entry on another, else none (a notice names the card and
    /// the command that checks it). Every value is clamped to what the card accepts (a notice
    /// says so), so every setting passes `device::gate`; what the card cannot do is left out
    /// with a notice.
    fn for_card(&self, identity: &GpuIdentity, constraints: &Constraints) -> ProfileApplication;

    /// What `gputune stability --profile` holds on a card: [`Profile::for_card`], except that
    /// a card with no offsets of its own is checked at the profile's (a stable verdict makes
    /// them its own).
    fn to_check_on(&self, identity: &GpuIdentity, constraints: &Constraints) -> ProfileApplication;
}

impl ProfileOnCard for Profile {
    fn from_in_force(
        name: &str,
        identity: &GpuIdentity,
        constraints: &Constraints,
        in_force: &SettingsInForce,
        fan_curve: Option<&FanCurve>,
        previous: Option<&Profile>,
    ) -> Profile {
        let previous = previous.filter(|previous| previous.is_for(&identity.uuid));
        let power_limit = in_force.power_limit_mw.and_then(|power_limit_mw| {
            let default_mw = constraints
                .power_limit_default_mw
                .filter(|default_mw| *default_mw > 0)?;
            let percent = f64::from(power_limit_mw) / f64::from(default_mw) * 100.0;
            Some(PowerLimit {
                // Two decimals read well in the file and are exact enough for any card.
                percent_of_default: (percent * 100.0).round() / 100.0,
                watts: f64::from(power_limit_mw) / 1000.0,
            })
        });
        let lock = |lock: ClockLockInForce, kept: Option<ProfileClockLock>| match lock {
            ClockLockInForce::Locked { min_mhz, max_mhz } => {
                Some(ProfileClockLock { min_mhz, max_mhz })
            }
            ClockLockInForce::Unlocked => None,
            ClockLockInForce::Unknown => kept,
        };
        Profile {
            schema_version: SCHEMA_VERSION,
            name: name.trim().to_string(),
            notes: previous
                .map(|previous| previous.notes.clone())
                .unwrap_or_default(),
            card: CardIdentity {
                uuid: identity.uuid.clone(),
                name: identity.name.clone(),
                pci_bus_id: identity.pci_bus_id.clone(),
            },
            default_for_card: previous.is_some_and(|previous| previous.default_for_card),
            power_limit,
            gpu_clock_lock: lock(
                in_force.gpu_clock_lock,
                previous.and_then(|previous| previous.gpu_clock_lock),
            ),
            memory_clock_lock: lock(
                in_force.memory_clock_lock,
                previous.and_then(|previous| previous.memory_clock_lock),
            ),
            gpu_clock_offset_mhz: in_force.gpu_clock_offset_mhz,
            memory_clock_offset_mhz: in_force.memory_clock_offset_mhz,
            fan_curve: match fan_curve {
                Some(curve) => Some(curve.points().to_vec()),
                None => previous.and_then(|previous| previous.fan_curve.clone()),
            },
            last_check: None,
            checked_cards: Vec::new(),
            box_cards: Vec::new(),
        }
        .keeping_check_of(previous)
    }

    fn keeping_check_of(mut self, previous: Option<&Profile>) -> Profile {
        self.last_check = previous
            .filter(|previous| checked_settings(previous) == checked_settings(&self))
            .and_then(|previous| previous.last_check.clone());
        self.checked_cards = previous
            .map(|previous| self.checked_cards_kept_from(previous))
            .unwrap_or_default();
        self
    }

    fn check_text(&self) -> String {
        self.check_text_for(&self.card.uuid)
    }

    fn check_text_for(&self, uuid: &str) -> String {
        self.last_check.as_ref().map_or_else(
            || "never checked".to_string(),
            |record| record.describe_for(uuid),
        )
    }

    fn check(&self) -> Result<(), ProfileError> {
        let invalid = |message: String| Err(ProfileError::Invalid(message));
        if self.schema_version != SCHEMA_VERSION {
            return invalid(format!(
                "schema_version is {}, but this gputune reads version {SCHEMA_VERSION}",
                self.schema_version
            ));
        }
        check_name(&self.name).map_err(ProfileError::Invalid)?;
        if self.notes.chars().count() > NOTES_MAX_CHARS {
            return invalid(format!(
                "notes are longer than {NOTES_MAX_CHARS} characters"
            ));
        }
        // Notes may have several lines (and tabs); no other control or bidi character.
        if let Some(character) = self
            .notes
            .chars()
            .find(|&character| !matches!(character, '\n' | '\t') && text::is_unsafe(character))
        {
            return invalid(text::unsafe_character("notes", character));
        }
        for (field, value) in [
            ("card.uuid", &self.card.uuid),
            ("card.name", &self.card.name),
            ("card.pci_bus_id", &self.card.pci_bus_id),
        ] {
            if value.chars().count() > IDENTITY_MAX_CHARS {
                return invalid(format!(
                    "{field} is longer than {IDENTITY_MAX_CHARS} characters"
                ));
            }
            if let Some(character) = text::first_unsafe(value) {
                return invalid(text::unsafe_character(field, character));
            }
        }
        if self.card.uuid.trim().is_empty() {
            return invalid("card.uuid is empty".to_string());
        }
        if let Some(power) = self.power_limit {
            if !POWER_PERCENT_RANGE.contains(&power.percent_of_default) {
                return invalid(format!(
                    "power_limit.percent_of_default = {} is not a share of a default limit (1 to 1000 %)",
                    power.percent_of_default
                ));
            }
            if !POWER_WATTS_RANGE.contains(&power.watts) {
                return invalid(format!(
                    "power_limit.watts = {} is not a GPU power limit (1 to 100000 W)",
                    power.watts
                ));
            }
        }
        for (field, lock) in [
            ("gpu_clock_lock", self.gpu_clock_lock),
            ("memory_clock_lock", self.memory_clock_lock),
        ] {
            if let Some(lock) = lock {
                if lock.min_mhz > lock.max_mhz {
                    return invalid(format!(
                        "{field} has min_mhz {} above max_mhz {}",
                        lock.min_mhz, lock.max_mhz
                    ));
                }
                if lock.max_mhz > CLOCK_MAX_MHZ {
                    return invalid(format!(
                        "{field}.max_mhz = {} is not a GPU clock (at most {CLOCK_MAX_MHZ} MHz)",
                        lock.max_mhz
                    ));
                }
            }
        }
        for (field, offset) in [
            ("gpu_clock_offset_mhz", self.gpu_clock_offset_mhz),
            ("memory_clock_offset_mhz", self.memory_clock_offset_mhz),
        ] {
            if let Some(offset) = offset
                && !(-OFFSET_MAX_MHZ..=OFFSET_MAX_MHZ).contains(&offset)
            {
                return invalid(format!(
                    "{field} = {offset} is not a clock offset (-{OFFSET_MAX_MHZ} to {OFFSET_MAX_MHZ} MHz)"
                ));
            }
        }
        if let Some(record) = &self.last_check {
            record.check().map_err(ProfileError::Invalid)?;
        }
        self.check_checked_cards().map_err(ProfileError::Invalid)?;
        check_box_cards(self).map_err(ProfileError::Invalid)?;
        if let Some(points) = &self.fan_curve {
            if points.len() > FAN_CURVE_MAX_POINTS {
                return invalid(format!(
                    "fan_curve has {} points; at most {FAN_CURVE_MAX_POINTS} are allowed",
                    points.len()
                ));
            }
            if let Err(error) = FanCurve::new(points.clone(), FanCurve::default().hysteresis_c) {
                return invalid(format!("fan_curve: {error}"));
            }
        }
        Ok(())
    }

    fn for_card(&self, identity: &GpuIdentity, constraints: &Constraints) -> ProfileApplication {
        super::on_card::application(
            self,
            identity,
            constraints,
            self.offsets_for(&identity.uuid),
        )
    }

    fn to_check_on(&self, identity: &GpuIdentity, constraints: &Constraints) -> ProfileApplication {
        super::on_card::application(
            self,
            identity,
            constraints,
            self.offsets_to_check_on(&identity.uuid),
        )
    }
}

/// The most cards a box profile may cover.
const BOX_CARDS_MAX: usize = 64;

/// A box's cards: each named once by a usable UUID, with a sane power limit of its own if any.
fn check_box_cards(profile: &Profile) -> Result<(), String> {
    if profile.box_cards.len() > BOX_CARDS_MAX {
        return Err(format!(
            "box_cards names {} cards; at most {BOX_CARDS_MAX} are allowed",
            profile.box_cards.len()
        ));
    }
    for (position, card) in profile.box_cards.iter().enumerate() {
        for (field, value) in [("gpu_uuid", &card.gpu_uuid), ("gpu_name", &card.gpu_name)] {
            if value.chars().count() > IDENTITY_MAX_CHARS {
                return Err(format!(
                    "box_cards[{position}].{field} is longer than {IDENTITY_MAX_CHARS} characters"
                ));
            }
            if let Some(character) = text::first_unsafe(value) {
                return Err(text::unsafe_character(
                    &format!("box_cards[{position}].{field}"),
                    character,
                ));
            }
        }
        if card.gpu_uuid.trim().is_empty() {
            return Err(format!("box_cards[{position}].gpu_uuid is empty"));
        }
        if profile.box_cards[..position].iter().any(|earlier| {
            earlier
                .gpu_uuid
                .trim()
                .eq_ignore_ascii_case(card.gpu_uuid.trim())
        }) {
            return Err(format!(
                "box_cards names the card {} twice",
                text::printable(&card.gpu_uuid)
            ));
        }
        if let Some(power) = card.power_limit
            && (!POWER_PERCENT_RANGE.contains(&power.percent_of_default)
                || !POWER_WATTS_RANGE.contains(&power.watts))
        {
            return Err(format!(
                "box_cards[{position}].power_limit ({} %, {} W) is not a GPU power limit",
                power.percent_of_default, power.watts
            ));
        }
    }
    Ok(())
}

/// What a stability check depends on: the power limit, locks and offsets.
fn checked_settings(profile: &Profile) -> impl PartialEq + use<> {
    (
        profile.power_limit.map(|power| power.watts.to_bits()),
        profile.gpu_clock_lock,
        profile.memory_clock_lock,
        profile.gpu_clock_offset_mhz,
        profile.memory_clock_offset_mhz,
    )
}

/// Checks a profile name: what people see and what the file name is made from.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("the profile name is empty".to_string());
    }
    if name.trim() != name {
        return Err(format!(
            "the profile name \"{}\" starts or ends with spaces",
            text::printable(name)
        ));
    }
    if name.chars().count() > NAME_MAX_CHARS {
        return Err(format!(
            "the profile name is longer than {NAME_MAX_CHARS} characters"
        ));
    }
    if let Some(character) = text::first_unsafe(name) {
        return Err(format!(
            "{} (in \"{}\")",
            text::unsafe_character("the profile name", character),
            text::printable(name)
        ));
    }
    Ok(())
}
