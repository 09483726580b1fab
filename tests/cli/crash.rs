//! A GPU crash (an Xid) on a tuned card, through the daemon and the CLI on the fake
//! libnvidia-ml, beside a fan curve the daemon keeps: whatever held the clocks — a plain
//! apply, a trial, a scan, a check — the clock offset and lock go back, the kept curve goes on
//! driving the fans, and the CLI says the crash's one sentence.

use common::daemon::{Daemon, wait_until};
use common::process::spawn_piped;
use common::{FakeMachine, text};

use crate::common;

/// A flat curve: whatever the fake card's temperature, the fans run at 77 %.
const KEEP_77: [&str; 7] = [
    "fan", "curve", "set", "--point", "0:77", "--point", "110:77",
];

fn fans_at_77(machine: &FakeMachine) -> bool {
    machine.settings(0).fan_manual_pct == vec![Some(77), Some(77)]
}

fn at_stock_clocks(machine: &FakeMachine) -> bool {
    let settings = machine.settings(0);
    settings.gpu_clock_offset_mhz == 0 && settings.gpu_locked_clocks.is_none()
}

/// What a tuned card's clocks are set to before the crash: locked, and offset +120 MHz.
const TUNED_CLOCKS: [&str; 4] = ["--lock-gpu-clocks", "210,2520", "--gpu-clock-offset", "120"];

/// The arguments of `command` with the tuned clocks after them.
fn tuning<'a>(command: &[&'a str]) -> Vec<&'a str> {
    [command, &TUNED_CLOCKS[..]].concat()
}

/// A card running a training job, with a daemon that keeps a flat 77 % fan curve on it.
fn daemon_keeping_a_curve() -> (FakeMachine, Daemon) {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = daemon_keeping_a_curve_on(&machine);
    (machine, daemon)
}

/// A daemon on `machine` that keeps a flat 77 % fan curve on GPU 0.
fn daemon_keeping_a_curve_on(machine: &FakeMachine) -> Daemon {
    let daemon = Daemon::start(machine);
    daemon.ok(machine, &KEEP_77);
    wait_until("the kept curve drives the fans", || fans_at_77(machine));
    daemon
}

/// The driver reports Xid 13 now (once, to the daemon's event set), as an unstable offset
/// makes it; waits until the offset and lock are back.
fn crash(machine: &FakeMachine) {
    machine.set_shared_faults("xid_after_ms=0");
    wait_until("the offset and lock are put back", || {
        at_stock_clocks(machine)
    });
    machine.set_shared_faults("");
}

/// The crash's sentence, as the CLI says it: what went back, and the fans kept.
fn says_the_crash(said: &str) -> bool {
    said.contains("GPU 0 reported Xid 13 (a graphics engine exception")
        && said.contains("the GPU clock offset and lock were put back")
        && said.contains("fans kept (the fan curve goes on)")
}

/// After the crash: the kept curve still drives the fans a few readings later, `fan curve
/// show` says so (what it says is returned), and the clocks stay at stock.
fn curve_still_kept(daemon: &Daemon, machine: &FakeMachine) -> String {
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(fans_at_77(machine), "{:?}", machine.settings(0));
    assert!(at_stock_clocks(machine), "{:?}", machine.settings(0));
    let shown = daemon.ok(machine, &["fan", "curve", "show"]);
    assert!(shown.contains("GPU 0: kept by the daemon"), "{shown}");
    shown
}

#[test]
fn an_xid_after_a_plain_apply_puts_back_the_offset_and_lock_and_keeps_the_fan_curve() {
    let (machine, daemon) = daemon_keeping_a_curve();
    daemon.ok(&machine, &tuning(&["apply"]));
    assert!(
        machine
            .write_log()
            .iter()
            .any(|write| format!("{write:?}").contains("120")),
        "the offset was written"
    );
    crash(&machine);
    let shown = curve_still_kept(&daemon, &machine);
    eprintln!("fan curve show:\n{shown}");
    assert!(says_the_crash(&shown), "{shown}");
    assert!(shown.contains("at +120 MHz"), "{shown}");

    // The next command says it: `status`, as text and JSON.
    let status = daemon.ok(&machine, &["status"]);
    eprintln!("status:\n{status}");
    assert!(status.contains("  Crash        "), "{status}");
    assert!(says_the_crash(&status), "{status}");
    let json = daemon.ok(&machine, &["status", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).expect("status --json is JSON");
    let critical = &json["gpus"][0]["last_critical"];
    assert_eq!(critical["critical"]["xid"], 13, "{json}");
    assert!(
        says_the_crash(critical["sentence"].as_str().unwrap_or_default()),
        "{critical}"
    );
    assert_eq!(
        critical["put_back"][1],
        // Each compute P-state's offset on its own: P2's is the one training ran at.
        serde_json::json!({"type": "gpu_clock_offset_at", "pstate": 2, "offset_mhz": 0}),
        "{critical}"
    );
    // The kept curve's journal names the fans alone: nothing of the clocks waits.
    let journal = std::fs::read_to_string(daemon.journal(&machine, 0)).unwrap_or_default();
    assert!(!journal.contains("clock"), "{journal}");
    let log = daemon.log_text();
    assert!(log.contains("GPU 0 reported Xid 13"), "{log}");
}

#[test]
fn an_xid_during_a_trial_ends_it_and_says_so_and_keeps_the_fan_curve() {
    let (machine, daemon) = daemon_keeping_a_curve();
    let mut trial = spawn_piped(daemon.client(
        &machine,
        &tuning(&["apply", "--try", "600", "--baseline-s", "0"]),
    ));
    trial.wait_for_line("Trying the new settings");
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 120);
    crash(&machine);
    let (status, _, stderr) = trial.finish();
    eprintln!("the trial said:\n{stderr}");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(says_the_crash(&stderr), "{stderr}");
    assert!(
        stderr.contains("ended a trial of gputune apply"),
        "{stderr}"
    );
    assert!(stderr.contains("The trial ended."), "{stderr}");
    curve_still_kept(&daemon, &machine);
}

#[test]
fn an_xid_during_a_scan_ends_its_session_and_the_scan_says_so() {
    let (machine, daemon) = daemon_keeping_a_curve();
    let mut scan =
        spawn_piped(daemon.client(&machine, &["scan", "--step-s", "2", "--confirm-s", "60"]));
    scan.wait_for_line("Ctrl-C stops it");
    wait_until("a step locks the clock", || {
        machine.settings(0).gpu_locked_clocks.is_some()
    });
    crash(&machine);
    let (_, stdout, stderr) = scan.finish();
    let said = format!("{stdout}{stderr}");
    eprintln!("the scan said:\n{said}");
    assert!(said.contains("GPU 0 reported Xid 13"), "{said}");
    assert!(
        said.contains("ended an undervolt scan of gputune scan"),
        "{said}"
    );
    assert!(said.contains("fans kept (the fan curve goes on)"), "{said}");
    curve_still_kept(&daemon, &machine);
}

#[test]
fn an_xid_during_a_check_ends_its_session_and_the_check_says_so() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    // A profile that locks the clock and sets a mild offset, saved with the card put back.
    for arguments in [
        vec![
            "apply",
            "--lock-gpu-clocks",
            "210,2520",
            "--gpu-clock-offset",
            "15",
        ],
        vec!["profile", "save", "Locked"],
        vec!["apply", "--reset-gpu-clocks", "--gpu-clock-offset", "0"],
    ] {
        let output = machine.gputune(&arguments);
        assert!(
            output.status.success(),
            "{arguments:?}: {}",
            text(&output.stderr)
        );
    }
    let daemon = daemon_keeping_a_curve_on(&machine);
    let mut check = spawn_piped(daemon.client(
        &machine,
        &["stability", "--profile", "Locked", "--duration-s", "120"],
    ));
    check.wait_for_line("Ctrl-C stops it");
    wait_until("the profile is on the card", || {
        let settings = machine.settings(0);
        settings.gpu_clock_offset_mhz == 15 && settings.gpu_locked_clocks.is_some()
    });
    crash(&machine);
    let (status, _, stderr) = check.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(says_the_crash(&stderr), "{stderr}");
    assert!(
        stderr.contains("ended a stability check of gputune stability"),
        "{stderr}"
    );
    curve_still_kept(&daemon, &machine);
}

#[test]
fn a_fan_trial_listening_when_a_plain_offset_crashes_says_so_and_goes_on() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    daemon.ok(&machine, &tuning(&["apply"]));
    let mut trial = spawn_piped(daemon.client(
        &machine,
        &[
            "apply",
            "--try",
            "600",
            "--baseline-s",
            "0",
            "--fan-speed",
            "80",
        ],
    ));
    trial.wait_for_line("Trying the new settings");
    crash(&machine);
    // The trial holds the fans only: it goes on, and says the crash as it arrives.
    trial.wait_for_line("GPU 0 reported Xid 13");
    let said = trial.stderr.join("\n");
    assert!(said.contains("gputune: error: "), "{said}");
    assert!(
        said.contains("the GPU clock offset and lock were put back"),
        "{said}"
    );
    assert_eq!(
        machine.settings(0).fan_manual_pct,
        vec![Some(80), Some(80)],
        "the tried fans go on"
    );
    trial.signal("INT");
    let (status, _, stderr) = trial.finish();
    assert!(stderr.contains("Trial stopped early"), "{stderr}");
    assert!(status.code().is_some(), "{stderr}");
    assert_eq!(machine.settings(0).fan_manual_pct, vec![None, None]);
    assert!(at_stock_clocks(&machine));
}
