//! A profile's record of its last check ([`CheckRecord`], its format in
//! `formats::profile`): whether it could mean something, where it counts (only on the card that
//! was checked), and how it reads.

use crate::text::short_uuid;
use gputune_formats::profile::{CheckRecord, Verdict};
use gputune_formats::reports::stability::THOROUGH_CHECK_S;
use gputune_formats::units::duration_s;

/// The longest verdict sentence a profile keeps, in characters.
const RECORD_SUMMARY_MAX_CHARS: usize = 2_000;
/// The longest version, card UUID or card name a profile keeps, in characters.
const RECORD_VERSION_MAX_CHARS: usize = 64;

/// A stability check kept in a profile: whether it is sound, which card it counts on, in words.
pub trait RecordedCheck {
    /// Whether a record read from a file could mean something (finite, bounded, printable).
    fn check(&self) -> Result<(), String>;

    /// [`CheckRecord::describe`] as seen from the card `uuid`: "checked stable for 10 min on
    /// 26 Nov", or, from another card, "… on GPU-5a1e0c2d… (another card: NVIDIA H100), not on
    /// this one".
    fn describe_for(&self, uuid: &str) -> String;

    /// "checked stable for 10 min on 26 Nov", "found UNSTABLE after 3 s on 26 Nov"; a short
    /// check says it was short.
    fn describe(&self) -> String;

    fn verdict_words(&self, short_caveat: bool) -> String;
}

impl RecordedCheck for CheckRecord {
    fn check(&self) -> Result<(), String> {
        if !self.ran_s.is_finite() || self.ran_s < 0.0 {
            return Err(format!(
                "last_check.ran_s = {} is not a duration",
                self.ran_s
            ));
        }
        if self.summary.chars().count() > RECORD_SUMMARY_MAX_CHARS {
            return Err(format!(
                "last_check.summary is longer than {RECORD_SUMMARY_MAX_CHARS} characters"
            ));
        }
        for (field, value) in [
            ("last_check.summary", Some(&self.summary)),
            ("last_check.driver_version", self.driver_version.as_ref()),
            ("last_check.gputune_version", Some(&self.gputune_version)),
            ("last_check.gpu_uuid", self.gpu_uuid.as_ref()),
            ("last_check.gpu_name", self.gpu_name.as_ref()),
        ] {
            let Some(value) = value else { continue };
            if field != "last_check.summary" && value.chars().count() > RECORD_VERSION_MAX_CHARS {
                return Err(format!(
                    "{field} is longer than {RECORD_VERSION_MAX_CHARS} characters"
                ));
            }
            if let Some(character) = crate::text::first_unsafe(value) {
                return Err(crate::text::unsafe_character(field, character));
            }
        }
        Ok(())
    }

    fn describe_for(&self, uuid: &str) -> String {
        if self.counts_on(uuid) {
            return self.describe();
        }
        // Whether it was short matters only on the card it was made on.
        let what = self.verdict_words(false);
        match &self.gpu_uuid {
            Some(checked) => format!(
                "{what}, on {} (another card{}), not on this one",
                short_uuid(checked),
                self.gpu_name
                    .as_ref()
                    .map(|name| format!(": {name}"))
                    .unwrap_or_default()
            ),
            None => format!(
                "{what}, on a card the record does not name (an older gputune wrote it), so it counts as checked on no card"
            ),
        }
    }

    fn describe(&self) -> String {
        self.verdict_words(true)
    }

    fn verdict_words(&self, short_caveat: bool) -> String {
        let day = gputune_formats::units::local_time(self.ended_at_ms, "%-d %b");
        match self.verdict {
            Verdict::Stable if short_caveat && self.ran_s < THOROUGH_CHECK_S => format!(
                "checked stable for only {} on {day}, a short check; a thorough one runs {}",
                duration_s(self.ran_s),
                duration_s(THOROUGH_CHECK_S)
            ),
            Verdict::Stable => format!("checked stable for {} on {day}", duration_s(self.ran_s)),
            Verdict::Unstable => {
                format!("found UNSTABLE after {} on {day}", duration_s(self.ran_s))
            }
            Verdict::Stopped => format!(
                "check stopped after {} on {day} (not a verdict)",
                duration_s(self.ran_s)
            ),
            Verdict::NotRun => format!("never checked (the check on {day} could not run)"),
        }
    }
}
