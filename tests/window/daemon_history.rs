//! The daemon's history on disk (crates/core/tests/core/history.rs is the window's own), with
//! a real daemon process on the fake libnvidia-ml: it keeps one sample a second and the setting
//! changes while no window is open, across a restart and
//! kill -9; the window, when it opens, shows them in front of its own readings; planted
//! symlinks, FIFOs, hard links, an oversized or damaged file and hostile requests are refused
//! or survived without writing through anything or losing the good records.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::FakeMachine;
use common::daemon::{Daemon, window_options};

use crate::common;
use crate::common_ui;
use gputune_core::service::client::{
    ClientError, ConnectOptions, SocketChoice, TuningClient, connect,
};
use gputune_core::telemetry::history::Metric;
use gputune_core::telemetry::history::MetricRow;
use gputune_core::telemetry::store::ring::{HEADER_BYTES, RECORD_BYTES};
use gputune_formats::history::HistoryPage;
use gputune_formats::history::HistoryRow;
use gputune_formats::protocol::{Request, Response};

fn now_ms() -> u64 {
    gputune_core::clock::wall_clock_ms()
}

fn client(daemon: &Daemon, machine: &FakeMachine) -> TuningClient {
    connect(&ConnectOptions {
        backend: window_options(machine, SocketChoice::None).backend,
        socket: SocketChoice::Path(daemon.socket.clone()),
        folders: machine.folders(),
        label: "tests/history.rs".to_string(),
    })
    .expect("the daemon answers")
}

/// Every page of GPU `uuid`'s history up to now.
fn whole_history(client: &mut TuningClient, uuid: &str) -> (Vec<HistoryRow>, HistoryPage) {
    let until_ms = now_ms();
    let mut from_ms = 0;
    let mut rows = Vec::new();
    let mut changes = Vec::new();
    for _ in 0..1_000 {
        let page = match client.request(Request::History {
            gpu_uuid: uuid.to_string(),
            from_ms,
            to_ms: until_ms,
        }) {
            Ok(Response::History(page)) => *page,
            other => panic!("a history page: {other:?}"),
        };
        rows.extend(page.rows.iter().copied());
        changes.extend(page.changes.iter().cloned());
        match page.next_from_ms {
            Some(next) => {
                assert!(next > from_ms, "pages move forward");
                from_ms = next;
            }
            None => {
                return (
                    rows,
                    HistoryPage {
                        changes,
                        rows: Vec::new(),
                        ..page
                    },
                );
            }
        }
    }
    panic!("the history never ended");
}

fn history_dir(daemon: &Daemon) -> PathBuf {
    daemon.state_dir.join("history")
}

fn ring_path(daemon: &Daemon, machine: &FakeMachine, gpu: usize) -> PathBuf {
    history_dir(daemon).join(format!("{}.ring", machine.uuid(gpu)))
}

/// Waits until GPU `uuid` has `rows` samples on disk.
fn wait_for_gpu_rows(client: &mut TuningClient, uuid: &str, rows: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while whole_history(client, uuid).0.len() < rows {
        assert!(Instant::now() < deadline, "GPU {uuid} is never recorded");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until GPU 0 has `rows` samples on disk.
fn wait_for_rows(daemon: &Daemon, machine: &FakeMachine, rows: usize) -> Vec<HistoryRow> {
    let mut client = client(daemon, machine);
    let uuid = machine.uuid(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (kept, _) = whole_history(&mut client, &uuid);
        if kept.len() >= rows {
            return kept;
        }
        assert!(
            Instant::now() < deadline,
            "only {} samples kept; the daemon's log:\n{}",
            kept.len(),
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn power_limit_w(row: &HistoryRow) -> Option<u32> {
    row.value(Metric::PowerLimitW).map(|steps| steps / 10)
}

#[test]
fn history_and_changes_are_kept_while_no_window_is_open_across_a_restart_and_shown_when_it_opens() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    wait_for_rows(&daemon, &machine, 2);
    // Another program lowers the power limit while no window is open.
    let output = machine.gputune(&["apply", "--power-limit", "300W"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let before_restart = wait_for_rows(&daemon, &machine, 5);
    let (runtime_dir, state_dir) = (daemon.runtime_dir.clone(), daemon.state_dir.clone());
    daemon.kill();
    let killed_at_ms = now_ms();

    let daemon = Daemon::start_in(&machine, runtime_dir, state_dir);
    let kept = wait_for_rows(&daemon, &machine, before_restart.len() + 2);
    // Everything from before the kill is still there, one sample a second.
    for row in &before_restart {
        assert!(kept.contains(row), "{row:?} was lost in the restart");
    }
    let seconds: Vec<u64> = kept.iter().map(|row| row.time_ms / 1000).collect();
    assert!(
        seconds.windows(2).all(|pair| pair[0] < pair[1]),
        "{seconds:?}"
    );
    assert!(kept.iter().any(|row| power_limit_w(row) == Some(450)));
    assert!(kept.iter().any(|row| power_limit_w(row) == Some(300)));
    let (_, page) = whole_history(&mut client(&daemon, &machine), &machine.uuid(0));
    let change = page
        .changes
        .iter()
        .find(|change| change.by == "another program")
        .unwrap_or_else(|| panic!("the change is kept: {:?}", page.changes));
    assert!(change.at_ms < killed_at_ms, "{change:?}");
    assert_eq!(page.keep_hours, 48);

    // The window opens now and shows those hours in front of its own readings.
    let link = daemon.open_link(&machine);
    let mut state = common_ui::empty_state(10_000);
    let deadline = Instant::now() + Duration::from_secs(60);
    while state
        .model
        .gpus
        .first()
        .is_none_or(|gpu| earlier_samples(gpu) == 0 || gpu.history.len() <= kept.len())
    {
        assert!(
            Instant::now() < deadline,
            "the window never got the history"
        );
        for event in link.drain_events() {
            state.take_event(event, now_ms());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let gpu = &state.model.gpus[0];
    assert!(earlier_samples(gpu) >= kept.len(), "{:?}", gpu.earlier);
    let first_ms = gpu.history.first_time_ms().expect("samples");
    assert_eq!(first_ms, kept[0].time_ms, "the oldest kept sample leads");
    let times: Vec<u64> = (0..gpu.history.len())
        .filter_map(|index| gpu.history.time_ms(index))
        .collect();
    assert!(times.windows(2).all(|pair| pair[0] <= pair[1]));
    assert!(
        gpu.changes.iter().any(|note| note.by == "another program"),
        "{:?}",
        gpu.changes
    );
    drop(link);
    // The graphs say where their past comes from.
    {
        use egui_kittest::kittest::Queryable;
        state.selected_gpu = Some(0);
        let harness = common_ui::window_harness(state, [1280.0, 720.0]);
        harness.get_by_label_contains("samples the gputune daemon kept before this window opened");
    }
}

fn earlier_samples(gpu: &gputune::ui::model::GpuModel) -> usize {
    match gpu.earlier {
        gputune::ui::model::EarlierHistory::Loaded { samples, .. } => samples,
        _ => 0,
    }
}

/// A file outside the history folder that must never be written.
fn victim(machine: &FakeMachine) -> PathBuf {
    let path = machine.state_dir().with_file_name("victim.txt");
    std::fs::write(&path, b"precious").expect("the victim is written");
    path
}

fn private_folder(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).expect("the folder is made");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("mode 0700");
}

#[test]
fn planted_links_and_fifos_are_refused_without_a_hang_or_a_write_through_them() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let victim = victim(&machine);
    let base = machine.state_dir().with_file_name("daemon");
    let (runtime_dir, state_dir) = (base.join("run"), base.join("state"));
    let history = state_dir.join("history");
    private_folder(&history);
    let uuid = |gpu: usize| machine.uuid(gpu);
    // GPU 0: symlinks to the victim; GPU 1: FIFOs; GPU 2: hard links to the victim.
    std::os::unix::fs::symlink(&victim, history.join(format!("{}.ring", uuid(0)))).unwrap();
    std::os::unix::fs::symlink(&victim, history.join(format!("{}.changes", uuid(0)))).unwrap();
    for name in ["ring", "changes"] {
        nix::unistd::mkfifo(
            &history.join(format!("{}.{name}", uuid(1))),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .unwrap();
    }
    std::fs::hard_link(&victim, history.join(format!("{}.ring", uuid(2)))).unwrap();

    let started = Instant::now();
    let daemon = Daemon::start_in(&machine, runtime_dir, state_dir);
    // Another program changes GPU 0 to 2: the daemon tries to note it.
    let output = machine.gputune(&[
        "apply",
        "--gpu",
        "0",
        "--gpu",
        "1",
        "--gpu",
        "2",
        "--power-limit",
        "400W",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // GPU 3 is recorded as usual meanwhile.
    let mut client = client(&daemon, &machine);
    wait_for_gpu_rows(&mut client, &uuid(3), 3);
    assert!(started.elapsed() < Duration::from_secs(30));
    for gpu in 0..3 {
        let (rows, _) = whole_history(&mut client, &uuid(gpu));
        assert!(rows.is_empty(), "GPU {gpu}: nothing read through a plant");
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(std::fs::metadata(&victim).unwrap().nlink(), 2);
    let log = daemon.log_text();
    assert!(log.contains("is a symbolic link"), "{log}");
    assert!(log.contains("a FIFO"), "{log}");
    assert!(log.contains("hard links"), "{log}");
    // The daemon still answers everything else.
    assert!(matches!(
        client.request(Request::Snapshot),
        Ok(Response::Snapshot(_))
    ));
}

#[test]
fn an_oversized_or_damaged_history_file_is_cut_and_its_good_records_survive() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    let kept = wait_for_rows(&daemon, &machine, 4);
    let ring = ring_path(&daemon, &machine, 0);
    let full_length = HEADER_BYTES + 48 * 3_600 * RECORD_BYTES as u64;
    let (runtime_dir, state_dir) = (daemon.runtime_dir.clone(), daemon.state_dir.clone());
    daemon.kill();
    // Someone makes the file 1 GiB (sparse) and writes garbage over the second record.
    let file = std::fs::OpenOptions::new().write(true).open(&ring).unwrap();
    file.set_len(1 << 30).unwrap();
    let damaged_second = kept[1].time_ms / 1000;
    let offset = HEADER_BYTES + (damaged_second % (48 * 3_600)) * RECORD_BYTES as u64;
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xAB; 13], offset + 9).unwrap();
    drop(file);

    let daemon = Daemon::start_in(&machine, runtime_dir, state_dir);
    let after = wait_for_rows(&daemon, &machine, kept.len() + 1);
    assert_eq!(std::fs::metadata(&ring).unwrap().len(), full_length);
    assert!(!after.contains(&kept[1]), "the damaged record is skipped");
    for row in kept.iter().filter(|row| **row != kept[1]) {
        assert!(after.contains(row), "{row:?} survives");
    }
    assert!(
        daemon.log_text().contains("the excess was cut"),
        "{}",
        daemon.log_text()
    );
}

#[test]
fn a_daemon_killed_at_any_moment_keeps_every_record_it_finished() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    let mut finished = wait_for_rows(&daemon, &machine, 2);
    let (runtime_dir, state_dir) = (daemon.runtime_dir.clone(), daemon.state_dir.clone());
    let mut daemon = Some(daemon);
    // Kills at moments spread over a second, so some land mid-write.
    for (round, wait_ms) in [130u64, 470, 810, 290, 650, 990].into_iter().enumerate() {
        if let Some(running) = daemon.take() {
            std::thread::sleep(Duration::from_millis(wait_ms));
            running.kill();
        }
        let restarted = Daemon::start_in(&machine, runtime_dir.clone(), state_dir.clone());
        let kept = wait_for_rows(&restarted, &machine, finished.len() + 1);
        for row in &finished {
            assert!(kept.contains(row), "round {round}: {row:?} was lost");
        }
        finished = kept;
        daemon = Some(restarted);
    }
    assert!(finished.len() >= 8, "{}", finished.len());
}

#[test]
fn hostile_history_requests_get_an_answer_and_the_daemon_stays_responsive() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    wait_for_rows(&daemon, &machine, 1);
    let mut client = client(&daemon, &machine);
    let refused = |result: Result<Response, ClientError>| match result {
        Err(ClientError::Refused(error)) => error.message,
        other => panic!("refused: {other:?}"),
    };
    let message = refused(client.request(Request::History {
        gpu_uuid: machine.uuid(0),
        from_ms: 10,
        to_ms: 5,
    }));
    assert!(message.contains("before it starts"), "{message}");
    for uuid in ["GPU-nope", "../../etc/passwd", "", &"A".repeat(10_000)] {
        let message = refused(client.request(Request::History {
            gpu_uuid: uuid.to_string(),
            from_ms: 0,
            to_ms: 1,
        }));
        assert!(message.contains("There is no GPU"), "{message}");
    }
    // The whole range of time: still one page of at most 1,200 seconds.
    match client.request(Request::History {
        gpu_uuid: machine.uuid(0),
        from_ms: 0,
        to_ms: u64::MAX,
    }) {
        Ok(Response::History(page)) => {
            assert!(page.rows.len() <= 1_200);
            assert!(page.next_from_ms.is_some());
        }
        other => panic!("a page: {other:?}"),
    }
    // Four clients asking as fast as they can, beside a fifth that must still be answered.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let socket = daemon.socket.clone();
            let window = window_options(&machine, SocketChoice::None);
            let uuid = machine.uuid(0);
            std::thread::spawn(move || {
                let mut client = connect(&ConnectOptions {
                    backend: window.backend,
                    socket: SocketChoice::Path(socket),
                    folders: window.folders,
                    label: "a greedy client".to_string(),
                })
                .expect("connects");
                let mut answered = 0;
                for _ in 0..300 {
                    match client.request(Request::History {
                        gpu_uuid: uuid.clone(),
                        from_ms: 0,
                        to_ms: u64::MAX,
                    }) {
                        Ok(Response::History(_)) | Err(ClientError::Refused(_)) => answered += 1,
                        other => panic!("{other:?}"),
                    }
                }
                answered
            })
        })
        .collect();
    let started = Instant::now();
    assert!(matches!(
        client.request(Request::Snapshot),
        Ok(Response::Snapshot(_))
    ));
    eprintln!(
        "a snapshot beside 4 greedy history clients took {:?}",
        started.elapsed()
    );
    for thread in threads {
        assert_eq!(thread.join().expect("no panic"), 300);
    }
}

#[test]
fn gputune_history_prints_the_changes_and_writes_the_samples_as_csv() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let daemon = Daemon::start(&machine);
    let output = machine.gputune(&["apply", "--gpu", "2", "--power-limit", "300W"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut client = client(&daemon, &machine);
    wait_for_gpu_rows(&mut client, &machine.uuid(2), 3);
    let csv = machine.state_dir().with_file_name("history.csv");
    let run = |arguments: &[&str]| {
        let output = daemon
            .client(&machine, arguments)
            .output()
            .unwrap_or_else(|error| panic!("gputune runs: {error}"));
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let csv_text = csv.to_str().unwrap_or_default();
    let (ok, stdout, stderr) = run(&["history", "--gpu", "2", "--hours", "1", "--csv", csv_text]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("GPU 2  NVIDIA GeForce RTX 4090: "),
        "{stdout}"
    );
    assert!(stdout.contains("(the daemon keeps 48 h)"), "{stdout}");
    assert!(
        stdout.contains("the power limit changed") && stdout.contains("(another program)"),
        "{stdout}"
    );
    let written = std::fs::read_to_string(&csv).unwrap_or_default();
    let mut lines = written.lines();
    assert!(
        lines
            .next()
            .is_some_and(|header| header.starts_with("timestamp,index,uuid")),
        "{written}"
    );
    let rows: Vec<&str> = lines.collect();
    assert!(rows.len() >= 3, "{written}");
    assert!(rows.iter().all(|row| row.contains(&machine.uuid(2))));
    assert!(
        rows.iter().any(|row| row.contains(",300.000,")),
        "{written}"
    );
    // The energy column is filled: counted from the first row (the history keeps power, not
    // the card's counter), never falling.
    let energy_j: Vec<f64> = rows
        .iter()
        .filter_map(|row| row.rsplit(',').next()?.parse().ok())
        .collect();
    assert_eq!(energy_j.len(), rows.len(), "{written}");
    assert!(
        energy_j.windows(2).all(|pair| pair[1] >= pair[0])
            && energy_j.last().is_some_and(|last| *last > 0.0),
        "{energy_j:?}"
    );
    // An existing file is never replaced; no daemon there, or none to be used, is said plainly.
    let (ok, _, stderr) = run(&["history", "--csv", csv_text]);
    assert!(!ok && stderr.contains("never replaces a file"), "{stderr}");
    let no_daemon = machine.gputune(&["history"]);
    assert!(!no_daemon.status.success());
    assert!(
        String::from_utf8_lossy(&no_daemon.stderr).contains("GPUTUNE_SOCKET is empty"),
        "{}",
        String::from_utf8_lossy(&no_daemon.stderr)
    );
    let elsewhere = machine
        .command(&["history"])
        .env("GPUTUNE_SOCKET", machine.state_dir().join("none.sock"))
        .output()
        .unwrap_or_else(|error| panic!("gputune runs: {error}"));
    assert!(!elsewhere.status.success());
    assert!(
        String::from_utf8_lossy(&elsewhere.stderr).contains("sudo gputune daemon install"),
        "{}",
        String::from_utf8_lossy(&elsewhere.stderr)
    );
}

#[test]
fn gputune_history_says_the_daemon_runs_but_keeps_no_history_and_why() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let base = machine.state_dir().with_file_name("daemon");
    let (runtime_dir, state_dir) = (base.join("run"), base.join("state"));
    // A file where the history folder goes: the daemon refuses it and runs without history.
    std::fs::create_dir_all(&state_dir).expect("the state folder is made");
    std::fs::write(state_dir.join("history"), b"not a folder").expect("the file is written");
    let daemon = Daemon::start_in(&machine, runtime_dir, state_dir);
    let output = daemon
        .client(&machine, &["history"])
        .output()
        .unwrap_or_else(|error| panic!("gputune runs: {error}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("The gputune daemon runs but keeps no history"),
        "{stderr}"
    );
    // The reason is the daemon's own, from its welcome; nothing says to install a daemon.
    assert!(stderr.contains("is not a folder"), "{stderr}");
    assert!(!stderr.contains("daemon install"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr}");
    let log = daemon.log_text();
    assert!(log.contains("History is not kept"), "{log}");
}
