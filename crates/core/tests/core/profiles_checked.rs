//! A profile's undervolt is checked per card: the one rule of `Profile::for_card` on the
//! simulator's eight RTX 4090s. On the card it was saved from, the profile's own offsets; on a
//! card with its own checked entry, that entry's; on any other card, no offset and a sentence
//! naming the card and the commands that check it. Power limit, locks and fan curve convert as
//! before; entries come and go with verdicts and survive a re-save only while they still hold.

use gputune_core::device::Backend;
use gputune_core::device::sim::{SimBackend, SimOptions, SimScenario};
use gputune_core::profiles::checked::CheckedOffsets;
use gputune_core::profiles::profile::ProfileOnCard;
use gputune_core::profiles::toml_text::{parse_profile, profile_to_toml};
use gputune_core::text::short_uuid;
use gputune_formats::card::{Constraints, GpuIdentity, Setting};
use gputune_formats::profile::{
    CardIdentity, PowerLimit, Profile, ProfileClockLock, SCHEMA_VERSION,
};
use gputune_formats::profile::{CheckRecord, CheckedBy, CheckedCard, Verdict};
use gputune_formats::tuning::{ClockLockInForce, SettingsInForce};

/// The eight cards' identities and constraints.
fn eight_cards() -> Vec<(GpuIdentity, Constraints)> {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        ..SimOptions::default()
    });
    (0..8)
        .map(|index| {
            (
                backend.identity(index).unwrap(),
                backend.constraints(index).unwrap(),
            )
        })
        .collect()
}

/// An undervolt saved from `card`: 70 %, a lock, +150 MHz GPU and -200 MHz memory offsets.
fn undervolt(card: &GpuIdentity) -> Profile {
    Profile {
        schema_version: SCHEMA_VERSION,
        name: "Cool".to_string(),
        notes: String::new(),
        card: CardIdentity {
            uuid: card.uuid.clone(),
            name: card.name.clone(),
            pci_bus_id: card.pci_bus_id.clone(),
        },
        default_for_card: false,
        power_limit: Some(PowerLimit {
            percent_of_default: 70.0,
            watts: 315.0,
        }),
        gpu_clock_lock: Some(ProfileClockLock {
            min_mhz: 210,
            max_mhz: 2520,
        }),
        memory_clock_lock: None,
        gpu_clock_offset_mhz: Some(150),
        memory_clock_offset_mhz: Some(-200),
        fan_curve: None,
        last_check: None,
        checked_cards: Vec::new(),
        box_cards: Vec::new(),
    }
}

fn entry(card: &GpuIdentity, gpu_mhz: i32, verdict: Verdict) -> CheckedCard {
    CheckedCard {
        gpu_uuid: card.uuid.clone(),
        gpu_name: card.name.clone(),
        gpu_clock_offset_mhz: Some(gpu_mhz),
        memory_clock_offset_mhz: None,
        checked_at_ms: 1_795_000_000_000,
        ran_s: 600.0,
        by: CheckedBy::Scan,
        verdict,
    }
}

fn offsets(settings: &[Setting]) -> Vec<Setting> {
    settings
        .iter()
        .filter(|setting| {
            matches!(
                setting,
                Setting::GpuClockOffset { .. } | Setting::MemoryClockOffset { .. }
            )
        })
        .copied()
        .collect()
}

fn notices_text(notices: &[gputune_formats::tuning::Notice]) -> String {
    notices
        .iter()
        .map(|notice| notice.text().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn an_offset_saved_on_one_card_is_not_applied_to_another_never_checked_there() {
    let cards = eight_cards();
    let (gpu0, _) = &cards[0];
    let (gpu3, constraints3) = &cards[3];
    let profile = undervolt(gpu0);
    let application = profile.for_card(gpu3, constraints3);
    assert_eq!(offsets(&application.settings), vec![], "{application:?}");
    // Power limit (as a share of the default) and lock still convert.
    assert!(
        application.settings.contains(&Setting::PowerLimit {
            power_limit_mw: 315_000
        }),
        "{:?}",
        application.settings
    );
    assert!(
        application.settings.contains(&Setting::LockGpuClocks {
            min_mhz: 210,
            max_mhz: 2520
        }),
        "{:?}",
        application.settings
    );
    let notices = notices_text(&application.notices);
    for expected in [
        format!(
            "No clock offset is applied to this {} ({})",
            gpu3.name,
            short_uuid(&gpu3.uuid)
        ),
        "was never checked with this profile's undervolt".to_string(),
        format!("`gputune stability --profile \"Cool\" --gpu {}`", gpu3.uuid),
        format!(
            "`gputune scan --gpu {} --save-profile \"Cool\" --replace`",
            gpu3.uuid
        ),
    ] {
        assert!(notices.contains(&expected), "{expected:?} in {notices}");
    }
    // Index-free: the card is named by model and UUID, never by an index.
    assert!(!notices.contains("GPU 3"), "{notices}");
}

#[test]
fn a_card_with_its_own_entry_gets_its_offsets_and_the_saved_card_the_profiles_own() {
    let cards = eight_cards();
    let (gpu0, constraints0) = &cards[0];
    let (gpu3, constraints3) = &cards[3];
    let (gpu5, constraints5) = &cards[5];
    let mut profile = undervolt(gpu0);
    profile.record_checked_card(entry(gpu3, 90, Verdict::Stable));

    let on_gpu3 = profile.for_card(gpu3, constraints3);
    assert_eq!(
        offsets(&on_gpu3.settings),
        vec![Setting::GpuClockOffset { offset_mhz: 90 }]
    );
    let said = notices_text(&on_gpu3.notices);
    assert!(said.contains("This card's own clock offsets"), "{said}");
    assert!(!said.contains("No clock offset"), "{said}");

    // The card saved from: the user's own values, said never checked.
    let on_gpu0 = profile.for_card(gpu0, constraints0);
    assert_eq!(
        offsets(&on_gpu0.settings),
        vec![
            Setting::GpuClockOffset { offset_mhz: 150 },
            Setting::MemoryClockOffset { offset_mhz: -200 }
        ]
    );
    assert!(
        notices_text(&on_gpu0.notices).contains("never checked for stability"),
        "{:?}",
        on_gpu0.notices
    );

    // GPU 3's entry says nothing about GPU 5.
    assert_eq!(
        offsets(&profile.for_card(gpu5, constraints5).settings),
        vec![]
    );
}

#[test]
fn a_stable_last_check_naming_a_card_counts_as_that_cards_check() {
    let cards = eight_cards();
    let (gpu0, _) = &cards[0];
    let (gpu2, constraints2) = &cards[2];
    let (gpu4, constraints4) = &cards[4];
    let mut profile = undervolt(gpu0);
    profile.last_check = Some(CheckRecord {
        ended_at_ms: 1_795_000_000_000,
        ran_s: 600.0,
        verdict: Verdict::Stable,
        summary: "Stable.".to_string(),
        driver_version: None,
        gputune_version: "0.1.0".to_string(),
        gpu_uuid: Some(gpu2.uuid.clone()),
        gpu_name: Some(gpu2.name.clone()),
    });
    assert_eq!(
        offsets(&profile.for_card(gpu2, constraints2).settings),
        vec![
            Setting::GpuClockOffset { offset_mhz: 150 },
            Setting::MemoryClockOffset { offset_mhz: -200 }
        ]
    );
    assert_eq!(
        offsets(&profile.for_card(gpu4, constraints4).settings),
        vec![]
    );
    // Found unstable there instead: no offset, and the sentence says so.
    if let Some(record) = profile.last_check.as_mut() {
        record.verdict = Verdict::Unstable;
    }
    let application = profile.for_card(gpu2, constraints2);
    assert_eq!(offsets(&application.settings), vec![]);
    assert!(
        notices_text(&application.notices).contains("was found UNSTABLE"),
        "{:?}",
        application.notices
    );
}

#[test]
fn a_check_of_an_unchecked_card_holds_the_profiles_offsets_and_stock_still_applies() {
    let cards = eight_cards();
    let (gpu0, _) = &cards[0];
    let (gpu6, constraints6) = &cards[6];
    let mut profile = undervolt(gpu0);
    let checked = profile.to_check_on(gpu6, constraints6);
    assert_eq!(
        offsets(&checked.settings),
        vec![
            Setting::GpuClockOffset { offset_mhz: 150 },
            Setting::MemoryClockOffset { offset_mhz: -200 }
        ]
    );
    assert!(
        notices_text(&checked.notices).contains("a stable verdict makes them this card's"),
        "{:?}",
        checked.notices
    );
    // Stock offsets (0 MHz) are safe on any card and still written.
    profile.gpu_clock_offset_mhz = Some(0);
    profile.memory_clock_offset_mhz = Some(0);
    assert_eq!(
        offsets(&profile.for_card(gpu6, constraints6).settings),
        vec![
            Setting::GpuClockOffset { offset_mhz: 0 },
            Setting::MemoryClockOffset { offset_mhz: 0 }
        ]
    );
}

#[test]
fn verdicts_add_replace_and_remove_one_cards_entry_and_keep_the_others() {
    let cards = eight_cards();
    let (gpu0, _) = &cards[0];
    let (gpu1, _) = &cards[1];
    let (gpu3, _) = &cards[3];
    let mut profile = undervolt(gpu0);
    profile.record_checked_card(entry(gpu1, 60, Verdict::Stable));
    profile.record_checked_card(entry(gpu3, 90, Verdict::Stable));
    profile.record_checked_card(entry(gpu3, 75, Verdict::Stable));
    assert_eq!(profile.checked_cards.len(), 2);
    assert_eq!(
        profile
            .checked_entry_for(&gpu3.uuid)
            .and_then(|entry| entry.gpu_clock_offset_mhz),
        Some(75)
    );
    // No verdict changes nothing; an unstable one removes that card's entry only.
    profile.record_checked_card(entry(gpu3, 30, Verdict::Stopped));
    assert_eq!(
        profile
            .checked_entry_for(&gpu3.uuid)
            .and_then(|entry| entry.gpu_clock_offset_mhz),
        Some(75)
    );
    profile.record_checked_card(entry(gpu3, 75, Verdict::Unstable));
    assert_eq!(profile.checked_entry_for(&gpu3.uuid), None);
    assert!(profile.checked_entry_for(&gpu1.uuid).is_some());

    // A line per card for `profile show` and the Profiles tab.
    let lines = profile.checked_card_lines();
    assert!(lines[0].contains(&short_uuid(&gpu1.uuid)), "{lines:?}");
    assert!(lines[0].contains("GPU offset +60 MHz"), "{lines:?}");
    assert!(lines[0].contains("a scan found it stable"), "{lines:?}");
    assert!(lines.iter().any(|line| line.starts_with("any other card")));
}

#[test]
fn a_resave_keeps_the_entries_only_while_their_conditions_hold() {
    let cards = eight_cards();
    let (gpu0, constraints0) = &cards[0];
    let (gpu1, _) = &cards[1];
    let mut previous = undervolt(gpu0);
    previous.record_checked_card(entry(gpu1, 60, Verdict::Stable));
    previous.record_checked_card(entry(gpu0, 150, Verdict::Stable));
    let in_force = SettingsInForce {
        power_limit_mw: Some(315_000),
        gpu_clock_lock: ClockLockInForce::Locked {
            min_mhz: 210,
            max_mhz: 2520,
        },
        memory_clock_lock: ClockLockInForce::Unlocked,
        gpu_clock_offset_mhz: Some(120),
        memory_clock_offset_mhz: Some(-200),
        ..SettingsInForce::default()
    };
    // Same power limit and lock: GPU 1's entry stays; GPU 0's own offsets changed, so its
    // old entry (at +150 MHz) goes.
    let resaved =
        Profile::from_in_force("Cool", gpu0, constraints0, &in_force, None, Some(&previous));
    assert_eq!(
        resaved
            .checked_cards
            .iter()
            .map(|entry| entry.gpu_uuid.clone())
            .collect::<Vec<_>>(),
        vec![gpu1.uuid.clone()]
    );
    // Another power limit: what was checked under the old one no longer holds.
    let hotter = SettingsInForce {
        power_limit_mw: Some(400_000),
        ..in_force
    };
    let resaved =
        Profile::from_in_force("Cool", gpu0, constraints0, &hotter, None, Some(&previous));
    assert_eq!(resaved.checked_cards, vec![]);
}

#[test]
fn entries_round_trip_through_the_file_and_bad_ones_are_refused_by_name() {
    let cards = eight_cards();
    let (gpu0, _) = &cards[0];
    let (gpu3, _) = &cards[3];
    let mut profile = undervolt(gpu0);
    profile.record_checked_card(entry(gpu3, 90, Verdict::Stable));
    let text = profile_to_toml(&profile).unwrap();
    assert!(text.contains("[[checked_cards]]"), "{text}");
    assert!(text.contains("by = \"scan\""), "{text}");
    assert_eq!(parse_profile(text.as_bytes()), Ok(profile.clone()));

    let twice = format!(
        "{text}\n[[checked_cards]]\ngpu_uuid = \"{}\"\ngpu_name = \"x\"\nchecked_at_ms = 1\nran_s = 1.0\nby = \"check\"\nverdict = \"stable\"\n",
        gpu3.uuid.to_uppercase()
    );
    let refused = format!("{:?}", parse_profile(twice.as_bytes()));
    assert!(refused.contains("two entries for the card"), "{refused}");
    let wild = text.replace("gpu_clock_offset_mhz = 90", "gpu_clock_offset_mhz = 90000");
    let refused = format!("{:?}", parse_profile(wild.as_bytes()));
    assert!(
        refused.contains("checked_cards[0].gpu_clock_offset_mhz"),
        "{refused}"
    );
}
