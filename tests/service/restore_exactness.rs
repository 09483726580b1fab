//! On a tuned card (a power limit, both clock locks, both offsets, manual fans), every way a
//! session can end puts back exactly what was there: trials that time out, are stopped or
//! whose client is killed; runs that succeed, fail, cannot start, are stopped or killed; the
//! window's fan curve and a trial inside it; the daemon stopped or killed mid-trial; and the
//! same without a daemon. Prints the count for docs/architecture.md.

use std::process::Output;
use std::time::{Duration, Instant};

use common::daemon::{Daemon, TUNE, trial_arguments, wait_until, window_options};
use common::process::spawn_piped;
use common::{FakeMachine, text};

use crate::common;
use gputune_core::device::sim::SimSettings;
use gputune_core::link::{Link, LinkCommand, LinkEvent, TuneCommand};
use gputune_core::service::client::SocketChoice;
use gputune_formats::fan_curve::FanCurve;

/// A profile "Everything": every control otherwise, and a fan curve at full speed.
fn write_profile(machine: &FakeMachine) {
    let folder = machine.config_dir().join("profiles");
    std::fs::create_dir_all(&folder).expect("a profile folder");
    std::fs::write(
        folder.join("everything.toml"),
        format!(
            "schema_version = 1\nname = \"Everything\"\ngpu_clock_offset_mhz = 0\nmemory_clock_offset_mhz = 0\n\
             gpu_clock_lock = {{ min_mhz = 300, max_mhz = 2000 }}\nmemory_clock_lock = {{ min_mhz = 405, max_mhz = 5001 }}\n\
             [card]\nuuid = \"{}\"\nname = \"NVIDIA GeForce RTX 4090\"\npci_bus_id = \"\"\n\n\
             [power_limit]\npercent_of_default = 70.0\nwatts = 315.0\n\n\
             [[fan_curve]]\ntemperature_c = 0.0\nspeed_pct = 100.0\n\n[[fan_curve]]\ntemperature_c = 110.0\nspeed_pct = 100.0\n",
            machine.uuid(0)
        ),
    )
    .expect("the profile is written");
}

fn must(output: Output, what: &str) {
    assert!(output.status.success(), "{what}: {}", text(&output.stderr));
}

/// Counts endings, and says which were not exact.
struct Tally {
    exact: usize,
    total: usize,
    wrong: Vec<String>,
}

impl Tally {
    fn check(&mut self, ending: &str, machine: &FakeMachine, tuned: &SimSettings) {
        // Put-backs may still be arriving (a killed client's): give them a moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        while machine.settings(0) != *tuned && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.total += 1;
        let now = machine.settings(0);
        if now == *tuned {
            self.exact += 1;
        } else {
            self.wrong
                .push(format!("{ending}: {now:?} instead of {tuned:?}"));
        }
    }
}

/// Waits for a link event that satisfies `wanted`.
fn wait_for_link(link: &Link, wanted: impl Fn(&LinkEvent) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if link.drain_events().iter().any(&wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "the link never said it");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn every_ending_of_a_session_restores_a_tuned_card_exactly() {
    let machine = FakeMachine::new("rtx4090", "");
    write_profile(&machine);
    let mut tally = Tally {
        exact: 0,
        total: 0,
        wrong: Vec::new(),
    };

    // Through the daemon.
    let mut daemon = Daemon::start(&machine);
    must(
        daemon.client(&machine, &TUNE).output().expect("runs"),
        "tune",
    );
    let tuned = machine.settings(0);
    must(
        daemon
            .client(&machine, &trial_arguments("1"))
            .output()
            .expect("runs"),
        "trial",
    );
    tally.check("trial, time up", &machine, &tuned);
    for (signal, ending) in [
        ("INT", "trial, Ctrl-C"),
        ("TERM", "trial, SIGTERM"),
        ("KILL", "trial, client killed"),
    ] {
        let mut running = spawn_piped(daemon.client(&machine, &trial_arguments("600")));
        running.wait_for_line("Trying the new settings");
        running.signal(signal);
        let _ = running.finish();
        tally.check(ending, &machine, &tuned);
    }
    for (command, ending) in [
        (vec!["true"], "run, command succeeds"),
        (vec!["sh", "-c", "exit 3"], "run, command fails"),
        (vec!["/no/such/program"], "run, command cannot start"),
    ] {
        let mut arguments = vec!["run", "--profile", "Everything", "--"];
        arguments.extend(command);
        let _ = daemon.client(&machine, &arguments).output().expect("runs");
        tally.check(ending, &machine, &tuned);
    }
    for (signal, ending) in [("TERM", "run, SIGTERM"), ("KILL", "run, gputune killed")] {
        let mut running = spawn_piped(daemon.client(
            &machine,
            &["run", "--profile", "Everything", "--", "sleep", "2"],
        ));
        running.wait_for_line("applied the profile");
        running.signal(signal);
        let _ = running.finish();
        tally.check(ending, &machine, &tuned);
    }

    // The window's fan curve through the daemon is kept after the window closes (issue 17),
    // until it is cleared; a trial from the window beside it, reverted.
    let options = window_options(&machine, SocketChoice::Path(daemon.socket.clone()));
    let link = Link::spawn(options.clone(), 500, || {}).expect("the link starts");
    wait_for_link(&link, |event| matches!(event, LinkEvent::Connected { .. }));
    link.send(LinkCommand::Tune(TuneCommand::SetFanCurve {
        gpu_index: 0,
        curve: Some(FanCurve::default()),
    }));
    wait_until("the window's curve drives the fans", || {
        machine.settings(0).fan_manual_pct != tuned.fan_manual_pct
    });
    drop(link);
    std::thread::sleep(Duration::from_millis(500));
    assert_ne!(
        machine.settings(0).fan_manual_pct,
        tuned.fan_manual_pct,
        "the daemon keeps the window's curve after it closes"
    );
    daemon.ok(&machine, &["fan", "curve", "clear"]);
    tally.check(
        "kept fan curve set by the window, cleared",
        &machine,
        &tuned,
    );
    let link = Link::spawn(options, 500, || {}).expect("the link starts");
    wait_for_link(&link, |event| matches!(event, LinkEvent::Connected { .. }));
    link.send(LinkCommand::Tune(TuneCommand::SetFanCurve {
        gpu_index: 0,
        curve: Some(FanCurve::default()),
    }));
    link.send(LinkCommand::Tune(TuneCommand::StartTrial {
        gpu_index: 0,
        settings: vec![gputune_formats::card::Setting::PowerLimit {
            power_limit_mw: 300_000,
        }],
        duration_s: 600,
    }));
    wait_until("the window's trial is on", || {
        machine.settings(0).power_limit_mw == 300_000
    });
    link.send(LinkCommand::Tune(TuneCommand::RevertTrial { gpu_index: 0 }));
    wait_until("the window's trial is reverted", || {
        machine.settings(0).power_limit_mw == tuned.power_limit_mw
    });
    link.send(LinkCommand::Tune(TuneCommand::SetFanCurve {
        gpu_index: 0,
        curve: None,
    }));
    wait_until("the kept curve is cleared from the window", || {
        machine.settings(0).fan_manual_pct == tuned.fan_manual_pct
    });
    drop(link);
    tally.check(
        "window trial reverted beside the kept curve, curve cleared",
        &machine,
        &tuned,
    );

    // The daemon itself going away mid-trial.
    let mut running = spawn_piped(daemon.client(&machine, &trial_arguments("600")));
    running.wait_for_line("Trying the new settings");
    let (runtime, state) = (daemon.runtime_dir.clone(), daemon.state_dir.clone());
    assert_eq!(daemon.stop(), Some(0));
    let _ = running.finish();
    tally.check("trial, daemon stopped (SIGTERM)", &machine, &tuned);
    daemon = Daemon::start_in(&machine, runtime.clone(), state.clone());
    let mut running = spawn_piped(daemon.client(&machine, &trial_arguments("600")));
    running.wait_for_line("Trying the new settings");
    daemon.kill();
    let _ = running.finish();
    let _restarted = Daemon::start_in(&machine, runtime, state);
    tally.check("trial, daemon killed, then started again", &machine, &tuned);
    drop(_restarted);

    // Without a daemon: the engine in each process, its journal for the next start.
    must(machine.gputune(&TUNE), "tune in-process");
    let tuned = machine.settings(0);
    must(machine.gputune(&trial_arguments("1")), "in-process trial");
    tally.check("in-process trial, time up", &machine, &tuned);
    let mut running = spawn_piped(machine.command(&trial_arguments("600")));
    running.wait_for_line("Trying the new settings");
    running.signal("KILL");
    let _ = running.finish();
    must(machine.gputune(&["status"]), "status restores");
    tally.check("in-process trial killed, next start", &machine, &tuned);
    let _ = machine.gputune(&["run", "--profile", "Everything", "--", "true"]);
    tally.check("in-process run", &machine, &tuned);
    let mut running =
        spawn_piped(machine.command(&["run", "--profile", "Everything", "--", "sleep", "2"]));
    running.wait_for_line("applied the profile");
    running.signal("KILL");
    let _ = running.finish();
    std::thread::sleep(Duration::from_secs(2));
    must(machine.gputune(&["status"]), "status restores");
    tally.check("in-process run killed, next start", &machine, &tuned);

    eprintln!(
        "restore exactness: {} of {} endings put the tuned card back exactly",
        tally.exact, tally.total
    );
    assert!(tally.wrong.is_empty(), "{:#?}", tally.wrong);
}

#[test]
fn a_kept_trial_stays_and_leaves_no_journal() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    must(
        daemon.client(&machine, &TUNE).output().expect("runs"),
        "tune",
    );
    let options = window_options(&machine, SocketChoice::Path(daemon.socket.clone()));
    let link = Link::spawn(options, 500, || {}).expect("the link starts");
    wait_for_link(&link, |event| matches!(event, LinkEvent::Connected { .. }));
    link.send(LinkCommand::Tune(TuneCommand::StartTrial {
        gpu_index: 0,
        settings: vec![gputune_formats::card::Setting::PowerLimit {
            power_limit_mw: 300_000,
        }],
        duration_s: 600,
    }));
    wait_until("the trial is on", || {
        machine.settings(0).power_limit_mw == 300_000
    });
    link.send(LinkCommand::Tune(TuneCommand::KeepTrial { gpu_index: 0 }));
    wait_for_link(
        &link,
        |event| matches!(event, LinkEvent::Trial(status) if status.message.as_deref().is_some_and(|message| message.starts_with("Kept"))),
    );
    drop(link);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(machine.settings(0).power_limit_mw, 300_000, "kept");
    assert!(!daemon.journal(&machine, 0).exists());
}
