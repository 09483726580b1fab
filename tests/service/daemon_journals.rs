//! What puts a card back, across processes: a put-back the driver refused waits in the journal
//! and goes back before anything else is written to that card (and on its own once the driver
//! takes it again); lock files with a second name are refused; clock locks an engine without
//! the daemon set are known to the daemon; and the messages say what is true. Real gputune
//! processes on the fake libnvidia-ml, the daemon on a temporary socket.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::daemon::{Daemon, wait_until};
use common::process::spawn_piped;
use common::{FakeMachine, text};

use crate::common;
use gputune_core::folders::RECORD_DIR_ENV;
use gputune_core::tuning::state_folder::EngineJournal;
use gputune_formats::card::{ClockRangeMhz, Setting};

fn must(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: {}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// A trial of fans at 80 % whose put-back the driver refuses; returns once it ended so.
fn trial_whose_put_back_is_refused(daemon: &Daemon, machine: &FakeMachine) {
    let mut trial = spawn_piped(daemon.client(
        machine,
        &[
            "apply",
            "--try",
            "3",
            "--baseline-s",
            "0",
            "--fan-speed",
            "80",
        ],
    ));
    trial.wait_for_line("Trying the new settings");
    assert_eq!(machine.settings(0).fan_manual_pct, vec![Some(80), Some(80)]);
    machine.set_shared_faults("no_permission");
    let (_, _, stderr) = trial.finish();
    assert!(stderr.contains("only in part"), "{stderr}");
    assert!(stderr.contains("The journal is kept"), "{stderr}");
    assert_eq!(
        machine.settings(0).fan_manual_pct,
        vec![Some(80), Some(80)],
        "the driver refused the put-back"
    );
    assert!(daemon.journal(machine, 0).exists(), "the journal is kept");
}

/// A one-second trial of 70 %, no baseline.
const SHORT_TRIAL: [&str; 7] = [
    "apply",
    "--try",
    "1",
    "--baseline-s",
    "0",
    "--power-limit",
    "70%",
];

#[test]
fn a_refused_put_back_goes_back_before_anything_else_is_written_to_the_card() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    let before = machine.settings(0);
    assert_eq!(before.fan_manual_pct, vec![None, None]);
    trial_whose_put_back_is_refused(&daemon, &machine);

    // While the driver still refuses, a new trial is refused and the journal stays.
    let refused = daemon
        .client(&machine, &SHORT_TRIAL)
        .output()
        .expect("the client runs");
    assert!(!refused.status.success(), "{}", text(&refused.stderr));
    let said = text(&refused.stderr);
    assert!(
        said.contains("still waits for gputune to put back"),
        "{said}"
    );
    assert!(daemon.journal(&machine, 0).exists(), "the journal is kept");

    // The driver takes writes again: the next trial first puts the fans back.
    machine.set_shared_faults("");
    let writes_before = machine.write_log().len();
    let trial = daemon
        .client(&machine, &SHORT_TRIAL)
        .output()
        .expect("the client runs");
    must(&trial, "the next trial");
    assert_eq!(
        machine.settings(0),
        before,
        "fans automatic, the trial reverted"
    );
    assert!(!daemon.journal(&machine, 0).exists());
    let writes: Vec<Setting> = machine.write_log()[writes_before..]
        .iter()
        .filter(|write| write.result_code == 0)
        .map(|write| write.setting)
        .collect();
    let fans_back = writes
        .iter()
        .position(|setting| matches!(setting, Setting::FanAutomatic { .. }));
    let trial_write = writes
        .iter()
        .position(|setting| matches!(setting, Setting::PowerLimit { .. }));
    assert!(
        fans_back.is_some() && fans_back < trial_write,
        "the fans go back before the trial writes: {writes:?}"
    );
}

#[test]
fn a_refused_put_back_is_tried_again_without_any_client() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    trial_whose_put_back_is_refused(&daemon, &machine);
    machine.set_shared_faults("");
    wait_until("the daemon puts the fans back by itself", || {
        machine.settings(0).fan_manual_pct == vec![None, None]
    });
    wait_until("and removes the journal", || {
        !daemon.journal(&machine, 0).exists()
    });
    // The daemon says so (its log line may come a moment after the journal goes).
    wait_until("the daemon says it put them back", || {
        daemon
            .log_text()
            .contains("Put back on GPU 0 what an earlier put-back could not write")
    });
}

/// A file named `lock-<uuid>.lock` in `folder` that is a second name of `victim`.
fn plant_hard_link(folder: &Path, machine: &FakeMachine, victim: &Path) -> PathBuf {
    std::fs::create_dir_all(folder).expect("the folder is made");
    std::fs::write(victim, "precious").expect("the victim is written");
    let lock = folder.join(format!("lock-{}.lock", machine.uuid(0)));
    std::fs::hard_link(victim, &lock).expect("the hard link is made");
    lock
}

#[test]
fn a_lock_file_with_a_second_name_is_refused_and_never_written() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let victim = machine.state_dir().with_file_name("victim");
    let lock = plant_hard_link(&machine.state_dir(), &machine, &victim);

    // Without the daemon.
    let output = machine.gputune(&["apply", "--power-limit", "300W"]);
    assert!(!output.status.success());
    let said = text(&output.stderr);
    assert!(said.contains("2 hard links"), "{said}");
    assert!(said.contains(&lock.display().to_string()), "{said}");
    assert!(!said.contains("nobody"), "{said}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap_or_default(),
        "precious"
    );
    assert!(machine.write_log().is_empty(), "nothing was written");

    // The daemon's state folder: it refuses to start rather than write through the link.
    let base = machine.state_dir().with_file_name("daemon");
    let (runtime, state) = (base.join("run"), base.join("state"));
    let daemon_victim = base.join("victim");
    plant_hard_link(&runtime.join("state"), &machine, &daemon_victim);
    let output = machine
        .command(&[
            "daemon",
            "--runtime-dir",
            &runtime.display().to_string(),
            "--state-dir",
            &state.display().to_string(),
            "--driver-wait-s",
            "0",
        ])
        .env("GPUTUNE_SOCKET", runtime.join("gputune.sock"))
        .stdin(Stdio::null())
        .output()
        .expect("the daemon runs");
    assert!(!output.status.success());
    let said = text(&output.stderr);
    assert!(said.contains("2 hard links"), "{said}");
    assert_eq!(
        std::fs::read_to_string(&daemon_victim).unwrap_or_default(),
        "precious"
    );
}

#[test]
fn an_unusable_lock_file_is_said_as_what_it_is() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let lock = machine
        .state_dir()
        .join(format!("lock-{}.lock", machine.uuid(0)));
    std::fs::create_dir_all(&lock).expect("a folder where the lock file goes");
    let output = machine.gputune(&["apply", "--power-limit", "300W"]);
    assert!(!output.status.success());
    let said = text(&output.stderr);
    assert!(!said.contains("nobody"), "{said}");
    assert!(said.contains("cannot be locked"), "{said}");
    assert!(said.contains(&lock.display().to_string()), "{said}");
}

/// `gputune ARGS` without the daemon, recording clock locks where the daemon looks (as an
/// engine running as root does by default: /run/gputune/state).
fn in_process_for(daemon_runtime: &Path, machine: &FakeMachine, arguments: &[&str]) -> Output {
    machine
        .command(arguments)
        .env(RECORD_DIR_ENV, daemon_runtime.join("state"))
        .output()
        .expect("gputune runs")
}

fn locked(min_mhz: u32, max_mhz: u32) -> Option<ClockRangeMhz> {
    Some(ClockRangeMhz { min_mhz, max_mhz })
}

#[test]
fn clock_locks_set_without_the_daemon_are_restored_by_the_daemon() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let base = machine.state_dir().with_file_name("daemon");
    let (runtime, state) = (base.join("run"), base.join("state"));

    // Set before the daemon starts.
    let kept = in_process_for(
        &runtime,
        &machine,
        &["apply", "--lock-gpu-clocks", "210,2520"],
    );
    must(&kept, "the in-process apply");
    assert_eq!(machine.settings(0).gpu_locked_clocks, locked(210, 2520));
    let daemon = Daemon::start_in(&machine, runtime.clone(), state);
    let trial_arguments = [
        "apply",
        "--try",
        "1",
        "--baseline-s",
        "0",
        "--lock-gpu-clocks",
        "300,2000",
    ];
    let trial = daemon
        .client(&machine, &trial_arguments)
        .output()
        .expect("the trial runs");
    must(&trial, "the daemon's trial");
    assert_eq!(
        machine.settings(0).gpu_locked_clocks,
        locked(210, 2520),
        "restored, not reset: {}",
        text(&trial.stderr)
    );
    assert!(!text(&trial.stderr).contains("not known"));
    assert!(
        runtime
            .join("state")
            .join(format!("record-{}.json", machine.uuid(0)))
            .exists(),
        "recorded where the daemon looks"
    );

    // Set while the daemon runs, by a gputune that does not use it.
    let kept = in_process_for(
        &runtime,
        &machine,
        &["apply", "--lock-gpu-clocks", "240,2400"],
    );
    must(&kept, "the second in-process apply");
    let trial = daemon
        .client(&machine, &trial_arguments)
        .output()
        .expect("the trial runs");
    must(&trial, "the daemon's second trial");
    assert_eq!(
        machine.settings(0).gpu_locked_clocks,
        locked(240, 2400),
        "restored, not reset: {}",
        text(&trial.stderr)
    );
}

#[test]
fn a_run_that_resets_an_unknown_clock_lock_says_what_is_true() {
    // A fanless H100 that nobody has locked since the driver started.
    let machine = FakeMachine::for_processes("datacenter-fanless", "training");
    let daemon = Daemon::start(&machine);
    let folder = machine.config_dir().join("profiles");
    std::fs::create_dir_all(&folder).expect("a profile folder");
    std::fs::write(
        folder.join("slow.toml"),
        format!(
            "schema_version = 1\nname = \"Slow\"\n[card]\nuuid = \"{}\"\nname = \"NVIDIA H100 80GB HBM3\"\npci_bus_id = \"\"\n\n[power_limit]\npercent_of_default = 71.43\nwatts = 500.0\n\n[gpu_clock_lock]\nmin_mhz = 500\nmax_mhz = 1500\n",
            machine.uuid(0)
        ),
    )
    .expect("the profile is written");
    let run = daemon
        .client(&machine, &["run", "--profile", "Slow", "--", "true"])
        .output()
        .expect("the run runs");
    must(&run, "the run");
    let said = text(&run.stderr);
    assert!(!said.contains("set outside gputune"), "{said}");
    assert!(said.contains("no earlier lock on record"), "{said}");
    assert!(
        said.contains("reset to the driver's default range (unlocked)"),
        "{said}"
    );
    assert_eq!(machine.settings(0).gpu_locked_clocks, None, "{said}");
    assert_eq!(machine.settings(0).power_limit_mw, 700_000, "{said}");
}

#[test]
fn engines_without_the_daemon_record_clock_locks_in_the_daemon_s_folder() {
    assert_eq!(
        Path::new(gputune_core::daemon::DEFAULT_RUNTIME_DIR).join("state"),
        Path::new(gputune_core::tuning::state_folder::SHARED_RECORD_DIR)
    );
}

/// Writes, in GPU 0's name in `folder`, a journal that names another card: put its power
/// limit back to 200 W. Returns the file.
fn plant_foreign_journal(folder: &Path, machine: &FakeMachine) -> PathBuf {
    std::fs::create_dir_all(folder).expect("the folder is made");
    let foreign = gputune_formats::files::GpuJournal::new(
        gputune_formats::card::BackendKind::Nvml,
        "GPU-00000000-0000-0000-0000-0000000000aa",
        1,
        vec![Setting::PowerLimit {
            power_limit_mw: 200_000,
        }],
        "a gputune that crashed",
    );
    let path = folder.join(format!("journal-{}.json", machine.uuid(0)));
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&foreign).expect("the journal serializes"),
    )
    .expect("the journal is written");
    path
}

/// The files of `folder` set aside from `journal` (`<name>.set-aside-<ms>`).
fn set_aside_from(folder: &Path, journal: &Path) -> Vec<PathBuf> {
    let name = journal
        .file_name()
        .and_then(|name| name.to_str())
        .expect("a journal's name");
    std::fs::read_dir(folder)
        .expect("the folder lists")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|file| file.to_str())
                .is_some_and(|file| file.starts_with(&format!("{name}.set-aside-")))
        })
        .collect()
}

/// No write the fake driver saw put a power limit of 200 W.
fn never_wrote_200_w(machine: &FakeMachine) -> bool {
    !machine.write_log().iter().any(|write| {
        write.setting
            == Setting::PowerLimit {
                power_limit_mw: 200_000,
            }
    })
}

#[test]
fn a_journal_in_one_card_s_name_that_names_another_is_set_aside_and_never_applied() {
    // Without the daemon: read at the start of a command, and when a trial takes the card.
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let journal = plant_foreign_journal(&machine.state_dir(), &machine);
    let status = machine.gputune(&["status"]);
    must(&status, "status");
    let said = text(&status.stderr);
    assert!(!said.contains("kept for when the card is back"), "{said}");
    assert!(said.contains("names GPU GPU-00000000"), "{said}");
    assert!(said.contains("applied to neither card"), "{said}");
    let trial = machine.gputune(&SHORT_TRIAL);
    must(&trial, "the trial");
    assert!(never_wrote_200_w(&machine), "{:?}", machine.write_log());
    assert_eq!(machine.power_limit_mw(0), 450_000);
    assert!(!journal.exists(), "it no longer waits in GPU 0's name");
    let aside = set_aside_from(&machine.state_dir(), &journal);
    assert_eq!(aside.len(), 1, "kept aside, not deleted: {aside:?}");
    let kept = std::fs::read_to_string(&aside[0]).expect("the set-aside file reads");
    assert!(kept.contains("200000"), "{kept}");

    // The daemon: at its start (and its trials on GPU 0 never write it either).
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let base = machine.state_dir().with_file_name("daemon");
    let (runtime, state) = (base.join("run"), base.join("state"));
    let journal = plant_foreign_journal(&runtime.join("state"), &machine);
    let daemon = Daemon::start_in(&machine, runtime.clone(), state);
    wait_until("the daemon says it set the journal aside", || {
        daemon.log_text().contains("applied to neither card")
    });
    let trial = daemon
        .client(&machine, &SHORT_TRIAL)
        .output()
        .expect("the client runs");
    must(&trial, "the daemon's trial");
    assert!(never_wrote_200_w(&machine), "{:?}", machine.write_log());
    assert_eq!(machine.power_limit_mw(0), 450_000);
    assert!(!journal.exists());
    assert_eq!(set_aside_from(&runtime.join("state"), &journal).len(), 1);
    assert!(!daemon.log_text().contains("kept for when the card is back"));
}
