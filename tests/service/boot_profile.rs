//! `gputune daemon --boot-profile FILE`, as the Kubernetes DaemonSet starts it with its node's
//! profile: on the fake libnvidia-ml, every card boots with the profile (converted to each card
//! by `Profile::for_card`), an empty file clears the boot defaults, a card's stored temperature
//! hold stays through both, a bad file stops the daemon before any card is touched.

use crate::common;

use common::FakeMachine;
use common::daemon::Daemon;

/// A node profile as an admin exports one: 80 % of each card's default power limit (the watts
/// are the card it was saved from, which is not in this machine).
pub const NODE_PROFILE: &str = r#"schema_version = 1
name = "efficient-80"
notes = "Every GPU of the node at 80 % of its default power limit."

[card]
uuid = "GPU-00000000-0000-4000-8000-00000000cafe"
name = "NVIDIA GeForce RTX 4090"
pci_bus_id = "00000000:01:00.0"

[power_limit]
percent_of_default = 80.0
watts = 360.0
"#;

fn boot_files(daemon_state: &std::path::Path) -> usize {
    std::fs::read_dir(daemon_state.join("defaults"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.file_name().to_string_lossy().starts_with("boot-"))
                .count()
        })
        .unwrap_or(0)
}

/// Writes the card's boot default holding only a temperature hold, in the daemon's folder.
fn store_hold_default(daemon_state: &std::path::Path, uuid: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = daemon_state.join("defaults");
    std::fs::create_dir_all(&dir).expect("the defaults folder");
    for folder in [daemon_state, dir.as_path()] {
        std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700))
            .expect("a private folder");
    }
    let file = format!(
        r#"{{"format_version":2,"gpu_uuid":"{uuid}","profile_name":"temperature hold","settings":[],"temperature_hold":{{"max_temperature_c":85,"min_power_limit_mw":270000,"max_power_limit_mw":360000}}}}"#
    );
    std::fs::write(dir.join(format!("boot-{uuid}.json")), file).expect("the boot default");
}

/// Whether the card's stored boot default holds the temperature hold of `store_hold_default`.
fn stored_hold(daemon_state: &std::path::Path, uuid: &str) -> bool {
    let text = std::fs::read_to_string(
        daemon_state
            .join("defaults")
            .join(format!("boot-{uuid}.json")),
    )
    .unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&text)
        .is_ok_and(|default| default["temperature_hold"]["max_temperature_c"] == 85)
}

#[test]
fn the_boot_profile_becomes_every_cards_boot_default_and_an_empty_file_clears_them() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let profile = machine.state_dir().with_file_name("node-profile.toml");
    std::fs::write(&profile, NODE_PROFILE).expect("the profile is written");
    let profile_arg = profile.to_str().expect("a UTF-8 path");
    // GPU 0 has a temperature hold stored with `hold-temp set --boot-default` (as the daemon
    // writes it; 85 °C under a 360 W ceiling: the cool card is never moved by it).
    let defaults = machine.state_dir().with_file_name("daemon").join("state");
    store_hold_default(&defaults, &machine.uuid(0));
    let daemon = Daemon::start_with(&machine, &["--boot-profile", profile_arg], &[]);
    let state_dir = daemon.state_dir.clone();
    let runtime_dir = daemon.runtime_dir.clone();
    for gpu in 0..8 {
        assert_eq!(
            machine.power_limit_mw(gpu),
            360_000,
            "GPU {gpu}: {}",
            daemon.log_text()
        );
    }
    assert_eq!(boot_files(&state_dir), 8);
    let log = daemon.log_text();
    assert!(
        log.contains("\"efficient-80\" is every GPU's boot default"),
        "{log}"
    );
    assert!(
        log.contains("Applied the boot default \"efficient-80\" to GPU 7"),
        "{log}"
    );
    assert!(
        log.contains("The daemon holds GPU 0 at or below 85 °C"),
        "{log}"
    );
    assert!(
        stored_hold(&state_dir, &machine.uuid(0)),
        "the profile kept the hold"
    );
    assert_eq!(daemon.stop(), Some(0));
    // The daemon stopped: the boot default stays on the cards (it is no session).
    assert_eq!(machine.power_limit_mw(3), 360_000);

    // The node lost its label: the init container writes an empty file.
    std::fs::write(&profile, "").expect("the file is emptied");
    let daemon = Daemon::start_full(
        &machine,
        runtime_dir,
        state_dir.clone(),
        &["--boot-profile", profile_arg],
        &[],
    );
    // Only the hold is left: the profile part went, the hold stays and is kept.
    assert_eq!(boot_files(&state_dir), 1);
    assert!(stored_hold(&state_dir, &machine.uuid(0)));
    let log = daemon.log_text();
    assert!(
        log.contains("is empty: no GPU keeps a profile as its boot default"),
        "{log}"
    );
    assert!(
        log.contains("The daemon holds GPU 0 at or below 85 °C"),
        "{log}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn a_bad_boot_profile_stops_the_daemon_before_any_card_is_touched() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let base = machine.state_dir().with_file_name("bad-boot");
    let profile = base.with_file_name("bad-profile.toml");
    std::fs::write(&profile, "schema_version = 1\nname = \"half\"\n").expect("written");
    for file in [profile.clone(), base.with_file_name("missing.toml")] {
        let output = machine
            .command(&[
                "daemon",
                "--runtime-dir",
                base.join("run").to_str().unwrap_or_default(),
                "--state-dir",
                base.join("state").to_str().unwrap_or_default(),
                "--driver-wait-s",
                "0",
                "--boot-profile",
                file.to_str().unwrap_or_default(),
            ])
            .env("GPUTUNE_SOCKET", base.join("run").join("gputune.sock"))
            .output()
            .expect("the daemon runs");
        let said = common::text(&output.stderr);
        assert!(!output.status.success(), "{said}");
        assert!(said.contains("--boot-profile"), "{said}");
        assert!(
            said.contains(file.file_name().and_then(|n| n.to_str()).unwrap_or("?")),
            "{said}"
        );
        assert!(machine.write_log().is_empty(), "{:?}", machine.write_log());
    }
}

/// A box profile of `cards` of the 8-GPU fake box, at `percent` of each card's default limit.
fn box_profile(machine: &FakeMachine, name: &str, cards: &[usize], percent: f64) -> String {
    let mut text = format!(
        "schema_version = 1\nname = \"{name}\"\n\n[card]\nuuid = \"{}\"\nname = \"NVIDIA GeForce RTX 4090\"\npci_bus_id = \"00000000:01:00.0\"\n\n[power_limit]\npercent_of_default = {percent:.1}\nwatts = {:.1}\n",
        machine.uuid(cards[0]),
        450.0 * percent / 100.0
    );
    for card in cards {
        text.push_str(&format!(
            "\n[[box_cards]]\ngpu_uuid = \"{}\"\ngpu_name = \"NVIDIA GeForce RTX 4090\"\n",
            machine.uuid(*card)
        ));
    }
    text
}

#[test]
fn a_box_profile_made_the_default_over_another_leaves_the_daemon_agreeing_with_apply_defaults() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let profiles = machine.config_dir().join("profiles");
    std::fs::create_dir_all(&profiles).expect("a profile folder");
    for (file, name, cards, percent) in [
        ("box.toml", "Box", &[0, 1][..], 80.0),
        ("wide.toml", "Wide", &[1, 2][..], 70.0),
    ] {
        std::fs::write(
            profiles.join(file),
            box_profile(&machine, name, cards, percent),
        )
        .expect("the profile is written");
    }
    let daemon = Daemon::start(&machine);
    let boot_file = |card: usize| {
        daemon
            .state_dir
            .join("defaults")
            .join(format!("boot-{}.json", machine.uuid(card)))
    };
    daemon.ok(&machine, &["profile", "default", "Box"]);
    assert!(boot_file(0).exists() && boot_file(1).exists());
    // Wide shares GPU 1 with Box: the last one made the default wins there, Box is no default
    // any more, and GPU 0 (only Box covered it, and it has no own default) loses its boot
    // default in the daemon as in `profile apply-defaults`.
    let said = daemon.ok(&machine, &["profile", "default", "Wide"]);
    assert!(
        said.contains("GPU 0 is no longer in a default box profile and has no default of its own"),
        "{said}"
    );
    assert!(!boot_file(0).exists());
    for card in [1, 2] {
        let text = std::fs::read_to_string(boot_file(card)).expect("a boot default");
        assert!(text.contains("Wide"), "GPU {card}: {text}");
    }
    assert_eq!(daemon.stop(), Some(0));
}
