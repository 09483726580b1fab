//! The temperature hold through the daemon, with real daemon and client processes on the fake
//! libnvidia-ml (`gputune hold-temp`): set by a command that exits, the daemon moves the power
//! limit by itself; a plain apply of the limit is refused naming the hold; an absurd hold is
//! refused with a message; stopping the daemon puts the limit back, and a hold stored as the
//! card's boot default is kept again from the next start until cleared; a boot default that
//! cannot be stored is said as such, the hold running now.

use common::FakeMachine;
use common::daemon::{Daemon, wait_until};

use crate::common;

#[test]
fn a_hold_set_by_a_command_is_kept_by_the_daemon_and_comes_back_from_the_boot_default() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    // The fake card trains at about 70 °C: a hold at 60 °C lowers its limit.
    let said = daemon.ok(
        &machine,
        &[
            "hold-temp",
            "set",
            "--max-c",
            "60",
            "--power",
            "60%..100%",
            "--boot-default",
        ],
    );
    assert!(
        said.contains("holds it at or below 60 °C with a power limit of 270 W to 450 W"),
        "{said}"
    );
    wait_until("the daemon lowers the limit with no client", || {
        machine.power_limit_mw(0) < 450_000
    });
    let shown = daemon.ok(&machine, &["hold-temp", "show"]);
    assert!(shown.contains("GPU 0: held at or below 60 °C"), "{shown}");
    assert!(shown.contains("at every daemon start"), "{shown}");
    let json = daemon.ok(&machine, &["hold-temp", "show", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).expect("show --json is JSON");
    assert_eq!(
        json["gpus"][0]["hold"]["hold"]["max_temperature_c"], 60,
        "{json}"
    );
    assert_eq!(json["gpus"][0]["hold"]["put_back_mw"], 450_000, "{json}");
    let status = daemon.ok(&machine, &["status"]);
    assert!(
        status.contains("Temp hold    at or below 60 °C, power limit 270 W to 450 W: "),
        "{status}"
    );

    let refused = daemon.refused(&machine, &["apply", "--power-limit", "80%"]);
    assert!(
        refused.contains("gputune hold-temp clear --gpu 0"),
        "{refused}"
    );
    let refused = daemon.refused(&machine, &["hold-temp", "set", "--max-c", "500"]);
    assert!(refused.contains("outside 40-"), "{refused}");
    let refused = daemon.refused(&machine, &["hold-temp", "set", "--max-c", "NaN"]);
    assert!(refused.contains("--max-c NaN"), "{refused}");

    // Stopped, the daemon puts the limit back; started, the boot default holds again.
    let folders = daemon.folders();
    assert_eq!(daemon.stop(), Some(0));
    assert_eq!(machine.power_limit_mw(0), 450_000);
    let daemon = folders.start(&machine);
    let shown = daemon.ok(&machine, &["hold-temp", "show"]);
    assert!(shown.contains("GPU 0: held at or below 60 °C"), "{shown}");
    let said = daemon.ok(&machine, &["hold-temp", "clear", "--boot-default"]);
    assert!(said.contains("holds no temperature now"), "{said}");
    let shown = daemon.ok(&machine, &["hold-temp", "show"]);
    assert!(shown.contains("GPU 0: no temperature hold"), "{shown}");
    assert!(!shown.contains("at every daemon start"), "{shown}");
}

#[test]
fn a_boot_default_that_cannot_be_stored_says_the_hold_runs_now_but_was_not_stored() {
    use std::os::unix::fs::PermissionsExt;
    let machine = FakeMachine::new("rtx4090", "");
    // The daemon's defaults folder cannot be made: a file is where it goes.
    let state = machine.state_dir().with_file_name("daemon").join("state");
    std::fs::create_dir_all(&state).expect("the state folder");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("private");
    std::fs::write(state.join("defaults"), "not a folder").expect("the file");
    let daemon = Daemon::start(&machine);
    let said = daemon.refused(
        &machine,
        &["hold-temp", "set", "--max-c", "60", "--boot-default"],
    );
    assert!(
        said.contains("The daemon holds GPU 0 at or below 60 °C")
            && said.contains("now, but could not store it as the card's boot default")
            && said.contains("ends when the daemon stops"),
        "{said}"
    );
    // As said: it holds it now, and not from the next start.
    let shown = daemon.ok(&machine, &["hold-temp", "show"]);
    assert!(shown.contains("GPU 0: held at or below 60 °C"), "{shown}");
    assert!(!shown.contains("at every daemon start"), "{shown}");
}
