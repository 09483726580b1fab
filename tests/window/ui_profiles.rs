//! The Profiles tab: save what the card runs (the same profile `gputune profile save` writes),
//! apply or try, rename, delete after asking, make default; and the actions against a real
//! profile folder.

use common_ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::common_ui;
use gputune::ui::app::AppCommand;
use gputune::ui::profiles::{ProfileAction, profile_from_card};
use gputune_core::device::sim::{LoadPattern, SimScenario};
use gputune_core::folders::Folders;
use gputune_core::profiles::checked::CheckedOffsets;
use gputune_core::profiles::store::ProfileStore;
use gputune_formats::tuning::ClockLockInForce;
use gputune_formats::window::Tab;

fn harness() -> Harness<'static, Window> {
    let mut state = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
    state.tab = Tab::Profiles;
    window_harness(state, [1300.0, 900.0])
}

#[test]
fn saving_captures_the_tune_tab_and_rows_offer_every_action() {
    let config_dir = tempfile::tempdir().expect("a config folder");

    let mut harness = harness();
    harness.get_by_label("No profile saved for this card yet.");
    // What the card runs, as the engine reports it: a clock lock gputune set (NVML cannot read
    // it back, the engine's record knows it) and an offset read from the card.
    if let Some(tuning) = harness.state_mut().state.model.gpus[0].tuning.as_mut() {
        tuning.in_force.gpu_clock_lock = ClockLockInForce::Locked {
            min_mhz: 210,
            max_mhz: 2_400,
        };
        tuning.in_force.memory_clock_lock = ClockLockInForce::Locked {
            min_mhz: 405,
            max_mhz: 810,
        };
        tuning.in_force.gpu_clock_offset_mhz = Some(150);
    }
    harness.get_by_label("Name").click();
    harness.run();
    harness.get_by_label("Name").type_text("quiet-70");
    harness.run();
    harness.get_by_label("Save the current settings").click();
    harness.run();
    let saved = harness
        .state()
        .commands
        .iter()
        .find_map(|command| match command {
            AppCommand::Profile(ProfileAction::Save(profile)) => Some(profile.clone()),
            _ => None,
        });
    let Some(profile) = saved else {
        panic!("a Save action: {:?}", harness.state().commands)
    };
    assert_eq!(profile.name, "quiet-70");
    // The card's limit as read (the simulator runs at its 450 W default), the lock and the offset.
    assert_eq!(
        profile
            .power_limit
            .map(|power| (power.watts, power.percent_of_default)),
        Some((450.0, 100.0))
    );
    assert_eq!(
        profile
            .gpu_clock_lock
            .map(|lock| (lock.min_mhz, lock.max_mhz)),
        Some((210, 2_400))
    );
    assert_eq!(profile.gpu_clock_offset_mhz, Some(150));
    assert_eq!(
        profile.card.uuid,
        harness.state().state.model.gpus[0].info.identity.uuid
    );

    // What the app does with it: the store saves, lists it, and the row offers its actions.
    let store = ProfileStore::open(&Folders {
        config_dir: Some(config_dir.path().to_path_buf()),
        ..Folders::default()
    })
    .unwrap_or_else(|error| panic!("{error}"));
    store
        .save(&profile)
        .unwrap_or_else(|error| panic!("{error}"));
    let (profiles, problems) = store.list();
    assert!(problems.is_empty());
    harness.state_mut().state.profiles.profiles = profiles;
    harness.run();
    harness.get_by_label("quiet-70");
    // The row says what the profile sets in the words `gputune profile list` uses, the
    // memory clock lock included, and that its clocks were never checked for stability.
    assert!(
        profile.summary().contains("memory clocks 405-810 MHz"),
        "{}",
        profile.summary()
    );
    harness.get_by_label(&format!("{}; never checked", profile.summary()));
    harness.get_by_label("Apply quiet-70").click();
    harness.run();
    harness.get_by_label("Try quiet-70").click();
    harness.run();
    harness.get_by_label("Make quiet-70 the default").click();
    harness.run();
    let commands = &harness.state().commands;
    assert!(
        commands.contains(&AppCommand::Profile(ProfileAction::Apply {
            name: "quiet-70".into(),
            try_first: false
        }))
    );
    assert!(
        commands.contains(&AppCommand::Profile(ProfileAction::Apply {
            name: "quiet-70".into(),
            try_first: true
        }))
    );
    assert!(
        commands.contains(&AppCommand::Profile(ProfileAction::SetDefault {
            name: "quiet-70".into()
        }))
    );

    // Delete asks first; "Keep it" keeps it, "Yes, delete" sends the delete.
    harness.get_by_label("Delete quiet-70…").click();
    harness.run();
    harness.get_by_label("Delete quiet-70?");
    harness.get_by_label("Keep it").click();
    harness.run();
    assert!(
        !harness
            .state()
            .commands
            .contains(&AppCommand::Profile(ProfileAction::Delete {
                name: "quiet-70".into()
            }))
    );
    harness.get_by_label("Delete quiet-70…").click();
    harness.run();
    harness.get_by_label("Yes, delete").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Profile(ProfileAction::Delete {
                name: "quiet-70".into()
            }))
    );

    // Rename: type the new name, then confirm.
    harness.get_by_label("Rename quiet-70…").click();
    harness.run();
    harness.get_by_label("Rename").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::Profile(ProfileAction::Rename {
                old: "quiet-70".into(),
                new: "quiet-70".into()
            }))
    );

    // A fanless datacenter card: its 700 W limit, nothing else applied.
    let fanless = app_state(
        SimScenario::DatacenterFanless,
        LoadPattern::Training,
        None,
        2,
        500,
    );
    let profile = profile_from_card("dc", "", &fanless.model.gpus[0], None)
        .unwrap_or_else(|| panic!("the engine said what the card runs"));
    assert_eq!(profile.power_limit.map(|power| power.watts), Some(700.0));
    assert_eq!(profile.fan_curve, None);
    assert_eq!(
        profile.gpu_clock_offset_mhz, None,
        "no offsets on this card"
    );
}

#[test]
fn applying_a_profile_becomes_applied_or_the_error_when_the_answer_comes() {
    use gputune_core::link::LinkEvent;
    use gputune_formats::card::Setting;
    use gputune_formats::tuning::Notice;
    use gputune_formats::tuning::{GpuApplied, TuneError, TuneErrorKind};
    let mut harness = harness();
    // What the app does on "Apply quiet-70": says it is applying, and waits for the answer.
    {
        let state = &mut harness.state_mut().state;
        state.profiles.message = Some(Notice::Info("Applying quiet-70 on GPU 0.".to_string()));
        let gpu = &state.model.gpus[0];
        state.profiles.awaiting(gpu, "quiet-70", false);
    }
    harness.run();
    harness.get_by_label("Applying quiet-70 on GPU 0.");
    let applied = GpuApplied {
        gpu_index: 0,
        applied: vec![Setting::PowerLimit {
            power_limit_mw: 315_000,
        }],
        in_force: Default::default(),
        enforced_power_limit_mw: Some(315_000),
    };
    harness.state_mut().state.take_event(
        LinkEvent::Applied {
            gpu_index: 0,
            result: Ok(applied),
        },
        common_ui::START_MS + 10_000,
    );
    harness.run();
    assert!(
        harness
            .query_by_label("Applying quiet-70 on GPU 0.")
            .is_none()
    );
    harness.get_by_label_contains("Applied quiet-70 on GPU 0: Applied power limit 315 W.");

    // Refused: the error, once the answer comes.
    {
        let state = &mut harness.state_mut().state;
        let gpu = &state.model.gpus[0];
        state.profiles.awaiting(gpu, "quiet-70", false);
    }
    harness.state_mut().state.take_event(
        LinkEvent::Applied {
            gpu_index: 0,
            result: Err(TuneError::new(
                TuneErrorKind::Held,
                "GPU 0 is held by a trial of gputune apply --try 60.",
            )),
        },
        common_ui::START_MS + 20_000,
    );
    harness.run();
    harness.get_by_label_contains("quiet-70 was not applied on GPU 0: GPU 0 is held by a trial");
}

#[test]
fn profiles_saved_changed_or_removed_elsewhere_show_without_a_reload() {
    use gputune::ui::profiles::folder_watch::{LOOK_EVERY, ProfileFolderWatch};
    use std::time::{Duration, Instant};
    let config_dir = tempfile::tempdir().expect("a config folder");
    let folders = Folders {
        config_dir: Some(config_dir.path().to_path_buf()),
        ..Folders::default()
    };
    // `gputune profile save` in a terminal writes through the same store.
    let cli = ProfileStore::open(&folders).unwrap_or_else(|error| panic!("{error}"));
    let mut watch = ProfileFolderWatch::new(&folders);
    let mut harness = harness();
    let start = Instant::now();
    // One frame as the glue runs it: a look at the folder at `at`, then the tab drawn.
    let mut frame = |harness: &mut Harness<'static, Window>, at: Duration| {
        let state = &mut harness.state_mut().state;
        let shown = state.tab == Tab::Profiles;
        watch.reload_if_changed(&mut state.profiles, shown, start + at);
        harness.run();
    };
    frame(&mut harness, Duration::ZERO);
    harness.get_by_label("No profile saved for this card yet.");

    let Some(mut profile) =
        profile_from_card("quiet-70", "", &harness.state().state.model.gpus[0], None)
    else {
        panic!("the engine said what the card runs")
    };
    cli.save(&profile).unwrap_or_else(|error| panic!("{error}"));
    frame(&mut harness, LOOK_EVERY);
    harness.get_by_label("quiet-70");

    // Changed in place: the row says what it sets now.
    profile.gpu_clock_offset_mhz = Some(135);
    cli.save(&profile).unwrap_or_else(|error| panic!("{error}"));
    frame(&mut harness, LOOK_EVERY * 2);
    harness.get_by_label(&format!("{}; never checked", profile.summary()));

    // Removed.
    cli.delete("quiet-70")
        .unwrap_or_else(|error| panic!("{error}"));
    frame(&mut harness, LOOK_EVERY * 3);
    harness.get_by_label("No profile saved for this card yet.");

    // Saved while another tab is shown: the folder is looked at as the tab comes back.
    harness.state_mut().state.tab = Tab::Monitor;
    frame(&mut harness, LOOK_EVERY * 3 + Duration::from_millis(100));
    profile.name = "undervolt".to_string();
    cli.save(&profile).unwrap_or_else(|error| panic!("{error}"));
    harness.state_mut().state.tab = Tab::Profiles;
    frame(&mut harness, LOOK_EVERY * 3 + Duration::from_millis(200));
    harness.get_by_label("undervolt");
}

#[test]
fn a_check_made_on_another_card_is_named_and_does_not_count_here() {
    use gputune_core::profiles::store::StoredProfile;
    use gputune_formats::profile::{CheckRecord, Verdict};
    let mut harness = harness();
    let profiles = {
        let gpu = &harness.state().state.model.gpus[0];
        let with_check = |name: &str, uuid: Option<&str>, ran_s: f64| {
            let mut profile = profile_from_card(name, "", gpu, None)
                .unwrap_or_else(|| panic!("the engine said what the card runs"));
            profile.gpu_clock_offset_mhz = Some(120);
            profile.last_check = Some(CheckRecord {
                ended_at_ms: common_ui::START_MS,
                ran_s,
                verdict: Verdict::Stable,
                summary: "Stable.".to_string(),
                driver_version: None,
                gputune_version: "0.1.0".to_string(),
                gpu_uuid: uuid.map(str::to_string),
                gpu_name: uuid.map(|_| "NVIDIA H100 80GB HBM3".to_string()),
            });
            StoredProfile {
                profile,
                path: std::path::PathBuf::from(format!("/nonexistent/{name}.toml")),
            }
        };
        let here = gpu.info.identity.uuid.clone();
        vec![
            with_check("here", Some(&here), 900.0),
            with_check(
                "elsewhere",
                Some("GPU-0b7e2c11-1111-4111-8111-000000000002"),
                960.0,
            ),
            with_check("old", None, 1020.0),
        ]
    };
    harness.state_mut().state.profiles.profiles = profiles;
    harness.run();
    harness.get_by_label_contains("checked stable for 15 min on");
    harness.get_by_label_contains("checked stable for 16 min on");
    harness.get_by_label_contains(
        "on GPU-0b7e2c11… (another card: NVIDIA H100 80GB HBM3), not on this one",
    );
    harness.get_by_label_contains("so it counts as checked on no card");
    // Only the check made on this card reads as one.
    assert_eq!(
        harness
            .query_all_by_label_contains("not on this one")
            .count(),
        1
    );
}

#[test]
fn each_cards_own_checked_undervolt_is_a_line_of_its_profile() {
    use gputune_core::profiles::store::StoredProfile;
    use gputune_formats::profile::{CheckedBy, CheckedCard, Verdict};
    let mut harness = harness();
    let other = "GPU-0b7e2c11-1111-4111-8111-000000000002";
    let stored = {
        let gpu = &harness.state().state.model.gpus[0];
        let mut profile = profile_from_card("undervolt", "", gpu, None)
            .unwrap_or_else(|| panic!("the engine said what the card runs"));
        profile.gpu_clock_offset_mhz = Some(120);
        for (uuid, offset_mhz, by) in [
            (gpu.info.identity.uuid.clone(), 120, CheckedBy::Check),
            (other.to_string(), 90, CheckedBy::Scan),
        ] {
            profile.record_checked_card(CheckedCard {
                gpu_uuid: uuid,
                gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
                gpu_clock_offset_mhz: Some(offset_mhz),
                memory_clock_offset_mhz: None,
                checked_at_ms: common_ui::START_MS,
                ran_s: 600.0,
                by,
                verdict: Verdict::Stable,
            });
        }
        StoredProfile {
            profile,
            path: std::path::PathBuf::from("/nonexistent/undervolt.toml"),
        }
    };
    let here = gputune_core::text::short_uuid(&stored.profile.card.uuid);
    harness.state_mut().state.profiles.profiles = vec![stored];
    harness.run();
    harness.get_by_label_contains(&format!(
        "Undervolt on NVIDIA GeForce RTX 4090 {here}: GPU offset +120 MHz; a check found it stable for 10 min on"
    ));
    harness.get_by_label_contains(
        "Undervolt on NVIDIA GeForce RTX 4090 GPU-0b7e2c11…: GPU offset +90 MHz; a scan found it stable for 10 min on",
    );
    harness.get_by_label_contains(
        "Undervolt on any other card: no clock offset until it is checked there",
    );
}
