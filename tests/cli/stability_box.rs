//! `gputune stability --together` against the fake libnvidia-ml's 8-GPU box: a power cut
//! mid-check (the process killed, the machine down: every card lost) and the reboot (a fresh
//! machine, a new boot, the same state folder), after which `gputune status` says the box went
//! down; and the same through the daemon, whose journal outlives the boot's runtime folder.
//! (The box check itself is tested in the core's `stability_box.rs`.)

use common::FakeMachine;
use common::daemon::{Daemon, wait_until};
use common::process::spawn_piped;
use gputune_formats::reports::box_check::BoxJournal;

use crate::common;

#[test]
fn a_power_cut_mid_box_check_is_said_by_status_after_the_reboot() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let journal = machine.state_dir().join("box-check.json");
    // The power cut: the machine goes down mid-check (nothing runs on: kill -9), every card lost.
    let mut running =
        spawn_piped(machine.command(&["stability", "--together", "--duration-s", "60", "--force"]));
    running.wait_for_line("Ctrl-C stops it");
    wait_until("the box-check journal", || journal.exists());
    // The cards as they were, up: what the reboot brings back.
    let fresh = machine.state();
    let _ = running.child.kill();
    let _ = running.child.wait();
    let mut state = machine.state();
    state.machine.go_down("the simulated power supply tripped");
    nvidia_ml_fake::save_state(machine.state_path(), &state).expect("the state is saved");
    let lost = machine.gputune(&["status", "--gpu", "0"]);
    assert!(
        !lost.status.success(),
        "a machine that went down has no card"
    );

    // The reboot: a fresh machine and a new boot; the same state folder.
    nvidia_ml_fake::save_state(machine.state_path(), &fresh).expect("the fresh state is saved");
    let mut left: BoxJournal =
        serde_json::from_slice(&std::fs::read(&journal).expect("the journal is kept"))
            .expect("the journal reads");
    left.boot_id = Some("the boot before the power cut".to_string());
    std::fs::write(&journal, serde_json::to_vec(&left).expect("it writes")).expect("written");
    let status = machine.gputune(&["status", "--gpu", "0"]);
    let said = common::text(&status.stderr);
    assert!(status.status.success(), "{said}");
    assert!(
        said.contains("The box went down") && said.contains("GPU 0, GPU 1"),
        "{said}"
    );
    assert!(said.contains("suspect the power supply"), "{said}");
    assert!(!journal.exists(), "said once, then moved aside");
}

/// Marks the journal at `path` as one of a boot before this one (the fake machine's reboot
/// keeps the test's boot id).
fn from_the_boot_before(path: &std::path::Path) {
    let mut left: BoxJournal =
        serde_json::from_slice(&std::fs::read(path).expect("the journal is kept"))
            .expect("the journal reads");
    left.boot_id = Some("the boot before the power cut".to_string());
    std::fs::write(path, serde_json::to_vec(&left).expect("it writes")).expect("written");
}

#[test]
fn the_daemon_says_a_power_cut_mid_box_check_after_a_reboot_that_emptied_its_runtime_folder() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let base = machine.state_dir().with_file_name("daemon");
    let state_dir = base.join("state");
    let daemon = Daemon::start_in(&machine, base.join("run-before"), state_dir.clone());
    let journal = state_dir.join("box-check").join("box-check.json");
    let mut running = spawn_piped(daemon.client(
        &machine,
        &["stability", "--together", "--duration-s", "60", "--force"],
    ));
    running.wait_for_line("Ctrl-C stops it");
    wait_until("the box-check journal in the state folder", || {
        journal.exists()
    });
    // The power cut: the daemon dies with the machine (kill -9), and so does its client.
    daemon.kill();
    let _ = running.child.kill();
    let _ = running.child.wait();

    // The reboot: a new, empty runtime folder (tmpfs is emptied at boot); the state folder as it was.
    from_the_boot_before(&journal);
    let daemon = Daemon::start_in(&machine, base.join("run-after"), state_dir);
    let status = daemon
        .client(&machine, &["status", "--gpu", "0"])
        .output()
        .expect("status runs");
    let said = common::text(&status.stderr);
    assert!(status.status.success(), "{said}");
    assert!(
        said.contains("The box went down") && said.contains("suspect the power supply"),
        "{said}\nthe daemon's log:\n{}",
        daemon.log_text()
    );
    assert!(!journal.exists(), "said once, then moved aside");
}
