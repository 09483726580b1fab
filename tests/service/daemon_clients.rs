//! The daemon against clients that misbehave, as real processes on the fake libnvidia-ml and a
//! temporary socket: a client that dies with answers unread is put back at once, one that
//! stops reading is dropped and frees everything it held, connections that never say hello
//! time out, one user cannot take every slot, readers leave room for users who may write, and a crowd of idle, deaf and flooding
//! connections (as other users) never keeps an ordinary client waiting.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, wait_until};
use common::raw::Raw;
use common::{FakeMachine, text};

use crate::common;
use gputune_formats::card::Setting;
use gputune_formats::protocol::Request;
use gputune_formats::tuning::{GpuChange, SessionPurpose, SessionRequest};

/// A `run` session at 250 W and +200 MHz, as `gputune run` would start it.
fn run_session(machine: &FakeMachine) -> Request {
    Request::StartSession {
        session: SessionRequest {
            purpose: SessionPurpose::Run,
            changes: vec![GpuChange {
                gpu_uuid: machine.uuid(0),
                settings: vec![
                    Setting::PowerLimit {
                        power_limit_mw: 250_000,
                    },
                    Setting::GpuClockOffset { offset_mhz: 200 },
                ],
            }],
            fan_curves: Vec::new(),
            job_pid: None,
            job: None,
        },
    }
}

/// Fans at 30 % when cool (a valid curve: rising, loud enough when hot).
fn quiet_curve(machine: &FakeMachine) -> String {
    format!(
        r#"{{"id":2,"request":{{"type":"follow_fan_curve","gpu_uuid":"{}","curve":{{"points":[{{"temperature_c":0,"speed_pct":30}},{{"temperature_c":110,"speed_pct":100}}],"hysteresis_c":3}}}}}}"#,
        machine.uuid(0)
    )
}

/// `count` snapshot requests, never read.
fn flood_unread(raw: &mut Raw, count: u64) {
    // One write: the kernel counts each small write's overhead against the socket's buffer.
    let lines: String = (100..100 + count)
        .map(|id| format!("{{\"id\":{id},\"request\":{{\"type\":\"snapshot\"}}}}\n"))
        .collect();
    raw.send(lines.as_bytes())
        .expect("the daemon still takes requests");
}

/// Threads and open descriptors of a process, from /proc.
pub(crate) fn threads_and_fds(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let threads = status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
    (threads, fds)
}

/// The sockets a process holds open: its connections, unlike its file count, are not moved by
/// a file it reads for a moment (the fake driver's state, /proc).
pub(crate) fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter_map(|entry| std::fs::read_link(entry.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count()
    })
}

/// Resident memory of a process, KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_client_that_dies_with_200_unread_answers_is_put_back_at_once() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let stock = machine.settings(0);

    // A run session, 200 requests whose answers are never read, then the client dies (its
    // socket closed by the kernel, as a SIGKILL does).
    let mut client = Raw::connect(&daemon.socket);
    client.hello("dies with 200 unread");
    let started = client.ask(2, run_session(&machine));
    assert!(started.contains("session_started"), "{started}");
    assert_eq!(machine.settings(0).power_limit_mw, 250_000);
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 200);
    flood_unread(&mut client, 200);
    std::thread::sleep(Duration::from_millis(300));
    drop(client);
    let took = wait_until("the dead client's run is put back", || {
        machine.settings(0) == stock
    });
    eprintln!(
        "run session, 200 unread answers: put back {} ms after the client died",
        took.as_millis()
    );
    // The issue asks for a second; this bound only catches "never" on a busy machine.
    assert!(took < Duration::from_secs(5), "{took:?}");

    // The same with a fan curve.
    let mut client = Raw::connect(&daemon.socket);
    client.hello("curve dies with 200 unread");
    client.send(quiet_curve(&machine).as_bytes()).expect("sent");
    client.send(b"\n").expect("sent");
    wait_until("the curve drives the fans", || {
        machine
            .settings(0)
            .fan_manual_pct
            .iter()
            .all(Option::is_some)
    });
    flood_unread(&mut client, 200);
    std::thread::sleep(Duration::from_millis(300));
    drop(client);
    let took = wait_until("the dead client's fans go back to the driver", || {
        machine
            .settings(0)
            .fan_manual_pct
            .iter()
            .all(Option::is_none)
    });
    eprintln!(
        "fan curve, 200 unread answers: fans automatic {} ms after the client died",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(machine.settings(0), stock);
}

#[test]
fn clients_that_stop_reading_are_dropped_and_free_everything() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let pid = daemon.child.id();
    // A first connection settles the daemon's own threads (sampler, recorder, …).
    let mut first = Raw::connect(&daemon.socket);
    first.hello("first");
    drop(first);
    std::thread::sleep(Duration::from_millis(500));
    let (threads_before, fds_before) = threads_and_fds(pid);

    // More clients than the daemon has slots, one after the other: hello, subscribe, 2,000
    // requests never read, close. Each must give back its slot, threads and descriptor.
    for round in 0..70 {
        let mut client = Raw::connect(&daemon.socket);
        client.hello(&format!("deaf {round}"));
        client
            .send(b"{\"id\":2,\"request\":{\"type\":\"subscribe\",\"interval_ms\":100}}\n")
            .expect("subscribed");
        client
            .stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("a timeout");
        // One write: the kernel counts each small write's overhead against the buffer.
        let lines: String = (3..2_003u64)
            .map(|id| format!("{{\"id\":{id},\"request\":{{\"type\":\"snapshot\"}}}}\n"))
            .collect();
        let _ = client.send(lines.as_bytes());
    }
    wait_until("every closed connection is let go", || {
        let (threads, fds) = threads_and_fds(pid);
        threads <= threads_before + 2 && fds <= fds_before + 2
    });
    let output = daemon
        .client(&machine, &["apply", "--power-limit", "300W"])
        .output()
        .expect("the client runs");
    assert!(output.status.success(), "{}", text(&output.stderr));

    // A client that holds a session and stops reading but stays alive is dropped when an
    // answer has waited for it too long, and its session is put back.
    let stock = machine.settings(0);
    let mut deaf = Raw::connect(&daemon.socket);
    deaf.hello("alive but deaf");
    let started = deaf.ask(2, run_session(&machine));
    assert!(started.contains("session_started"), "{started}");
    deaf.send(b"{\"id\":3,\"request\":{\"type\":\"subscribe\",\"interval_ms\":100}}\n")
        .expect("subscribed");
    flood_unread(&mut deaf, 400);
    let took = wait_until("the deaf client's session is put back", || {
        machine.settings(0) == stock
    });
    eprintln!(
        "a live client that stopped reading: dropped and put back after {} ms",
        took.as_millis()
    );
    assert!(
        took >= Duration::from_secs(1),
        "a client is given time to read"
    );
    let log = daemon.log_text();
    assert!(log.contains("stopped reading"), "{log}");
    drop(deaf);
}

#[test]
fn connections_that_never_say_hello_time_out_and_one_user_cannot_take_every_slot() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(String::new, |user| user.name);

    let (_, fds_before) = threads_and_fds(daemon.child.id());
    // This user holds its share of connections (greeted, quiet); every one past it is told
    // why at once, and so is this user's own command, in words that say why.
    // Root (as on CI) may hold more than another user: a node's Slurm steps run as root.
    let my_cap = gputune_core::daemon::max_per_user(nix::unistd::geteuid().is_root());
    let held: Vec<Raw> = (0..my_cap)
        .map(|round| {
            let mut raw = Raw::connect(&daemon.socket);
            raw.hello(&format!("holder {round}"));
            raw
        })
        .collect();
    for _ in 0..gputune_core::daemon::MAX_CONNECTIONS - my_cap {
        let mut extra = Raw::connect(&daemon.socket);
        let line = extra.line().unwrap_or_default();
        assert!(line.contains("the most for one user"), "{line}");
        assert!(line.contains(&me), "{line}");
        assert_eq!(extra.line(), None, "closed after the reason");
    }
    let output = daemon
        .client(&machine, &["apply", "--power-limit", "300W"])
        .output()
        .expect("the client runs");
    assert!(!output.status.success());
    let said = text(&output.stderr);
    assert!(said.contains("the most for one user"), "{said}");
    assert!(!said.contains("closed the connection"), "{said}");
    drop(held);
    // The daemon lets go of the closed connections (their threads notice within moments).
    let pid = daemon.child.id();
    wait_until("the held connections are let go", || {
        threads_and_fds(pid).1 <= fds_before + 1
    });

    // Connections that never speak are closed, with the reason, after the hello deadline.
    let started = Instant::now();
    let silent: Vec<Raw> = (0..gputune_core::daemon::MAX_PER_USER)
        .map(|_| Raw::connect(&daemon.socket))
        .collect();
    for mut raw in silent {
        let line = raw.line().unwrap_or_default();
        assert!(line.contains("No hello within 3 s"), "{line}");
        assert_eq!(raw.line(), None, "closed after the reason");
    }
    let took = started.elapsed();
    eprintln!(
        "{} silent connections closed after {} ms",
        gputune_core::daemon::MAX_PER_USER,
        took.as_millis()
    );
    assert!(took >= Duration::from_secs(2), "closed too early: {took:?}");
    let output = daemon
        .client(&machine, &["apply", "--power-limit", "300W"])
        .output()
        .expect("the client runs");
    assert!(output.status.success(), "{}", text(&output.stderr));

    // A request before hello is refused, and the connection still may greet.
    let mut early = Raw::connect(&daemon.socket);
    let answer = early.ask(5, Request::Snapshot);
    assert!(answer.contains("must be `hello`"), "{answer}");
    early.hello("late greeter");
    let snapshot = early.ask(6, Request::Snapshot);
    assert!(snapshot.contains("\"snapshot\""), "{snapshot}");
}

/// The socket_abuse example (tests/examples), built by `cargo build --examples`.
pub(crate) fn socket_abuse() -> PathBuf {
    let path = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            Some(
                exe.parent()?
                    .parent()?
                    .join("examples")
                    .join("socket_abuse"),
            )
        })
        .expect("the test binary is in target/*/deps");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --examples` first, as .ci/run does",
        path.display()
    );
    path
}

/// A daemon other users can reach, for the tests that connect as other users (which needs
/// root); `None`, said, when this process is not root (CI runs as root).
fn daemon_for_everyone() -> Option<(FakeMachine, Daemon)> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("needs root to connect as other users; CI runs as root");
        return None;
    }
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start(&machine);
    open_to_everyone(&daemon);
    Some((machine, daemon))
}

/// Opens the daemon's folders and socket to every user (as an admin who put its users in the
/// group would), so the abuse can come from other users.
pub(crate) fn open_to_everyone(daemon: &Daemon) {
    use std::os::unix::fs::PermissionsExt;
    let mut folder = Some(daemon.runtime_dir.as_path());
    while let Some(step) = folder {
        if step.starts_with(std::env::temp_dir()) && step != std::env::temp_dir() {
            let _ = std::fs::set_permissions(step, std::fs::Permissions::from_mode(0o755));
        }
        folder = step.parent();
    }
    std::fs::set_permissions(&daemon.socket, std::fs::Permissions::from_mode(0o666))
        .expect("the socket is opened");
}

/// `socket_abuse SOCKET KIND COUNT SECONDS` as user `uid` (no such user needs to exist).
fn abuse_as(uid: u32, socket: &Path, kind: &str, count: usize, seconds: u64) -> Child {
    abuse_as_with(uid, socket, kind, count, seconds, &[])
}

/// [`abuse_as`] with more arguments (the GPU of `sessions`).
pub(crate) fn abuse_as_with(
    uid: u32,
    socket: &Path,
    kind: &str,
    count: usize,
    seconds: u64,
    more: &[&str],
) -> Child {
    Command::new(socket_abuse())
        .args([
            socket.to_str().expect("a UTF-8 path"),
            kind,
            &count.to_string(),
            &seconds.to_string(),
        ])
        .args(more)
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the abuser starts")
}

pub(crate) fn finish(child: Child) -> String {
    let output = child.wait_with_output().expect("the abuser ends");
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout).trim().to_string()
}

#[test]
fn readers_leave_room_for_writers() {
    let Some((machine, daemon)) = daemon_for_everyone() else {
        return;
    };

    // Four other users who may only read, each trying for 16 quiet connections: together
    // they get the 40 slots readers may take, and no more.
    let pid = daemon.child.id();
    let sockets_before = sockets(pid);
    let readers: Vec<Child> = (0..4)
        .map(|user| abuse_as(61_000 + user, &daemon.socket, "quiet", 16, 20))
        .collect();
    wait_until("the readers hold every slot they may take", || {
        sockets(pid) >= sockets_before + gputune_core::daemon::READER_SLOTS
    });
    // A user who may write still gets in, and writes.
    let output = daemon
        .client(&machine, &["apply", "--power-limit", "300W"])
        .output()
        .expect("the client runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(machine.settings(0).power_limit_mw, 300_000);
    // (A full daemon's sentence, and root's slots past the members', are in
    // daemon::slots' tests and daemon_bounds.rs.)

    let reports: Vec<String> = readers.into_iter().map(finish).collect();
    let refused_readers: u64 = reports
        .iter()
        .filter_map(|report| {
            report
                .split(", ")
                .find_map(|part| part.strip_suffix(" refused at once"))
                .and_then(|count| count.parse::<u64>().ok())
        })
        .sum();
    eprintln!("{reports:#?}");
    assert!(
        refused_readers > 0,
        "past 40 reader slots, readers are refused: {reports:?}"
    );
}

#[test]
fn a_crowd_of_idle_deaf_and_flooding_connections_never_keeps_a_client_waiting() {
    let Some((machine, daemon)) = daemon_for_everyone() else {
        return;
    };
    let pid = daemon.child.id();
    let mut first = Raw::connect(&daemon.socket);
    first.hello("first");
    drop(first);
    std::thread::sleep(Duration::from_millis(500));
    let (threads_before, fds_before) = threads_and_fds(pid);
    let rss_before_kib = rss_kib(pid);

    let abuse_s = 15;
    let crowd = [
        abuse_as(62_001, &daemon.socket, "idle", 200, abuse_s),
        abuse_as(62_002, &daemon.socket, "deaf", 100, abuse_s),
        abuse_as(62_003, &daemon.socket, "flood", 50, abuse_s),
    ];
    // Meanwhile an ordinary client connects, greets and asks for a snapshot, over and over.
    let until = Instant::now() + Duration::from_secs(abuse_s);
    let mut round_trips = Vec::new();
    let mut peak_threads = 0;
    while Instant::now() < until {
        let started = Instant::now();
        let mut client = Raw::connect(&daemon.socket);
        client.hello("ordinary");
        let snapshot = client.ask(2, Request::Snapshot);
        assert!(snapshot.contains("\"snapshot\""), "{snapshot}");
        round_trips.push(started.elapsed());
        drop(client);
        peak_threads = peak_threads.max(threads_and_fds(pid).0);
        std::thread::sleep(Duration::from_millis(200));
    }
    let reports: Vec<String> = crowd.into_iter().map(finish).collect();
    round_trips.sort();
    let median = round_trips[round_trips.len() / 2];
    let worst = round_trips[round_trips.len() - 1];
    eprintln!(
        "abuse: {reports:#?}\nordinary client: {} round trips (connect, hello, snapshot), median {} ms, worst {} ms; daemon threads at most {peak_threads}",
        round_trips.len(),
        median.as_millis(),
        worst.as_millis()
    );
    // Served all along; the figure the issue asks for (1 s) is recorded, not asserted here.
    assert!(worst < Duration::from_secs(10), "{worst:?}");
    assert!(
        peak_threads <= threads_before + 2 * gputune_core::daemon::MAX_CONNECTIONS + 4,
        "{peak_threads} threads"
    );

    // Afterwards every connection is let go, and memory is bounded.
    let settled = wait_until("every abusive connection is let go", || {
        let (threads, fds) = threads_and_fds(pid);
        threads <= threads_before + 2 && fds <= fds_before + 2
    });
    let rss_after_kib = rss_kib(pid);
    eprintln!(
        "daemon after the crowd: settled in {} ms; threads {:?} (before {threads_before}), fds before {fds_before}; RSS {rss_before_kib} KiB before, {rss_after_kib} KiB after",
        settled.as_millis(),
        threads_and_fds(pid),
    );
    assert!(
        rss_after_kib < rss_before_kib + 64 * 1024,
        "{rss_before_kib} → {rss_after_kib} KiB"
    );
    let output = daemon
        .client(&machine, &["apply", "--power-limit", "300W"])
        .output()
        .expect("the client runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
}
