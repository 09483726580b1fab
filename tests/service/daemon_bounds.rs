//! The daemon's bounds against a member of its group and other users, as real processes on
//! the fake libnvidia-ml (the set-up and the abusive client of `daemon_clients.rs`): 5,000
//! sessions that hold nothing leave another user's trial served and the daemon small; 64
//! trickling and idle connections of four users leave root served, and are closed (the hello
//! deadline holds against a trickle, greeted connections that hold nothing time out).

use std::io::BufRead;
use std::time::{Duration, Instant};

use common::daemon::{Daemon, trial_arguments, wait_until};
use common::raw::Raw;
use common::{FakeMachine, text};

use super::daemon_clients::{
    abuse_as_with, finish, open_to_everyone, rss_kib, sockets, threads_and_fds,
};
use crate::common;
use gputune_core::daemon::{IDLE_TIMEOUT_ENV, MAX_PER_USER, READER_SLOTS};
use gputune_core::tuning::engine::MAX_SESSION_CARDS_PER_CLIENT;
use gputune_formats::card::Setting;
use gputune_formats::protocol::Request;
use gputune_formats::tuning::TrialRequest;

/// A daemon whose group is the primary group of the system's `nobody`, so that `nobody` is a
/// member who may write, reachable by every user; `None`, said, when this process is not root
/// or there is no such user.
fn daemon_with_a_member(environment: &[(&str, &str)]) -> Option<(FakeMachine, Daemon, u32)> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("needs root to connect as other users; CI runs as root");
        return None;
    }
    let member = nix::unistd::User::from_name("nobody").ok().flatten()?;
    let group = nix::unistd::Group::from_gid(member.gid).ok().flatten()?;
    if member.uid.as_raw() != member.gid.as_raw() {
        eprintln!("nobody's uid and gid differ here; the abuser runs with one number for both");
        return None;
    }
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start_with(&machine, &["--group", &group.name], environment);
    open_to_everyone(&daemon);
    Some((machine, daemon, member.uid.as_raw()))
}

/// Round trips of one root connection: greet, then `snapshot`.
fn snapshot_round_trip(daemon: &Daemon) -> Duration {
    let started = Instant::now();
    let mut raw = Raw::connect(&daemon.socket);
    raw.hello("root, asking");
    let snapshot = raw.ask(2, Request::Snapshot);
    assert!(snapshot.contains("\"snapshot\""), "{snapshot}");
    started.elapsed()
}

#[test]
fn five_thousand_empty_sessions_of_one_member_leave_another_users_trial_served() {
    let Some((machine, daemon, member)) = daemon_with_a_member(&[]) else {
        return;
    };
    let pid = daemon.child.id();
    let rss_before_kib = rss_kib(pid);

    // One member asks for 5,000 sessions that hold nothing on GPU 0, and keeps what it got.
    let asking = Instant::now();
    let mut abuser = abuse_as_with(
        member,
        &daemon.socket,
        "sessions",
        5_000,
        120,
        &[&machine.uuid(0)],
    );
    let mut report = String::new();
    let stdout = abuser.stdout.take().expect("the abuser's output is piped");
    std::io::BufReader::new(stdout)
        .read_line(&mut report)
        .expect("the abuser reports");
    let asked_in = asking.elapsed();
    eprintln!("{} in {} ms", report.trim(), asked_in.as_millis());
    let started: usize = report
        .split(", ")
        .find_map(|part| part.strip_suffix(" started"))
        .and_then(|count| count.parse().ok())
        .expect("a count of sessions started");
    assert!(report.contains("5000 asked"), "{report}");
    assert!(started <= MAX_SESSION_CARDS_PER_CLIENT, "{report}");
    assert!(report.contains("one client may have at most"), "{report}");

    // Meanwhile root starts and ends a trial on the same card, at once, and with the real
    // client (which refuses messages longer than the protocol allows).
    let mut root = Raw::connect(&daemon.socket);
    root.hello("root's trial");
    let trial_started = Instant::now();
    let answer = root.ask(
        2,
        Request::StartTrial {
            trial: TrialRequest {
                gpu_uuid: machine.uuid(0),
                settings: vec![Setting::PowerLimit {
                    power_limit_mw: 300_000,
                }],
                duration_s: 60,
                baseline_s: 0,
            },
        },
    );
    let trial_answer = trial_started.elapsed();
    assert!(answer.contains("\"trial\""), "{answer}");
    let finished = root.ask(
        3,
        Request::FinishTrial {
            gpu_uuid: machine.uuid(0),
            keep: false,
        },
    );
    assert!(finished.contains("\"trial\""), "{finished}");
    drop(root);
    let command_started = Instant::now();
    let output = daemon
        .client(&machine, &trial_arguments("1"))
        .output()
        .expect("the client runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let command_took = command_started.elapsed();
    let snapshot = snapshot_round_trip(&daemon);
    let rss_held_kib = rss_kib(pid);
    eprintln!(
        "beside {started} empty sessions (5,000 asked): root's trial answered in {} ms, `apply --try 1` took {} ms, a snapshot round trip {} ms; daemon RSS {rss_before_kib} KiB before, {rss_held_kib} KiB while held",
        trial_answer.as_millis(),
        command_took.as_millis(),
        snapshot.as_millis()
    );
    // The issue asks for a second; these bounds only catch a hang on a busy machine.
    assert!(trial_answer < Duration::from_secs(10), "{trial_answer:?}");
    assert!(rss_held_kib < 50 * 1024, "{rss_held_kib} KiB");

    // The member goes away: its sessions end at once.
    let _ = abuser.kill();
    let _ = abuser.wait();
    let closed = wait_until("the member's sessions end", || {
        let mut raw = Raw::connect(&daemon.socket);
        raw.hello("root, looking");
        !raw.ask(2, Request::Snapshot).contains("\"purpose\"")
    });
    eprintln!(
        "the member's sessions ended {} ms after it went away; RSS {} KiB",
        closed.as_millis(),
        rss_kib(pid)
    );
    assert!(rss_kib(pid) < 50 * 1024);
}

#[test]
fn sixty_four_trickling_and_idle_connections_of_four_users_leave_root_served() {
    let idle_s = "2";
    let Some((machine, daemon, member)) = daemon_with_a_member(&[(IDLE_TIMEOUT_ENV, idle_s)])
    else {
        return;
    };
    let pid = daemon.child.id();
    let mut first = Raw::connect(&daemon.socket);
    first.hello("first");
    drop(first);
    std::thread::sleep(Duration::from_millis(500));
    let sockets_before = sockets(pid);
    let (threads_before, fds_before) = threads_and_fds(pid);
    let rss_before_kib = rss_kib(pid);

    // Three users who may only read (hellos a byte a second, greeted and silent, silent) and
    // one member (greeted and silent), 16 connections each, opened again when closed.
    let abuse_s = 14;
    let socket = &daemon.socket;
    let crowd = [
        abuse_as_with(64_001, socket, "trickle", MAX_PER_USER, abuse_s, &[]),
        abuse_as_with(64_002, socket, "quiet", MAX_PER_USER, abuse_s, &[]),
        abuse_as_with(64_003, socket, "idle", MAX_PER_USER, abuse_s, &[]),
        abuse_as_with(member, socket, "quiet", MAX_PER_USER, abuse_s, &[]),
    ];
    let until = Instant::now() + Duration::from_secs(abuse_s - 2);
    wait_until("the crowd holds every slot it may take", || {
        sockets(pid) + 4 >= sockets_before + READER_SLOTS + MAX_PER_USER
    });

    // Root applies, and asks, over and over, while they hold everything they may.
    let (mut applies, mut round_trips) = (0, Vec::new());
    while Instant::now() < until {
        let watts = format!("{}W", 300 + applies % 2 * 10);
        let output = daemon
            .client(&machine, &["apply", "--power-limit", &watts])
            .output()
            .expect("the client runs");
        assert!(output.status.success(), "{}", text(&output.stderr));
        applies += 1;
        round_trips.push(snapshot_round_trip(&daemon));
        std::thread::sleep(Duration::from_millis(300));
    }
    let rss_held_kib = rss_kib(pid);
    let reports: Vec<String> = crowd.into_iter().map(finish).collect();
    round_trips.sort();
    eprintln!(
        "crowd: {reports:#?}\nroot: {applies} applies, snapshot round trips median {} ms, worst {} ms; daemon RSS {rss_before_kib} KiB before, {rss_held_kib} KiB with the crowd",
        round_trips[round_trips.len() / 2].as_millis(),
        round_trips[round_trips.len() - 1].as_millis(),
    );
    assert!(applies >= 2, "{applies}");
    // Trickled hellos (the deadline holds against a trickle) and greeted connections that
    // hold nothing (the idle timeout) are closed by the daemon, again and again.
    let closed = |report: &str| -> u64 {
        report
            .split(", ")
            .find_map(|part| part.strip_suffix(" closed by the daemon"))
            .and_then(|count| count.parse().ok())
            .unwrap_or(0)
    };
    for report in &reports[..2] {
        assert!(closed(report) >= MAX_PER_USER as u64, "{report}");
    }
    assert!(closed(&reports[3]) >= MAX_PER_USER as u64, "{}", reports[3]);

    wait_until("every connection of the crowd is let go", || {
        let (threads, fds) = threads_and_fds(pid);
        threads <= threads_before + 2 && fds <= fds_before + 2
    });
}

#[test]
fn a_trickled_hello_meets_its_deadline_and_only_connections_that_hold_nothing_time_out() {
    let machine = FakeMachine::new("rtx4090", "");
    let daemon = Daemon::start_with(&machine, &[], &[(IDLE_TIMEOUT_ENV, "1")]);

    // A hello a byte every 200 ms (15 s for the whole line) is closed at the 3 s deadline.
    let mut trickle = Raw::connect(&daemon.socket);
    let started = Instant::now();
    let hello = br#"{"id":1,"request":{"type":"hello","protocol":5,"client":"a byte at a time"}}"#;
    for byte in hello {
        if trickle.send(std::slice::from_ref(byte)).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    let said = trickle.line().unwrap_or_default();
    let took = started.elapsed();
    assert!(said.contains("No hello within 3 s"), "{said}");
    assert!(took < Duration::from_secs(6), "{took:?}");

    // Greeted and silent, holding nothing: closed after the idle timeout, with the reason.
    let mut silent = Raw::connect(&daemon.socket);
    silent.hello("silent");
    let said = silent.line().unwrap_or_default();
    assert!(said.contains("sent nothing for 1 s"), "{said}");
    assert_eq!(silent.line(), None, "closed after the reason");

    // A subscriber and a session holder stay, however silent.
    let mut subscriber = Raw::connect(&daemon.socket);
    subscriber.hello("subscriber");
    let done = subscriber.ask(2, Request::Subscribe { interval_ms: 1000 });
    assert!(done.contains("\"done\""), "{done}");
    let mut holder = Raw::connect(&daemon.socket);
    holder.hello("holder");
    let started = holder.ask(
        2,
        Request::StartSession {
            session: gputune_formats::tuning::SessionRequest {
                purpose: gputune_formats::tuning::SessionPurpose::Stability,
                changes: vec![gputune_formats::tuning::GpuChange {
                    gpu_uuid: machine.uuid(0),
                    settings: Vec::new(),
                }],
                fan_curves: Vec::new(),
                job_pid: None,
                job: None,
            },
        },
    );
    assert!(started.contains("session_started"), "{started}");
    std::thread::sleep(Duration::from_secs(3));
    for raw in [&mut subscriber, &mut holder] {
        let snapshot = raw.ask(3, Request::Snapshot);
        assert!(snapshot.contains("\"snapshot\""), "{snapshot}");
    }
}
