//! Which profile is each card's default (applied at boot by `profile apply-defaults` and handed
//! to the daemon as its boot default by `profile default`): a profile's own card, or every
//! card of a box profile. The last one made the default wins on the cards it covers, so the
//! store and the daemon's boot defaults agree.

use super::profile_file::write_profile_file;
use super::store::{ProfileStore, StoreError, StoredProfile};
use gputune_formats::profile::Profile;

impl ProfileStore {
    /// Makes this profile the default (applied at boot) of every card it covers: the last one
    /// made the default wins on its cards, as in the daemon's boot defaults. Unmarks every other
    /// profile of those cards, and a box profile's also every other box profile that shares a
    /// card with it. Returns the cards an unmarked box profile leaves that this one does not
    /// cover: their default is now `default_for`'s (their own, or none), to be told to the
    /// daemon.
    pub fn set_default(&self, name: &str) -> Result<Vec<String>, StoreError> {
        let chosen = self.load(name)?;
        let chosen_cards = covered_cards(&chosen.profile);
        let is_box = !chosen.profile.box_cards.is_empty();
        let loses_mark = |profile: &Profile| {
            chosen_cards
                .iter()
                .any(|uuid| profile.is_for(uuid) || (is_box && profile.covers(uuid)))
        };
        let mut released: Vec<String> = Vec::new();
        for stored in self.list().0 {
            let is_chosen = stored.path == chosen.path;
            let marked =
                is_chosen || (stored.profile.default_for_card && !loses_mark(&stored.profile));
            if stored.profile.default_for_card == marked {
                continue;
            }
            if !marked {
                for uuid in covered_cards(&stored.profile) {
                    if !chosen.profile.covers(&uuid) && !released.contains(&uuid) {
                        released.push(uuid);
                    }
                }
            }
            let updated = Profile {
                default_for_card: marked,
                ..stored.profile.clone()
            };
            write_profile_file(&stored.path, &updated)?;
        }
        Ok(released)
    }

    /// The default profile of the card with this UUID, if one is marked (the first by name if a
    /// hand edit marked several): the card's own, else a box profile's that covers it (a
    /// profile saved by a sweep of several cards is every one of its cards' default).
    pub fn default_for(&self, uuid: &str) -> Option<StoredProfile> {
        let (profiles, _) = self.list();
        let defaults = || {
            profiles
                .iter()
                .filter(|stored| stored.profile.default_for_card)
        };
        defaults()
            .find(|stored| stored.profile.is_for(uuid))
            .or_else(|| defaults().find(|stored| stored.profile.covers(uuid)))
            .cloned()
    }
}

/// The cards a profile is for: its own, and its box's.
fn covered_cards(profile: &Profile) -> Vec<String> {
    let mut cards = vec![profile.card.uuid.clone()];
    for card in &profile.box_cards {
        if !profile.is_for(&card.gpu_uuid) {
            cards.push(card.gpu_uuid.clone());
        }
    }
    cards
}
