//! Profiles as a library: every field survives a save and a load, a profile from one card is
//! converted for another (an RTX 4090's applied to the fanless H100: power by percentage of
//! 700 W, clamped, notices for fans and offsets), and files that are not profiles — corrupt,
//! truncated, from a newer gputune, hostile — are named, left untouched, and do not stop the
//! others from loading. A property test feeds the loader random and mutated files.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use gputune_core::device::Backend;
use gputune_core::device::gate::validate;
use gputune_core::device::sim::{SimBackend, SimOptions, SimScenario};
use gputune_core::folders::{CONFIG_DIR_ENV, Folders};
use gputune_core::profiles::profile::ProfileOnCard;
use gputune_core::profiles::store::slug;
use gputune_core::profiles::toml_text::{parse_profile, profile_to_toml};
use gputune_core::profiles::{ProfileStore, StoreError};
use gputune_core::tuning::in_force::ControlsInForce;
use gputune_formats::card::{Constraints, GpuIdentity, Setting};
use gputune_formats::fan_curve::{CurvePoint, FanCurve};
use gputune_formats::profile::{
    CardIdentity, PowerLimit, Profile, ProfileClockLock, SCHEMA_VERSION,
};
use gputune_formats::tuning::{ClockLockInForce, LockRecord, SettingsInForce};

fn card(scenario: SimScenario) -> (SimBackend, GpuIdentity, Constraints) {
    let mut backend = SimBackend::new(&SimOptions {
        scenario,
        ..SimOptions::default()
    });
    let identity = backend.identity(0).unwrap();
    let constraints = backend.constraints(0).unwrap();
    (backend, identity, constraints)
}

fn point(temperature_c: f64, speed_pct: f64) -> CurvePoint {
    CurvePoint {
        temperature_c,
        speed_pct,
    }
}

/// A profile with every field set, for the RTX 4090 of the simulator.
fn full_profile(name: &str, identity: &GpuIdentity) -> Profile {
    Profile {
        schema_version: SCHEMA_VERSION,
        name: name.to_string(),
        notes: "Quiet nights.\nSecond line, with \"quotes\" and 'apostrophes' and ünïcode."
            .to_string(),
        card: CardIdentity {
            uuid: identity.uuid.clone(),
            name: identity.name.clone(),
            pci_bus_id: identity.pci_bus_id.clone(),
        },
        default_for_card: true,
        power_limit: Some(PowerLimit {
            percent_of_default: 70.0,
            watts: 315.0,
        }),
        gpu_clock_lock: Some(ProfileClockLock {
            min_mhz: 210,
            max_mhz: 2520,
        }),
        memory_clock_lock: Some(ProfileClockLock {
            min_mhz: 405,
            max_mhz: 10_501,
        }),
        gpu_clock_offset_mhz: Some(150),
        memory_clock_offset_mhz: Some(-200),
        fan_curve: Some(vec![
            point(40.0, 30.0),
            point(65.5, 55.0),
            point(85.0, 100.0),
        ]),
        last_check: Some(gputune_formats::profile::CheckRecord {
            ended_at_ms: 1_795_000_000_000,
            ran_s: 600.0,
            verdict: gputune_formats::profile::Verdict::Stable,
            summary: "Stable for 10 min at +150 MHz offset: 0 wrong of 3.1 × 10¹² checked results."
                .to_string(),
            driver_version: Some("580.82.07".to_string()),
            gputune_version: "0.1.0".to_string(),
            gpu_uuid: Some(identity.uuid.clone()),
            gpu_name: Some(identity.name.clone()),
        }),
        checked_cards: Vec::new(),
        box_cards: Vec::new(),
    }
}

fn store() -> (tempfile::TempDir, ProfileStore) {
    let directory = tempfile::tempdir().unwrap();
    let store = ProfileStore::at(directory.path().join("profiles"));
    (directory, store)
}

fn settings_valid_for(settings: &[Setting], constraints: &Constraints) {
    for setting in settings {
        assert!(
            validate(constraints, *setting).is_ok(),
            "{setting:?} does not pass the gate"
        );
    }
}

#[test]
fn every_field_survives_a_save_and_a_load() {
    let (_backend, identity, _) = card(SimScenario::Rtx4090);
    let (_directory, store) = store();
    let profile = full_profile("Night: quiet / 70 %", &identity);
    let path = store.save(&profile).unwrap();
    assert_eq!(
        path.file_name().and_then(|name| name.to_str()),
        Some("night-quiet-70.toml")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("schema_version = 1"), "{text}");
    assert!(text.contains("[power_limit]"), "{text}");
    assert!(text.contains("[[fan_curve]]"), "{text}");
    let loaded = store.load("Night: quiet / 70 %").unwrap();
    assert_eq!(loaded.profile, profile);
    assert_eq!(loaded.path, path);
    // Saving again under the same name replaces the same file.
    let mut changed = profile.clone();
    changed.notes = "changed".to_string();
    assert_eq!(store.save(&changed).unwrap(), path);
    assert_eq!(store.load("Night: quiet / 70 %").unwrap().profile, changed);
    let (listed, problems) = store.list();
    assert_eq!(listed.len(), 1);
    assert!(problems.is_empty());
    // Options left out of a hand-written file are None; notes and the default flag default.
    let minimal = format!(
        "schema_version = 1\nname = \"min\"\n[card]\nuuid = \"{}\"\nname = \"x\"\npci_bus_id = \"\"\n",
        identity.uuid
    );
    let parsed = parse_profile(minimal.as_bytes()).unwrap();
    assert_eq!(parsed.notes, "");
    assert!(!parsed.default_for_card);
    assert_eq!(parsed.power_limit, None);
    assert_eq!(parsed.fan_curve, None);
}

#[test]
fn a_profile_from_current_settings_holds_what_can_be_read_back() {
    let (mut backend, identity, constraints) = card(SimScenario::Rtx4090);
    for setting in [
        Setting::PowerLimit {
            power_limit_mw: 300_000,
        },
        Setting::GpuClockOffset { offset_mhz: 120 },
    ] {
        backend
            .apply(0, &validate(&constraints, setting).unwrap())
            .unwrap();
    }
    let current = backend.current_settings(0).unwrap();
    let in_force = SettingsInForce::from_card(&current, LockRecord::default());
    let profile = Profile::from_in_force("Saved", &identity, &constraints, &in_force, None, None);
    assert_eq!(profile.schema_version, SCHEMA_VERSION);
    assert_eq!(profile.card.uuid, identity.uuid);
    assert_eq!(
        profile.power_limit,
        Some(PowerLimit {
            percent_of_default: 66.67,
            watts: 300.0
        })
    );
    assert_eq!(profile.gpu_clock_offset_mhz, Some(120));
    assert_eq!(profile.memory_clock_offset_mhz, Some(0));
    assert_eq!(
        profile.gpu_clock_lock, None,
        "an unknown lock (NVML cannot read it) is not saved"
    );
    assert_eq!(profile.fan_curve, None);
    assert!(profile.check().is_ok());

    // What gputune itself set is known: the lock and the curve it follows are saved, and what
    // it cannot know is kept from the profile being replaced, with its notes.
    let mut known = in_force.clone();
    known.gpu_clock_lock = ClockLockInForce::Locked {
        min_mhz: 210,
        max_mhz: 2520,
    };
    known.memory_clock_lock = ClockLockInForce::Unknown;
    let mut previous = profile.clone();
    previous.memory_clock_lock = Some(ProfileClockLock {
        min_mhz: 405,
        max_mhz: 10_501,
    });
    previous.notes = "nights".to_string();
    let curve = FanCurve::default();
    let saved = Profile::from_in_force(
        "Saved",
        &identity,
        &constraints,
        &known,
        Some(&curve),
        Some(&previous),
    );
    assert_eq!(
        saved.gpu_clock_lock,
        Some(ProfileClockLock {
            min_mhz: 210,
            max_mhz: 2520
        })
    );
    assert_eq!(saved.memory_clock_lock, previous.memory_clock_lock);
    assert_eq!(saved.fan_curve, Some(curve.points().to_vec()));
    assert_eq!(saved.notes, "nights");

    // On its own card, the profile writes back exactly what was read; its clock offset was
    // never checked for stability, and that is the one thing said.
    let application = profile.for_card(&identity, &constraints);
    assert_eq!(application.notices.len(), 1, "{:?}", application.notices);
    assert!(
        application.notices[0]
            .to_string()
            .contains("changes clocks and was never checked for stability"),
        "{:?}",
        application.notices
    );
    assert_eq!(
        application.settings,
        vec![
            Setting::PowerLimit {
                power_limit_mw: 300_000
            },
            Setting::GpuClockOffset { offset_mhz: 120 },
            Setting::MemoryClockOffset { offset_mhz: 0 },
        ]
    );
}

#[test]
fn an_rtx4090_profile_applies_to_the_h100_by_percentage_clamped_with_notices() {
    let (_, rtx, _) = card(SimScenario::Rtx4090);
    let (_, h100, h100_constraints) = card(SimScenario::DatacenterFanless);
    let mut profile = full_profile("4090 quiet", &rtx);
    let application = profile.for_card(&h100, &h100_constraints);
    settings_valid_for(&application.settings, &h100_constraints);
    // 70 % of the H100's 700 W default, not the 4090's 315 W.
    assert_eq!(
        application.settings[0],
        Setting::PowerLimit {
            power_limit_mw: 490_000
        }
    );
    assert!(
        !application.settings.iter().any(|setting| matches!(
            setting,
            Setting::GpuClockOffset { .. }
                | Setting::MemoryClockOffset { .. }
                | Setting::FanSpeed { .. }
        )),
        "{:?}",
        application.settings
    );
    assert_eq!(application.fan_curve, None);
    let notices = application
        .notices
        .iter()
        .map(|notice| notice.text().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(notices.contains("different model"), "{notices}");
    assert!(notices.contains("NVIDIA GeForce RTX 4090"), "{notices}");
    assert!(notices.contains("no controllable fans"), "{notices}");
    // The 4090's offsets are its own: never checked on the H100, they are not applied.
    assert!(notices.contains("No clock offset is applied"), "{notices}");
    assert!(
        notices.contains("GPU offset +150 MHz, memory offset -200 MHz"),
        "{notices}"
    );
    // The locks are clamped into the H100's ranges, each with a notice.
    assert!(notices.contains("GPU clock lock 210-2520 MHz"), "{notices}");
    assert!(
        notices.contains("memory clock lock 405-10501 MHz"),
        "{notices}"
    );

    // 150 % of 700 W is beyond the H100's maximum: clamped to 700 W, with a notice.
    profile.power_limit = Some(PowerLimit {
        percent_of_default: 150.0,
        watts: 675.0,
    });
    let application = profile.for_card(&h100, &h100_constraints);
    assert_eq!(
        application.settings[0],
        Setting::PowerLimit {
            power_limit_mw: 700_000
        }
    );
    assert!(
        application.notices.iter().any(
            |notice| notice.text().contains("150 %") && notice.text().contains("700 W is used")
        ),
        "{:?}",
        application.notices
    );

    // And the other way: an H100 profile at 30 % on a 4090 (135 W) is raised to its 150 W
    // minimum.
    let mut h100_profile = Profile::from_in_force(
        "h100 low",
        &h100,
        &h100_constraints,
        &SettingsInForce {
            power_limit_mw: Some(210_000),
            ..Default::default()
        },
        None,
        None,
    );
    assert_eq!(
        h100_profile.power_limit.map(|p| p.percent_of_default),
        Some(30.0)
    );
    h100_profile.fan_curve = Some(vec![point(30.0, 0.0), point(80.0, 100.0)]);
    let (_, _, rtx_constraints) = card(SimScenario::Rtx4090);
    let application = h100_profile.for_card(&rtx, &rtx_constraints);
    settings_valid_for(&application.settings, &rtx_constraints);
    assert_eq!(
        application.settings,
        vec![Setting::PowerLimit {
            power_limit_mw: 150_000
        }]
    );
    assert!(application.fan_curve.is_some(), "the 4090 has fans");
}

#[test]
fn another_card_of_the_same_model_gets_a_share_of_its_default() {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        ..SimOptions::default()
    });
    let first = backend.identity(0).unwrap();
    let second = backend.identity(1).unwrap();
    let constraints = backend.constraints(1).unwrap();
    let profile = full_profile("p", &first);
    let application = profile.for_card(&second, &constraints);
    settings_valid_for(&application.settings, &constraints);
    assert_eq!(
        application.settings[0],
        Setting::PowerLimit {
            power_limit_mw: 315_000
        }
    );
    assert!(
        application
            .notices
            .iter()
            .any(|n| n.text().contains("another")),
        "{:?}",
        application.notices
    );
    assert!(
        !application
            .notices
            .iter()
            .any(|n| n.text().contains("different model")),
        "{:?}",
        application.notices
    );
}

/// Writes `content` as `<name>.toml` in the store's folder.
fn plant(store: &ProfileStore, name: &str, content: &[u8]) -> PathBuf {
    std::fs::create_dir_all(store.folder()).unwrap();
    let path = store.folder().join(format!("{name}.toml"));
    std::fs::write(&path, content).unwrap();
    path
}

#[test]
fn bad_files_are_named_untouched_and_the_others_still_load() {
    let (_, identity, _) = card(SimScenario::Rtx4090);
    let (_directory, store) = store();
    let good = full_profile("Good", &identity);
    store.save(&good).unwrap();
    let valid = profile_to_toml(&full_profile("Template", &identity)).unwrap();
    let half = &valid.as_bytes()[..valid.len() / 2];
    let huge_name = format!("schema_version = 1\nname = \"{}\"\n", "x".repeat(200_000));
    let long_notes = valid.replace(
        "notes = \"\"\"",
        &format!("notes = \"\"\"{}", "n".repeat(20_000)),
    );
    let deep = format!(
        "schema_version = 1\nname = \"deep\"\nx = {}{}\n",
        "[".repeat(5_000),
        "]".repeat(5_000)
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "corrupt",
            b"schema_version = 1\nname = \"x\n[card".to_vec(),
            "damaged",
        ),
        ("truncated", half.to_vec(), "damaged"),
        (
            "future",
            valid
                .replace("schema_version = 1", "schema_version = 7")
                .into_bytes(),
            "schema version 7",
        ),
        ("binary", vec![0xff, 0xfe, 0x00, 0x9c, 0x01], "not UTF-8"),
        ("empty", Vec::new(), "no schema_version"),
        ("huge-name", huge_name.into_bytes(), "too large"),
        ("long-notes", long_notes.into_bytes(), "notes are longer"),
        ("deep", deep.into_bytes(), "nested deeper"),
        (
            "nan",
            valid
                .replace("percent_of_default = 70.0", "percent_of_default = nan")
                .into_bytes(),
            "percent_of_default",
        ),
        (
            "inf",
            valid.replace("watts = 315.0", "watts = inf").into_bytes(),
            "power_limit.watts",
        ),
        (
            "absurd-watts",
            valid.replace("watts = 315.0", "watts = 1e300").into_bytes(),
            "power_limit.watts",
        ),
        (
            "absurd-offset",
            valid
                .replace(
                    "gpu_clock_offset_mhz = 150",
                    "gpu_clock_offset_mhz = 99999999999",
                )
                .into_bytes(),
            "damaged",
        ),
        (
            "huge-version",
            valid
                .replace(
                    "schema_version = 1",
                    "schema_version = 99999999999999999999",
                )
                .into_bytes(),
            "damaged",
        ),
        (
            "fan-nan",
            valid
                .replace("temperature_c = 40.0", "temperature_c = nan")
                .into_bytes(),
            "fan_curve",
        ),
        (
            "inverted-lock",
            valid
                .replace("min_mhz = 210", "min_mhz = 3000")
                .into_bytes(),
            "min_mhz 3000 above max_mhz",
        ),
        (
            "typo",
            valid.replace("notes =", "nots =").into_bytes(),
            "unknown field `nots`",
        ),
        (
            "wrong-type",
            valid
                .replace("default_for_card = true", "default_for_card = \"yes\"")
                .into_bytes(),
            "damaged",
        ),
        (
            "negative-version",
            valid
                .replace("schema_version = 1", "schema_version = -1")
                .into_bytes(),
            "schema_version = -1",
        ),
    ];
    let mut planted = Vec::new();
    for (name, content, expected) in &cases {
        planted.push((plant(&store, name, content), content.clone(), *expected));
    }
    let (profiles, problems) = store.list();
    assert_eq!(
        profiles
            .iter()
            .map(|stored| stored.profile.name.as_str())
            .collect::<Vec<_>>(),
        vec!["Good"]
    );
    assert_eq!(problems.len(), cases.len(), "{problems:#?}");
    for (path, _, expected) in &planted {
        let problem = problems
            .iter()
            .find(|problem| &problem.path == path)
            .unwrap_or_else(|| panic!("{} is not reported", path.display()));
        assert!(
            problem.message.contains(&path.display().to_string()),
            "the message names the file: {}",
            problem.message
        );
        assert!(
            problem.message.contains(expected),
            "{}: expected {expected:?} in {}",
            path.display(),
            problem.message
        );
        assert!(
            problem.message.len() < 1_000,
            "a short message: {}",
            problem.message
        );
    }
    // Saving, renaming, defaulting and deleting around them leaves every bad file as it was.
    let mut corrupt_named = good.clone();
    corrupt_named.name = "corrupt".to_string();
    let saved = store.save(&corrupt_named).unwrap();
    assert_eq!(
        saved.file_name().and_then(|name| name.to_str()),
        Some("corrupt-2.toml")
    );
    store.set_default("Good").unwrap();
    store.rename("corrupt", "future").unwrap();
    store.delete("future").unwrap();
    let future_path = store.folder().join("future.toml");
    assert!(matches!(
        store.export("Good", &future_path),
        Err(StoreError::WouldOverwrite { .. })
    ));
    // Asked for by name, the unreadable file says why rather than "not found".
    assert!(matches!(
        store.load("future"),
        Err(StoreError::FutureVersion { found: 7, .. })
    ));
    for (path, content, _) in &planted {
        assert_eq!(
            &std::fs::read(path).unwrap(),
            content,
            "{} was changed",
            path.display()
        );
    }
    // Importing a bad file is refused with its name; nothing is added.
    let error = store.import(&planted[0].0).unwrap_err().to_string();
    assert!(error.contains("corrupt.toml"), "{error}");
    assert_eq!(store.list().0.len(), 1);
}

#[test]
fn a_box_profile_is_the_default_of_every_card_it_covers_unless_a_card_has_its_own() {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        ..SimOptions::default()
    });
    let cards: Vec<_> = (0..3)
        .map(|index| backend.identity(index).unwrap())
        .collect();
    let (_directory, store) = store();
    let mut boxed = full_profile("Box", &cards[0]);
    boxed.default_for_card = true;
    boxed.box_cards = cards[..2]
        .iter()
        .map(|card| gputune_formats::profile::BoxCard {
            gpu_uuid: card.uuid.clone(),
            gpu_name: card.name.clone(),
            power_limit: None,
        })
        .collect();
    store.save(&boxed).unwrap();
    assert_eq!(
        store.default_for(&cards[1].uuid).unwrap().profile.name,
        "Box"
    );
    assert_eq!(store.default_for(&cards[2].uuid), None, "not in the box");
    // A card's own default wins over its box's.
    let mut own = full_profile("Own", &cards[1]);
    own.default_for_card = true;
    store.save(&own).unwrap();
    assert_eq!(
        store.default_for(&cards[1].uuid).unwrap().profile.name,
        "Own"
    );
    assert_eq!(
        store.default_for(&cards[0].uuid).unwrap().profile.name,
        "Box"
    );
}

#[test]
fn the_profile_made_the_default_last_wins_on_every_card_it_covers() {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        ..SimOptions::default()
    });
    let cards: Vec<_> = (0..4)
        .map(|index| backend.identity(index).unwrap())
        .collect();
    let (_directory, store) = store();
    let box_of = |name: &str, covered: &[GpuIdentity]| {
        let mut profile = full_profile(name, &covered[0]);
        profile.default_for_card = false;
        profile.box_cards = covered
            .iter()
            .map(|card| gputune_formats::profile::BoxCard {
                gpu_uuid: card.uuid.clone(),
                gpu_name: card.name.clone(),
                power_limit: None,
            })
            .collect();
        profile
    };
    let mut own = full_profile("Own", &cards[1]);
    own.default_for_card = false;
    for profile in [
        &own,
        &box_of("Box", &cards[..2]),
        &box_of("Wide", &cards[1..]),
    ] {
        store.save(profile).unwrap();
    }
    let default_name = |uuid: &str| store.default_for(uuid).map(|stored| stored.profile.name);
    // The card's own default, then the box made the default: the box wins on every card it
    // covers (as in the daemon, which got the box last), and the card's own mark goes.
    assert_eq!(store.set_default("Own").unwrap(), Vec::<String>::new());
    assert_eq!(store.set_default("Box").unwrap(), Vec::<String>::new());
    assert_eq!(default_name(&cards[1].uuid).as_deref(), Some("Box"));
    assert!(!store.load("Own").unwrap().profile.default_for_card);
    // The card's own made the default again: it wins on its card, the box keeps the others.
    store.set_default("Own").unwrap();
    assert_eq!(default_name(&cards[1].uuid).as_deref(), Some("Own"));
    assert_eq!(default_name(&cards[0].uuid).as_deref(), Some("Box"));
    // A box sharing a card with the default box: the older box is no default any more, and
    // the card only it covered is said (its default now: none), to be told to the daemon.
    let released = store.set_default("Wide").unwrap();
    assert_eq!(released, vec![cards[0].uuid.clone()]);
    assert_eq!(default_name(&cards[0].uuid), None);
    for card in &cards[1..] {
        assert_eq!(default_name(&card.uuid).as_deref(), Some("Wide"));
    }
}

#[test]
fn store_operations_keep_one_default_per_card() {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        ..SimOptions::default()
    });
    let first = backend.identity(0).unwrap();
    let second = backend.identity(1).unwrap();
    let (directory, store) = store();
    let mut a = full_profile("A", &first);
    a.default_for_card = false;
    let b = Profile {
        name: "B".to_string(),
        ..a.clone()
    };
    let other = Profile {
        name: "Other card".to_string(),
        card: CardIdentity {
            uuid: second.uuid.clone(),
            ..a.card.clone()
        },
        ..a.clone()
    };
    for profile in [&a, &b, &other] {
        store.save(profile).unwrap();
    }
    assert_eq!(store.default_for(&first.uuid), None);
    store.set_default("A").unwrap();
    store.set_default("Other card").unwrap();
    assert_eq!(store.default_for(&first.uuid).unwrap().profile.name, "A");
    store.set_default("B").unwrap();
    assert_eq!(store.default_for(&first.uuid).unwrap().profile.name, "B");
    assert!(!store.load("A").unwrap().profile.default_for_card);
    assert_eq!(
        store.default_for(&second.uuid).unwrap().profile.name,
        "Other card",
        "another card's default stays"
    );
    let (for_first, _) = store.for_card(&first.uuid);
    assert_eq!(for_first.len(), 2);

    // Rename moves the file and keeps the rest.
    store.rename("B", "B renamed").unwrap();
    let renamed = store.load("B renamed").unwrap();
    assert!(renamed.profile.default_for_card);
    assert!(renamed.path.ends_with("b-renamed.toml"));
    assert!(matches!(store.load("B"), Err(StoreError::NotFound { .. })));
    assert!(matches!(
        store.rename("A", "B renamed"),
        Err(StoreError::AlreadyExists { .. })
    ));

    // Export and import: the copy is a profile; importing an existing name is refused;
    // into an empty store it arrives without the default flag.
    let exported = directory.path().join("shared.toml");
    store.export("B renamed", &exported).unwrap();
    assert!(matches!(
        store.import(&exported),
        Err(StoreError::AlreadyExists { .. })
    ));
    let elsewhere = ProfileStore::at(directory.path().join("elsewhere"));
    let imported = elsewhere.import(&exported).unwrap();
    assert_eq!(imported.profile.name, "B renamed");
    assert!(!imported.profile.default_for_card);

    store.delete("A").unwrap();
    assert!(matches!(
        store.delete("A"),
        Err(StoreError::NotFound { .. })
    ));
    let names: Vec<String> = store
        .list()
        .0
        .into_iter()
        .map(|stored| stored.profile.name)
        .collect();
    assert_eq!(names, vec!["B renamed", "Other card"]);
    // Case-insensitive lookup, and the error for a missing name names the folder.
    assert_eq!(store.load("other CARD").unwrap().profile.name, "Other card");
    let missing = store.load("nope").unwrap_err().to_string();
    assert!(
        missing.contains(&store.folder().display().to_string()),
        "{missing}"
    );
}

#[test]
fn file_names_are_safe_slugs_and_bad_names_are_refused() {
    assert_eq!(slug("../../etc/passwd"), "etc-passwd");
    assert_eq!(slug("Quiet 70%"), "quiet-70");
    assert_eq!(slug("///"), "profile");
    assert_eq!(slug(".hidden"), "hidden");
    assert_eq!(slug("Ünïcode ☃"), "n-code");
    assert!(slug(&"a".repeat(500)).len() <= 64);
    let (_, identity, _) = card(SimScenario::Rtx4090);
    let (_directory, store) = store();
    for bad in ["", "  padded ", "line\nbreak", &"x".repeat(101)] {
        let profile = full_profile(bad, &identity);
        assert!(
            matches!(store.save(&profile), Err(StoreError::InvalidProfile { .. })),
            "{bad:?}"
        );
    }
    let saved = store
        .save(&full_profile("../../escape", &identity))
        .unwrap();
    assert_eq!(saved.parent(), Some(store.folder()));
}

/// A valid profile file to mutate.
fn valid_text() -> String {
    let (_, identity, _) = card(SimScenario::Rtx4090);
    profile_to_toml(&full_profile("Fuzz", &identity)).unwrap()
}

fn check_never_panics(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(profile) = parse_profile(bytes) {
        // What loads is usable: it passes the checks and writes back to the same profile.
        prop_assert!(profile.check().is_ok());
        let again = profile_to_toml(&profile).map_err(TestCaseError::fail)?;
        prop_assert_eq!(parse_profile(again.as_bytes()).ok(), Some(profile));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_are_an_error_or_a_profile(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check_never_panics(&bytes)?;
    }

    #[test]
    fn mutated_valid_files_are_an_error_or_a_profile(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..8),
    ) {
        let mut bytes = valid_text().into_bytes();
        for (position, byte, kind) in edits {
            if bytes.is_empty() {
                break;
            }
            let at = position % bytes.len();
            match kind {
                0 => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                2 => { bytes.remove(at); }
                _ => bytes.truncate(at),
            }
        }
        check_never_panics(&bytes)?;
    }

    #[test]
    fn mutated_values_are_an_error_or_a_profile(
        field in 0usize..7,
        value in prop_oneof![
            Just("nan".to_string()), Just("-inf".to_string()), Just("1e308".to_string()),
            Just("-0.0".to_string()), Just("9223372036854775807".to_string()),
            Just("-9223372036854775808".to_string()), Just("\"text\"".to_string()),
            Just("[[1]]".to_string()), Just("{}".to_string()), any::<i64>().prop_map(|v| v.to_string()),
            any::<f64>().prop_map(|v| format!("{v:?}")),
        ],
    ) {
        let keys = [
            "watts = ", "percent_of_default = ", "min_mhz = ", "max_mhz = ",
            "gpu_clock_offset_mhz = ", "speed_pct = ", "temperature_c = ",
        ];
        let text = valid_text();
        let key = keys[field];
        let mutated: String = text
            .lines()
            .map(|line| {
                if line.starts_with(key) { format!("{key}{value}") } else { line.to_string() }
            })
            .collect::<Vec<_>>()
            .join("\n");
        check_never_panics(mutated.as_bytes())?;
        if let Ok(profile) = parse_profile(mutated.as_bytes()) {
            // Whatever loads converts, for any card, into settings the gate accepts.
            for scenario in [SimScenario::Rtx4090, SimScenario::DatacenterFanless] {
                let (_, identity, constraints) = card(scenario);
                let application = profile.for_card(&identity, &constraints);
                for setting in &application.settings {
                    prop_assert!(validate(&constraints, *setting).is_ok(), "{:?}", setting);
                }
            }
        }
    }
}

#[test]
fn the_store_follows_the_config_dir_variable_and_an_empty_one_is_unset() {
    let directory = tempfile::tempdir().unwrap();
    let named = directory.path().as_os_str().to_os_string();
    let folders = Folders::from_vars(
        |name| (name == CONFIG_DIR_ENV).then(|| named.clone()),
        false,
    );
    let store = ProfileStore::open(&folders).unwrap();
    assert_eq!(store.folder(), directory.path().join("profiles"));
    // An empty variable (and, for a user who is not root, sudo's SUDO_UID) changes nothing:
    // the folders are the platform's, as with no variable at all.
    let empty = Folders::from_vars(
        |name| match name {
            "SUDO_UID" => Some("0".into()),
            _ => Some(std::ffi::OsString::new()),
        },
        false,
    );
    assert_eq!(empty, Folders::from_vars(|_| None, false));
    assert_eq!(empty.record_dir, None);
}

#[test]
fn root_under_sudo_finds_the_invoking_users_profiles_unless_the_variable_names_a_folder() {
    let Ok(Some(nobody)) = nix::unistd::User::from_name("nobody") else {
        return; // no such account here: nothing to look up
    };
    let sudo_uid = nobody.uid.to_string();
    let under_sudo = Folders::from_vars(
        |name| (name == "SUDO_UID").then(|| sudo_uid.clone().into()),
        true,
    );
    assert_eq!(
        under_sudo.config_dir,
        Some(nobody.dir.join(".config").join("gputune"))
    );
    // Not root: sudo's variable is another process's business.
    let not_root = Folders::from_vars(
        |name| (name == "SUDO_UID").then(|| sudo_uid.clone().into()),
        false,
    );
    assert_ne!(not_root.config_dir, under_sudo.config_dir);
    let named = Folders::from_vars(
        |name| match name {
            "SUDO_UID" => Some(sudo_uid.clone().into()),
            CONFIG_DIR_ENV => Some("/somewhere".into()),
            _ => None,
        },
        true,
    );
    assert_eq!(named.config_dir, Some(PathBuf::from("/somewhere")));
}

// ---------------------------------------------------------------------------------------------
// Hostile files: FIFOs, devices, huge files, planted links, terminal escapes.

/// Generous: every refusal below is immediate; a read that blocked would never return at all.
const QUICKLY: std::time::Duration = std::time::Duration::from_secs(10);

/// The things a hostile folder can hold instead of a profile file: a FIFO, `/dev/zero`, links
/// to both, a 10 GiB sparse file (no disk used) and a folder, each with the words its error
/// must hold.
fn plant_hostile_files(folder: &Path) -> Vec<(PathBuf, &'static str)> {
    std::fs::create_dir_all(folder).unwrap();
    let fifo = folder.join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let zero = folder.join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let fifo_link = folder.join("fifo-link.toml");
    std::os::unix::fs::symlink(&fifo, &fifo_link).unwrap();
    let sparse = folder.join("sparse.toml");
    std::fs::File::create(&sparse)
        .and_then(|file| file.set_len(10 << 30))
        .unwrap();
    let directory = folder.join("folder.toml");
    std::fs::create_dir(&directory).unwrap();
    vec![
        (fifo, "FIFO"),
        (zero, "character device"),
        (fifo_link, "FIFO"),
        (sparse, "too large"),
        (directory, "folder"),
    ]
}

/// Whether `path` is still what `plant_hostile_files` made (nothing was written through it).
fn assert_unchanged(path: &Path) {
    let metadata = std::fs::symlink_metadata(path).unwrap();
    let name = path.file_name().and_then(|name| name.to_str()).unwrap();
    use std::os::unix::fs::FileTypeExt;
    match name {
        "fifo.toml" => assert!(metadata.file_type().is_fifo(), "{name}"),
        "zero.toml" | "fifo-link.toml" => assert!(metadata.is_symlink(), "{name}"),
        "sparse.toml" => assert_eq!(metadata.len(), 10 << 30, "{name}"),
        "folder.toml" => assert!(metadata.is_dir(), "{name}"),
        _ => panic!("{name}"),
    }
}

#[test]
fn fifos_devices_huge_files_and_folders_are_reported_quickly_and_left_alone() {
    let (_, identity, _) = card(SimScenario::Rtx4090);
    let (directory, store) = store();
    store.save(&full_profile("Good", &identity)).unwrap();
    let hostile = plant_hostile_files(store.folder());
    let started = std::time::Instant::now();

    // Listing: the good profile loads, every hostile entry is a problem that says what it is.
    let (profiles, problems) = store.list();
    assert_eq!(profiles.len(), 1);
    assert_eq!(profiles[0].profile.name, "Good");
    assert_eq!(problems.len(), hostile.len(), "{problems:#?}");
    for (path, words) in &hostile {
        let problem = problems
            .iter()
            .find(|problem| &problem.path == path)
            .unwrap_or_else(|| panic!("{} is not reported", path.display()));
        assert!(
            problem.message.contains(&path.display().to_string())
                && problem.message.contains(words),
            "expected the path and {words:?} in: {}",
            problem.message
        );
    }

    // Loading one by name says why it cannot be read rather than "not found".
    for (name, words) in [("fifo", "FIFO"), ("zero", "character device")] {
        let error = store.load(name).unwrap_err();
        assert!(matches!(error, StoreError::NotRegular { .. }), "{error:?}");
        assert!(error.to_string().contains(words), "{error}");
    }
    assert!(matches!(
        store.load("sparse"),
        Err(StoreError::TooLarge { bytes, .. }) if bytes == 10 << 30
    ));

    // Importing any of them is refused, from inside the folder or from elsewhere.
    let elsewhere = ProfileStore::at(directory.path().join("elsewhere"));
    for (path, words) in &hostile {
        for target in [&store, &elsewhere] {
            let error = target.import(path).unwrap_err().to_string();
            assert!(error.contains(words), "{}: {error}", path.display());
        }
    }
    let dev_zero = elsewhere.import(Path::new("/dev/zero")).unwrap_err();
    assert!(
        matches!(dev_zero, StoreError::NotRegular { .. }),
        "{dev_zero}"
    );
    assert!(!elsewhere.folder().exists(), "nothing was imported");

    // Exporting over any of them is refused: nothing is written to or through it.
    for (path, _) in &hostile {
        assert!(
            matches!(
                store.export("Good", path),
                Err(StoreError::WouldOverwrite { .. })
            ),
            "{}",
            path.display()
        );
    }
    // Saving a profile named like one of them picks another file name.
    let mut fifo_named = full_profile("fifo", &identity);
    fifo_named.default_for_card = false;
    let saved = store.save(&fifo_named).unwrap();
    assert_eq!(saved, store.folder().join("fifo-2.toml"));

    assert!(started.elapsed() < QUICKLY, "took {:?}", started.elapsed());
    for (path, _) in &hostile {
        assert_unchanged(path);
    }
}

/// The names in `folder`, sorted.
fn names_in(folder: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn writes_never_follow_a_planted_link_and_leave_no_temporary_files() {
    let (_, identity, _) = card(SimScenario::Rtx4090);
    let (directory, store) = store();
    let mut profile = full_profile("Quiet", &identity);
    profile.default_for_card = false;
    std::fs::create_dir_all(store.folder()).unwrap();
    let victim = directory.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();

    // The names the old writer used for its temporary file (`.<file>.<pid>.tmp`), planted as
    // links to the victim: a writer that followed them would overwrite it.
    let pid = std::process::id();
    let mut planted = Vec::new();
    for file in ["quiet.toml", "quiet-2.toml", "renamed.toml", "shared.toml"] {
        for folder in [store.folder(), directory.path()] {
            let link = folder.join(format!(".{file}.{pid}.tmp"));
            std::os::unix::fs::symlink(&victim, &link).unwrap();
            planted.push(link);
        }
    }
    let saved = store.save(&profile).unwrap();
    assert_eq!(saved, store.folder().join("quiet.toml"));
    profile.notes = "saved again".to_string();
    store.save(&profile).unwrap();
    store.set_default("Quiet").unwrap();
    store.rename("Quiet", "Renamed").unwrap();
    let exported = directory.path().join("shared.toml");
    store.export("Renamed", &exported).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    for link in &planted {
        assert!(std::fs::symlink_metadata(link).unwrap().is_symlink());
    }
    let mut expected: Vec<String> = planted
        .iter()
        .filter(|link| link.parent() == Some(store.folder()))
        .map(|link| link.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    expected.push("renamed.toml".to_string());
    expected.sort();
    assert_eq!(names_in(store.folder()), expected, "no temporary file left");

    // A link at the target that leads to something that is not a profile: refused, the
    // victim and the link stay as they are.
    let link = directory.path().join("link.toml");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let error = store.export("Renamed", &link).unwrap_err();
    assert!(
        matches!(error, StoreError::WouldOverwrite { .. }),
        "{error}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    // A dangling link: refused too, and its target is not created.
    let nowhere = directory.path().join("nowhere.toml");
    let dangling = directory.path().join("dangling.toml");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    assert!(matches!(
        store.export("Renamed", &dangling),
        Err(StoreError::WouldOverwrite { .. })
    ));
    assert!(!nowhere.exists());

    // A link that leads to another profile (a profile kept elsewhere and linked into the
    // folder): it is read through, and a write replaces the link, never the file behind it.
    let outside = directory.path().join("outside.toml");
    let mut linked = full_profile("Linked", &identity);
    linked.default_for_card = false;
    std::fs::write(&outside, profile_to_toml(&linked).unwrap()).unwrap();
    let before = std::fs::read(&outside).unwrap();
    let in_folder = store.folder().join("linked.toml");
    std::os::unix::fs::symlink(&outside, &in_folder).unwrap();
    assert_eq!(store.load("Linked").unwrap().profile, linked);
    store.set_default("Linked").unwrap();
    assert_eq!(
        std::fs::read(&outside).unwrap(),
        before,
        "the link's target is untouched"
    );
    assert!(!std::fs::symlink_metadata(&in_folder).unwrap().is_symlink());
    assert!(store.load("Linked").unwrap().profile.default_for_card);

    // A rewritten file keeps its permissions.
    use std::os::unix::fs::PermissionsExt;
    let renamed = store.folder().join("renamed.toml");
    std::fs::set_permissions(&renamed, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut again = store.load("Renamed").unwrap().profile;
    again.notes = "private".to_string();
    store.save(&again).unwrap();
    let mode = std::fs::metadata(&renamed).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    expected.push("linked.toml".to_string());
    expected.sort();
    assert_eq!(names_in(store.folder()), expected, "no temporary file left");
}

#[test]
fn control_and_bidi_characters_are_refused_in_names_notes_and_card_fields() {
    use gputune_core::profiles::profile::check_name as check_profile_name;
    let (_, identity, _) = card(SimScenario::Rtx4090);
    let (_directory, store) = store();

    let error = check_profile_name("Quiet\u{1b}[2J").unwrap_err();
    assert!(
        error.contains("profile name") && error.contains("\\u{1b}"),
        "{error}"
    );
    assert!(!error.contains('\u{1b}'), "{error:?}");
    let error = check_profile_name("txt.\u{202E}exe").unwrap_err();
    assert!(error.contains("\\u{202e}"), "{error}");
    assert!(!error.contains('\u{202E}'), "{error:?}");

    // At save: each field with an escape sequence or a bidi override is refused, naming the
    // field and showing the character escaped; nothing is written.
    type Edit = fn(&mut Profile);
    let cases: [(&str, Edit, &str); 11] = [
        (
            "name ESC",
            |p| p.name = "Quiet\u{1b}[2J".into(),
            "profile name",
        ),
        (
            "name RLO",
            |p| p.name = "Quiet\u{202E}".into(),
            "profile name",
        ),
        (
            "name isolate",
            |p| p.name = "a\u{2066}b".into(),
            "profile name",
        ),
        (
            "notes ESC",
            |p| p.notes = "a\u{1b}]0;owned\u{7}".into(),
            "notes",
        ),
        (
            "notes RLO",
            |p| p.notes = "line\n\u{202E}reversed".into(),
            "notes",
        ),
        (
            "card name",
            |p| p.card.name = "RTX\u{202E}".into(),
            "card.name",
        ),
        (
            "card uuid",
            |p| p.card.uuid = "GPU-\u{1b}[1m".into(),
            "card.uuid",
        ),
        (
            "pci id",
            |p| p.card.pci_bus_id = "00:\u{9b}31m".into(),
            "card.pci_bus_id",
        ),
        (
            "check summary",
            |p| {
                if let Some(record) = p.last_check.as_mut() {
                    record.summary = "Stable\u{1b}[2J".into();
                }
            },
            "last_check.summary",
        ),
        (
            "check driver",
            |p| {
                if let Some(record) = p.last_check.as_mut() {
                    record.driver_version = Some("580\u{202E}".into());
                }
            },
            "last_check.driver_version",
        ),
        (
            "checked card",
            |p| {
                if let Some(record) = p.last_check.as_mut() {
                    record.gpu_name = Some("RTX\u{1b}[2J".into());
                }
            },
            "last_check.gpu_name",
        ),
    ];
    for (case, edit, field) in cases {
        let mut profile = full_profile("Hostile", &identity);
        edit(&mut profile);
        let error = store.save(&profile).unwrap_err();
        assert!(
            matches!(error, StoreError::InvalidProfile { .. }),
            "{case}: {error:?}"
        );
        let message = error.to_string();
        assert!(message.contains(field), "{case}: {message}");
        assert!(
            message.contains("\\u{"),
            "{case}: the character is shown escaped: {message}"
        );
        assert!(
            gputune_core::text::first_unsafe(&message).is_none(),
            "{case}: {message:?}"
        );
        assert!(profile.check().is_err(), "{case}");
    }
    assert!(!store.folder().exists(), "nothing was written");
    // Several lines and tabs in notes stay fine.
    let mut multiline = full_profile("Multi", &identity);
    multiline.notes = "first\n\tsecond".to_string();
    assert!(multiline.check().is_ok());

    // At load: hand-written files holding them are reported, escaped, and do not load.
    let valid = profile_to_toml(&full_profile("Template", &identity)).unwrap();
    let files = [
        (
            "esc-name",
            valid.replace("name = \"Template\"", "name = \"x\\u001b[2J\""),
            "profile name",
        ),
        (
            "rlo-name",
            valid.replace("name = \"Template\"", "name = \"x\\u202Etxt\""),
            "profile name",
        ),
        (
            "esc-notes",
            valid.replace("notes = \"\"\"", "notes = \"\"\"\\u001b[31m"),
            "notes",
        ),
        (
            "rlo-card",
            valid.replace("name = \"NVIDIA", "name = \"\\u202ENVIDIA"),
            "card.name",
        ),
    ];
    for (name, content, _) in &files {
        assert_ne!(content, &valid, "{name}: the edit applied");
        plant(&store, name, content.as_bytes());
    }
    let (profiles, problems) = store.list();
    assert!(profiles.is_empty(), "{profiles:#?}");
    assert_eq!(problems.len(), files.len(), "{problems:#?}");
    for (name, _, field) in &files {
        let problem = problems
            .iter()
            .find(|problem| problem.path.ends_with(format!("{name}.toml")))
            .unwrap_or_else(|| panic!("{name} is not reported"));
        assert!(
            problem.message.contains(field),
            "{name}: {}",
            problem.message
        );
        assert!(
            problem.message.contains("\\u{"),
            "{name}: {}",
            problem.message
        );
        assert!(
            gputune_core::text::first_unsafe(&problem.message).is_none(),
            "{:?}",
            problem.message
        );
        assert!(store.import(&problem.path).is_err());
    }
}

#[test]
fn a_file_name_with_terminal_escapes_is_reported_escaped() {
    let (_, identity, _) = card(SimScenario::Rtx4090);
    let (_directory, store) = store();
    let clear = plant(&store, "\u{1b}[2J", b"not a profile");
    let reversed = plant(&store, "\u{202E}lmot", b"");
    store.save(&full_profile("Good", &identity)).unwrap();
    let (profiles, problems) = store.list();
    assert_eq!(profiles.len(), 1);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    for problem in &problems {
        assert!(
            gputune_core::text::first_unsafe(&problem.message).is_none(),
            "{:?}",
            problem.message
        );
    }
    let shown: Vec<&str> = problems
        .iter()
        .map(|problem| problem.message.as_str())
        .collect();
    assert!(
        shown
            .iter()
            .any(|message| message.contains("\\u{1b}[2J.toml")),
        "{shown:?}"
    );
    assert!(
        shown
            .iter()
            .any(|message| message.contains("\\u{202e}lmot.toml")),
        "{shown:?}"
    );
    // The files are left as they were.
    assert_eq!(std::fs::read(&clear).unwrap(), b"not a profile");
    assert_eq!(std::fs::read(&reversed).unwrap(), b"");
    // An error naming a file through `export` is escaped too.
    let error = store.export("Good", &clear).unwrap_err().to_string();
    assert!(error.contains("\\u{1b}[2J.toml"), "{error}");
    assert!(
        gputune_core::text::first_unsafe(&error).is_none(),
        "{error:?}"
    );
}
