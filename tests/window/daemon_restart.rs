//! The window and the CLI across a daemon restart, with a real daemon process on the fake
//! libnvidia-ml: the window reaches the new daemon by itself, keeps its graphs and fills the
//! time it missed from the daemon's history; the news of the daemon's start (a boot default
//! applied) is told once to a user and then kept in the history, not repeated by every client.

use std::time::{Duration, Instant};

use common::daemon::{Daemon, DaemonFolders};
use common::{FakeMachine, text};
use egui_kittest::kittest::Queryable;

use crate::common;
use crate::common_ui;
use gputune::ui::model::{Connection, EarlierHistory};
use gputune_core::link::Link;
use gputune_core::service::client::{ConnectOptions, SocketChoice, connect};
use gputune_formats::history::HistoryRow;

fn now_ms() -> u64 {
    gputune_core::clock::wall_clock_ms()
}

type WindowHarness = egui_kittest::Harness<'static, common_ui::Window>;

/// The window on `link`, drawn at 1280×800.
fn window(history_samples: usize) -> WindowHarness {
    let mut state = common_ui::empty_state(history_samples);
    state.selected_gpu = Some(0);
    common_ui::window_harness(state, [1280.0, 800.0])
}

/// Feeds the window from its link, as the app does, until `done` says so; returns when the
/// event that made it so arrived (Unix ms). Every event drained is taken in.
fn feed_until(
    link: &Link,
    harness: &mut WindowHarness,
    what: &str,
    done: impl Fn(&gputune::ui::app::AppState) -> bool,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done_at_ms = None;
    loop {
        for event in link.drain_events() {
            harness.state_mut().state.take_event(event, now_ms());
            if done_at_ms.is_none() && done(&harness.state().state) {
                done_at_ms = Some(now_ms());
            }
        }
        if let Some(at_ms) = done_at_ms {
            // A spinner repaints for ever: a few frames settle the rest.
            harness.run_steps(3);
            return at_ms;
        }
        assert!(Instant::now() < deadline, "the window never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A window on `daemon`'s link, fed until it has read GPU 0 once.
fn window_reading(daemon: &Daemon, machine: &FakeMachine) -> (Link, WindowHarness) {
    let link = daemon.open_link(machine);
    let mut harness = window(1_000);
    feed_until(&link, &mut harness, "read the card", |state| {
        state
            .model
            .gpus
            .first()
            .is_some_and(|gpu| gpu.latest.is_some())
    });
    (link, harness)
}

/// Kills `daemon` (a crash) and feeds the window until it says it reconnects; the daemon's
/// folders, for the next one.
fn lose_the_daemon(daemon: Daemon, link: &Link, harness: &mut WindowHarness) -> DaemonFolders {
    let folders = daemon.folders();
    daemon.kill();
    feed_until(link, harness, "lose the daemon", |state| {
        matches!(state.model.connection, Connection::Reconnecting(_))
    });
    folders
}

/// What the daemon kept of GPU `uuid` between `from_ms` and `to_ms`.
fn kept_rows(
    daemon: &Daemon,
    machine: &FakeMachine,
    uuid: &str,
    from_ms: u64,
    to_ms: u64,
) -> Vec<HistoryRow> {
    let options = common::daemon::window_options(machine, SocketChoice::None);
    let mut client = connect(&ConnectOptions {
        backend: options.backend,
        socket: SocketChoice::Path(daemon.socket.clone()),
        folders: options.folders,
        label: "tests/window/daemon_restart.rs".to_string(),
    })
    .expect("the daemon answers");
    let mut pages = gputune_core::service::history_pages::HistoryPages::new(uuid, from_ms, to_ms);
    let mut rows = Vec::new();
    while let Some(page) = pages.next(&mut client).expect("a history page") {
        rows.extend(page.rows);
    }
    rows
}

#[test]
fn the_window_reconnects_after_the_daemon_restarts_and_fills_the_gap_from_its_history() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let link = daemon.open_link(&machine);
    let mut harness = window(10_000);
    feed_until(&link, &mut harness, "read the card", |state| {
        state.model.gpus.first().is_some_and(|gpu| {
            gpu.history.len() >= 3 && matches!(gpu.earlier, EarlierHistory::Loaded { .. })
        })
    });
    let before = harness.state().state.model.gpus[0].history.len();
    let folders = daemon.folders();

    // The daemon dies (a crash; an upgrade's restart is the same to the window).
    daemon.kill();
    // The link tries again with a growing wait; after four tries the next is 4 s away, which
    // leaves the new daemon time to record what the window then misses.
    feed_until(
        &link,
        &mut harness,
        "say it reconnects",
        |state| matches!(&state.model.connection, Connection::Reconnecting(reconnecting) if reconnecting.attempt >= 4),
    );
    let last_before_ms = {
        let gpu = &harness.state().state.model.gpus[0];
        assert!(
            gpu.history.len() > before,
            "the graphs stay, with a break after them"
        );
        gpu.history.last_time_ms().expect("readings")
    };
    harness.get_by_label_contains("The gputune daemon went away at");
    harness.get_by_label_contains("Reconnecting… (try 5");
    assert!(
        harness.query_by_label_contains("--backend sim").is_none(),
        "the simulator is never offered while a daemon's socket is there"
    );

    let restarted_at = Instant::now();
    let daemon = folders.start(&machine);
    let reconnected_ms = feed_until(&link, &mut harness, "reconnect", |state| {
        state.model.reconnected.is_some()
    });
    let first_reading_ms = feed_until(&link, &mut harness, "read the card again", |state| {
        state.model.gpus[0]
            .latest
            .as_ref()
            .and_then(|latest| latest.as_ref().ok())
            .is_some_and(|reading| reading.sampled_at_ms > last_before_ms)
    });
    eprintln!(
        "daemon restart: the window's first new reading {} ms after the new daemon was started ({} ms after it listened)",
        restarted_at.elapsed().as_millis(),
        first_reading_ms.saturating_sub(reconnected_ms)
    );
    harness.get_by_label_contains("The gputune daemon restarted (it went away at");

    // What the new daemon kept before the window was back is in the graphs, in order.
    let uuid = machine.uuid(0);
    let missed = kept_rows(&daemon, &machine, &uuid, last_before_ms + 1, reconnected_ms);
    assert!(
        !missed.is_empty(),
        "the new daemon kept seconds the window missed"
    );
    feed_until(&link, &mut harness, "fill the gap", |state| {
        let history = &state.model.gpus[0].history;
        let times: Vec<u64> = (0..history.len())
            .filter_map(|index| history.time_ms(index))
            .collect();
        missed.iter().all(|row| times.contains(&row.time_ms))
    });
    let history = &harness.state().state.model.gpus[0].history;
    let times: Vec<u64> = (0..history.len())
        .filter_map(|index| history.time_ms(index))
        .collect();
    assert!(
        times.windows(2).all(|pair| pair[0] <= pair[1]),
        "in time order"
    );
    assert!(history.len() >= before + missed.len());
    drop(link);
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn a_trial_the_window_ran_is_said_to_have_ended_with_the_daemon() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let (link, mut harness) = window_reading(&daemon, &machine);
    link.send(gputune_core::link::LinkCommand::Tune(
        gputune_core::link::TuneCommand::StartTrial {
            gpu_index: 0,
            settings: vec![gputune_formats::card::Setting::PowerLimit {
                power_limit_mw: 300_000,
            }],
            duration_s: 600,
        },
    ));
    feed_until(&link, &mut harness, "run the trial", |state| {
        state.model.gpus[0].trial.as_ref().is_some_and(|trial| {
            matches!(
                trial.phase,
                gputune_formats::tuning::TrialPhase::Running { .. }
            )
        })
    });
    let folders = lose_the_daemon(daemon, &link, &mut harness);
    harness.get_by_label_contains("and with it the trial on GPU 0");
    let daemon = folders.start(&machine);
    assert_eq!(
        machine.settings(0).power_limit_mw,
        450_000,
        "the new daemon's journal put the card back"
    );
    feed_until(&link, &mut harness, "reconnect", |state| {
        state.model.reconnected.is_some()
    });
    drop(link);
    assert_eq!(daemon.stop(), Some(0));
}

/// A daemon that applied a boot default when it started (the card was changed after the
/// default was stored, then the daemon restarted).
fn daemon_after_a_boot_default(machine: &FakeMachine) -> Daemon {
    let daemon = Daemon::start(machine);
    daemon.ok(machine, &["apply", "--power-limit", "315W"]);
    daemon.ok(machine, &["profile", "save", "Quiet"]);
    daemon.ok(machine, &["profile", "default", "Quiet"]);
    daemon.ok(machine, &["apply", "--power-limit", "450W"]);
    let folders = daemon.folders();
    assert_eq!(daemon.stop(), Some(0));
    let daemon = folders.start(machine);
    assert_eq!(machine.settings(0).power_limit_mw, 315_000);
    daemon
}

const BOOT_NEWS: &str = "Applied the boot default \"Quiet\"";

#[test]
fn the_boot_default_notice_is_told_to_the_first_client_only_and_kept_in_the_history() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = daemon_after_a_boot_default(&machine);
    let said = |arguments: &[&str]| {
        let output = daemon
            .client(&machine, arguments)
            .output()
            .expect("the client runs");
        assert!(output.status.success(), "{}", text(&output.stderr));
        format!("{}{}", text(&output.stdout), text(&output.stderr))
    };
    let first = said(&["apply", "--power-limit", "320W"]);
    assert!(first.contains(BOOT_NEWS), "{first}");
    for arguments in [
        &["apply", "--power-limit", "330W"][..],
        &["status"][..],
        &["apply", "--power-limit", "340W"][..],
    ] {
        let later = said(arguments);
        assert!(!later.contains("boot default"), "{arguments:?}: {later}");
    }
    // It stays in the history, with who made the change.
    let history = said(&["history", "--hours", "1"]);
    assert!(
        history.contains("power limit 315 W")
            && history.contains("(the gputune daemon (boot default)"),
        "{history}"
    );
}

#[test]
fn a_new_window_does_not_show_the_boot_default_notice_again() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = daemon_after_a_boot_default(&machine);
    // The user's first client hears the news.
    let first = daemon.ok(&machine, &["apply", "--power-limit", "320W"]);
    drop(first);
    let link = daemon.open_link(&machine);
    let mut harness = window(1_000);
    harness.state_mut().state.selected_gpu = None;
    feed_until(&link, &mut harness, "read the daemon's history", |state| {
        state.model.gpus.first().is_some_and(|gpu| {
            matches!(gpu.earlier, EarlierHistory::Loaded { .. }) && gpu.latest.is_some()
        })
    });
    assert!(
        harness.query_by_label_contains("boot default").is_none(),
        "{:?}",
        harness.state().state.model.notices
    );
    let gpu = &harness.state().state.model.gpus[0];
    assert!(
        gpu.changes
            .iter()
            .any(|change| change.by.starts_with("the gputune daemon (boot default)")),
        "the change is in the graphs' marks: {:?}",
        gpu.changes
    );
    drop(link);
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn a_change_asked_while_the_daemon_is_away_is_refused_plainly() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let (link, mut harness) = window_reading(&daemon, &machine);
    lose_the_daemon(daemon, &link, &mut harness);
    link.send(gputune_core::link::LinkCommand::Tune(
        gputune_core::link::TuneCommand::Apply {
            gpu_index: 0,
            settings: vec![gputune_formats::card::Setting::PowerLimit {
                power_limit_mw: 300_000,
            }],
        },
    ));
    feed_until(&link, &mut harness, "refuse the apply", |state| {
        state.model.gpus[0]
            .tune_message
            .as_ref()
            .is_some_and(|notice| notice.text().contains("is not reachable now"))
    });
    assert_eq!(machine.settings(0).power_limit_mw, 450_000);
    // Closing the window while it waits for the daemon does not hang.
    let closing = Instant::now();
    drop(link);
    assert!(closing.elapsed() < Duration::from_secs(10));
}

/// The measurement in docs/benchmarks.md: a daemon restarted at once (as `systemctl restart`
/// or systemd after a crash does), and the time until the window's first new reading.
#[test]
fn a_daemon_restarted_at_once_is_read_again_within_the_first_waits() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut daemon = Daemon::start(&machine);
    let (link, mut harness) = window_reading(&daemon, &machine);
    let latest_ms = |state: &gputune::ui::app::AppState| {
        state.model.gpus[0]
            .latest
            .as_ref()
            .and_then(|latest| latest.as_ref().ok())
            .map_or(0, |reading| reading.sampled_at_ms)
    };
    let mut measured = Vec::new();
    for round in 0..6 {
        let folders = daemon.folders();
        let before_ms = latest_ms(&harness.state().state);
        let started = Instant::now();
        // A crash (SIGKILL) and a clean restart (SIGTERM) in turn.
        if round % 2 == 0 {
            daemon.kill();
        } else {
            assert_eq!(daemon.stop(), Some(0));
        }
        daemon = folders.start(&machine);
        let listening = started.elapsed();
        feed_until(&link, &mut harness, "read the card again", |state| {
            matches!(state.model.connection, Connection::Connected { .. })
                && latest_ms(state) > before_ms
        });
        let reading = started.elapsed();
        assert!(reading < Duration::from_secs(60), "never hangs");
        measured.push((listening.as_millis(), reading.as_millis()));
    }
    eprintln!(
        "daemon restarted at once (kill / stop, then start), ms from the stop to (the new daemon listening, the window's first new reading): {measured:?}"
    );
    drop(link);
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn a_window_opened_while_the_daemon_restarts_waits_for_it_and_never_offers_the_simulator() {
    let machine = FakeMachine::new("rtx4090", "");
    let base = machine.state_dir().with_file_name("daemon");
    let (runtime_dir, state_dir) = (base.join("run"), base.join("state"));
    std::fs::create_dir_all(&runtime_dir).expect("the runtime folder is made");
    // The socket a daemon left as it went away: there, but nobody answers.
    let socket = runtime_dir.join("gputune.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("a socket is bound"));
    let link = Link::spawn(
        common::daemon::window_options(&machine, SocketChoice::Path(socket)),
        500,
        || {},
    )
    .expect("the link starts");
    let mut harness = window(1_000);
    harness.state_mut().state.selected_gpu = None;
    feed_until(
        &link,
        &mut harness,
        "wait for the daemon",
        |state| matches!(&state.model.connection, Connection::Reconnecting(reconnecting) if reconnecting.attempt >= 1),
    );
    harness.get_by_label_contains("The gputune daemon does not answer yet");
    assert!(harness.query_by_label_contains("--backend sim").is_none());
    assert!(
        harness
            .query_by_label_contains("No GPU could be reached")
            .is_none()
    );

    let daemon = Daemon::start_in(&machine, runtime_dir, state_dir);
    feed_until(&link, &mut harness, "read the card", |state| {
        matches!(
            state.model.connection,
            Connection::Connected { daemon: true, .. }
        ) && state
            .model
            .gpus
            .first()
            .is_some_and(|gpu| gpu.latest.is_some())
    });
    // A first connection, not a reconnect: nothing to say about a restart.
    assert_eq!(harness.state().state.model.reconnected, None);
    drop(link);
    assert_eq!(daemon.stop(), Some(0));
}
