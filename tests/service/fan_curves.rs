//! Fan curves the daemon keeps, with real daemon and client processes on the fake
//! libnvidia-ml: a kept curve outlives the client (and the window) that set it, holds only the
//! fans (another client's fan write is refused naming it while a power-limit trial goes on),
//! hands the fans back when cleared or when the daemon stops, and comes back at the next start
//! when stored as the card's boot default (a killed daemon's journal is restored otherwise).

use common::daemon::{Daemon, wait_until};
use common::process::spawn_piped;
use common::{FakeMachine, text};

use crate::common;

/// A flat curve at 77 %: whatever the fake card's temperature, the fans run at 77 %.
const SET_77: [&str; 7] = [
    "fan", "curve", "set", "--point", "0:77", "--point", "110:77",
];

fn fans_at(machine: &FakeMachine, pct: u32) -> bool {
    machine.settings(0).fan_manual_pct == vec![Some(pct), Some(pct)]
}

#[test]
fn a_kept_curve_outlives_its_client_and_holds_only_the_fans() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let before = machine.settings(0);
    let said = daemon.ok(&machine, &SET_77);
    assert!(
        said.contains("the gputune daemon keeps the fan curve"),
        "{said}"
    );
    // The client has exited: the daemon drives the fans by itself.
    wait_until("the kept curve drives the fans", || fans_at(&machine, 77));
    let shown = daemon.ok(&machine, &["fan", "curve", "show"]);
    assert!(shown.contains("GPU 0: kept by the daemon"), "{shown}");
    assert!(shown.contains("0 °C → 77 %"), "{shown}");
    let json = daemon.ok(&machine, &["fan", "curve", "show", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).expect("show --json is JSON");
    assert_eq!(
        json["gpus"][0]["kept"],
        serde_json::Value::Bool(true),
        "{json}"
    );

    // Another client's fan write is refused, naming the kept curve.
    let stderr = daemon.refused(&machine, &["apply", "--fan-speed", "50"]);
    assert!(
        stderr.contains("held by the fan curve kept by the daemon, set by"),
        "{stderr}"
    );
    assert!(fans_at(&machine, 77));
    // ... while a power-limit trial of another client goes on beside it.
    let mut trial = spawn_piped(daemon.client(
        &machine,
        &[
            "apply",
            "--try",
            "600",
            "--baseline-s",
            "0",
            "--power-limit",
            "70%",
        ],
    ));
    trial.wait_for_line("Trying the new settings");
    assert_eq!(machine.settings(0).power_limit_mw, 315_000);
    trial.child.kill().expect("SIGKILL is sent");
    wait_until("the trial is put back", || {
        machine.settings(0).power_limit_mw == before.power_limit_mw
    });
    let _ = trial.finish();
    assert!(
        fans_at(&machine, 77),
        "the trial's end leaves the curve alone"
    );

    // Cleared: the fans go back to what they were (the driver's), nothing left journaled.
    let said = daemon.ok(&machine, &["fan", "curve", "clear"]);
    assert!(said.contains("keeps no fan curve now"), "{said}");
    assert_eq!(machine.settings(0).fan_manual_pct, before.fan_manual_pct);
    assert!(!daemon.journal(&machine, 0).exists());
    let stderr = daemon.refused(&machine, &["fan", "curve", "clear"]);
    assert!(stderr.contains("keeps no fan curve on GPU 0"), "{stderr}");

    // Set again and the daemon stops: the fans go back to the driver.
    daemon.ok(&machine, &SET_77);
    wait_until("the kept curve drives the fans", || fans_at(&machine, 77));
    assert_eq!(daemon.stop(), Some(0));
    assert_eq!(machine.settings(0).fan_manual_pct, before.fan_manual_pct);
}

#[test]
fn the_windows_curve_through_the_daemon_outlives_the_window() {
    use gputune_core::link::{LinkCommand, LinkEvent, TuneCommand};
    use gputune_formats::fan_curve::{CurvePoint, FanCurve};
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let link = daemon.open_link(&machine);
    let point = |temperature_c, speed_pct| CurvePoint {
        temperature_c,
        speed_pct,
    };
    let curve =
        FanCurve::new(vec![point(0.0, 77.0), point(110.0, 77.0)], 3.0).expect("a valid curve");
    link.send(LinkCommand::Tune(TuneCommand::SetFanCurve {
        gpu_index: 0,
        curve: Some(curve),
    }));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let said = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the window was never answered"
        );
        let notice = link
            .drain_events()
            .into_iter()
            .find_map(|event| match event {
                LinkEvent::Notice { notice, .. } => Some(notice.text().to_string()),
                _ => None,
            });
        if let Some(notice) = notice {
            break notice;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        said.contains("The gputune daemon keeps the fan curve"),
        "{said}"
    );
    wait_until("the curve drives the fans", || fans_at(&machine, 77));
    // The window closes: its connection ends, the kept curve stays.
    drop(link);
    let shown = daemon.ok(&machine, &["fan", "curve", "show"]);
    assert!(shown.contains("GPU 0: kept by the daemon"), "{shown}");
    assert!(fans_at(&machine, 77));
    assert!(
        !daemon.log_text().contains("went away during"),
        "{}",
        daemon.log_text()
    );
}

#[test]
fn a_curve_stored_as_boot_default_comes_back_at_the_next_start() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let before = machine.settings(0);
    let mut set_boot = SET_77.to_vec();
    set_boot.push("--boot");
    let said = daemon.ok(&machine, &set_boot);
    assert!(said.contains("boot default"), "{said}");
    wait_until("the kept curve drives the fans", || fans_at(&machine, 77));
    let shown = daemon.ok(&machine, &["fan", "curve", "show"]);
    assert!(shown.contains("at every daemon start"), "{shown}");

    // kill -9, then a start: the journal puts the fans back, the boot default keeps the curve.
    let (runtime, state) = (daemon.runtime_dir.clone(), daemon.state_dir.clone());
    daemon.kill();
    let daemon = Daemon::start_in(&machine, runtime.clone(), state.clone());
    wait_until("the boot default's curve drives the fans", || {
        fans_at(&machine, 77)
    });
    let log = daemon.log_text();
    assert!(
        log.contains("keeps the fan curve of the boot default"),
        "{log}"
    );
    // A reboot (SIGTERM, the runtime folder gone): kept again.
    assert_eq!(daemon.stop(), Some(0));
    assert_eq!(machine.settings(0).fan_manual_pct, before.fan_manual_pct);
    std::fs::remove_dir_all(&runtime).expect("the runtime folder is removed");
    let daemon = Daemon::start_in(&machine, runtime.clone(), state.clone());
    wait_until("the boot default's curve drives the fans", || {
        fans_at(&machine, 77)
    });

    // Cleared with --boot: the next start keeps nothing.
    daemon.ok(&machine, &["fan", "curve", "clear", "--boot"]);
    assert_eq!(machine.settings(0).fan_manual_pct, before.fan_manual_pct);
    assert_eq!(daemon.stop(), Some(0));
    let daemon = Daemon::start_in(&machine, runtime.clone(), state.clone());
    let shown = daemon.ok(&machine, &["fan", "curve", "show"]);
    assert!(shown.contains("GPU 0: no fan curve"), "{shown}");
    assert_eq!(machine.settings(0).fan_manual_pct, before.fan_manual_pct);

    // Kept without --boot, then kill -9: the next start restores the journal, keeps nothing.
    daemon.ok(&machine, &SET_77);
    wait_until("the kept curve drives the fans", || fans_at(&machine, 77));
    daemon.kill();
    assert!(fans_at(&machine, 77), "left as the killed daemon had them");
    let daemon = Daemon::start_in(&machine, runtime, state);
    assert_eq!(machine.settings(0).fan_manual_pct, before.fan_manual_pct);
    let shown = daemon.ok(&machine, &["fan", "curve", "show"]);
    assert!(shown.contains("GPU 0: no fan curve"), "{shown}");
}

#[test]
fn a_profile_with_a_curve_applied_through_the_daemon_is_kept() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    std::fs::create_dir_all(machine.config_dir().join("profiles")).expect("a profile folder");
    std::fs::write(
        machine.config_dir().join("profiles").join("cool.toml"),
        format!(
            "schema_version = 1\nname = \"Cool\"\n[card]\nuuid = \"{}\"\nname = \"NVIDIA GeForce RTX 4090\"\npci_bus_id = \"\"\n\n[power_limit]\npercent_of_default = 60.0\nwatts = 270.0\n\n[[fan_curve]]\ntemperature_c = 0.0\nspeed_pct = 77.0\n\n[[fan_curve]]\ntemperature_c = 110.0\nspeed_pct = 77.0\n",
            machine.uuid(0)
        ),
    )
    .expect("the profile is written");
    let said = daemon.ok(&machine, &["profile", "apply", "Cool"]);
    assert!(
        said.contains("the daemon keeps the profile's fan curve"),
        "{said}"
    );
    assert_eq!(machine.settings(0).power_limit_mw, 270_000);
    wait_until("the profile's curve drives the fans", || {
        fans_at(&machine, 77)
    });
    // `profile default` stores the curve with the settings: a restart keeps it again.
    let said = daemon.ok(&machine, &["profile", "default", "Cool"]);
    assert!(said.contains("keeps its fan curve"), "{said}");
    let (runtime, state) = (daemon.runtime_dir.clone(), daemon.state_dir.clone());
    assert_eq!(daemon.stop(), Some(0));
    let _daemon = Daemon::start_in(&machine, runtime, state);
    wait_until("the default's curve drives the fans", || {
        fans_at(&machine, 77)
    });
    assert_eq!(machine.settings(0).power_limit_mw, 270_000);
}

#[test]
fn without_a_daemon_a_curve_cannot_be_kept_and_the_user_is_told_how() {
    let machine = FakeMachine::new("rtx4090", "");
    assert!(machine.gputune(&["status"]).status.success());
    let before = machine.settings(0);
    let output = machine.gputune(&SET_77);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("needs the gputune daemon"), "{stderr}");
    assert!(stderr.contains("sudo gputune daemon install"), "{stderr}");
    assert_eq!(machine.settings(0), before, "nothing was written");
    assert!(!machine.journal(0).exists(), "nothing journaled");
    let output = machine.gputune(&["fan", "curve", "show"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("No gputune daemon runs here"),
        "{}",
        text(&output.stdout)
    );
}
