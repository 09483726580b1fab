//! Abuses a gputune daemon's socket the way a broken or hostile local program would, for
//! tests/service/daemon_clients.rs (run as another user by the test):
//!
//! ```text
//! socket_abuse SOCKET KIND COUNT SECONDS [GPU_UUID]
//!   idle     COUNT connections that never speak (opened again when the daemon closes one)
//!   trickle  COUNT connections that send their hello a byte a second, then only listen
//!   quiet    COUNT connections that say hello, then only listen
//!   deaf   COUNT connections that say hello, subscribe at 100 ms and send requests without
//!          ever reading (half close themselves after a while, half wait to be dropped)
//!   flood  COUNT connections that send requests and garbage as fast as they can, reading
//!          the answers, and open again after 500 lines
//!   sessions one connection that asks for COUNT sessions holding nothing on GPU_UUID, one
//!          after the other; prints what it got at once, then holds them for SECONDS
//!   job    one connection that starts a scheduler's job session (job id COUNT, 250 W on
//!          GPU_UUID), as the SPANK plugin does; prints its answer, then holds it for SECONDS
//! ```
//!
//! Each connection is a thread; every one stops after SECONDS (bounded in count and time).
//! Prints one line: what was opened, refused at once, and closed by the daemon.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    refused: AtomicU64,
    closed_by_daemon: AtomicU64,
    lines_sent: AtomicU64,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Idle,
    Trickle,
    Quiet,
    Deaf,
    Flood,
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let (Some(socket), Some(kind), Some(count), Some(seconds)) = (
        arguments.get(1),
        arguments.get(2),
        arguments
            .get(3)
            .and_then(|count| count.parse::<usize>().ok()),
        arguments
            .get(4)
            .and_then(|seconds| seconds.parse::<u64>().ok()),
    ) else {
        eprintln!(
            "usage: socket_abuse SOCKET idle|trickle|quiet|deaf|flood|sessions COUNT SECONDS [GPU_UUID]"
        );
        std::process::exit(2);
    };
    let until = Instant::now() + Duration::from_secs(seconds.min(600));
    if kind == "job" {
        let gpu_uuid = arguments.get(5).cloned().unwrap_or_default();
        job_session(&PathBuf::from(socket), &gpu_uuid, count, until);
        return;
    }
    if kind == "sessions" {
        let gpu_uuid = arguments.get(5).cloned().unwrap_or_default();
        empty_sessions(&PathBuf::from(socket), &gpu_uuid, count, until);
        return;
    }
    let kind = match kind.as_str() {
        "idle" => Kind::Idle,
        "trickle" => Kind::Trickle,
        "quiet" => Kind::Quiet,
        "deaf" => Kind::Deaf,
        "flood" => Kind::Flood,
        other => {
            eprintln!("unknown kind {other}");
            std::process::exit(2);
        }
    };
    let socket = PathBuf::from(socket);
    let counts = Arc::new(Counts::default());
    let threads: Vec<_> = (0..count.min(1_000))
        .map(|number| {
            let (socket, counts) = (socket.clone(), Arc::clone(&counts));
            std::thread::spawn(move || abuse(&socket, kind, number, until, &counts))
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    println!(
        "{}: {count} connections, {} opened, {} refused at once, {} closed by the daemon, {} lines sent",
        arguments[2],
        counts.opened.load(Ordering::SeqCst),
        counts.refused.load(Ordering::SeqCst),
        counts.closed_by_daemon.load(Ordering::SeqCst),
        counts.lines_sent.load(Ordering::SeqCst),
    );
}

fn abuse(socket: &PathBuf, kind: Kind, number: usize, until: Instant, counts: &Counts) {
    while Instant::now() < until {
        let Ok(stream) = UnixStream::connect(socket) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        counts.opened.fetch_add(1, Ordering::SeqCst);
        let outcome = match kind {
            Kind::Idle => idle(&stream, until),
            Kind::Trickle => trickle(&stream, until),
            Kind::Quiet => quiet(&stream, until),
            Kind::Deaf => deaf(&stream, number, until, counts),
            Kind::Flood => flood(&stream, until, counts),
        };
        match outcome {
            Outcome::Refused => {
                counts.refused.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(200));
            }
            Outcome::ClosedByDaemon => {
                counts.closed_by_daemon.fetch_add(1, Ordering::SeqCst);
            }
            Outcome::Left => {}
        }
    }
}

enum Outcome {
    /// The daemon said at once that it serves no more.
    Refused,
    ClosedByDaemon,
    /// This side let go (time up, or a deaf connection that closes itself).
    Left,
}

/// Reads what the daemon says first; a refusal comes as one error line.
fn refused(text: &str) -> bool {
    text.contains("already serves") || text.contains("keeps its last")
}

fn idle(stream: &UnixStream, until: Instant) -> Outcome {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(250)));
    let mut said = Vec::new();
    let mut buffer = [0u8; 4096];
    let mut reader = stream;
    while Instant::now() < until {
        match reader.read(&mut buffer) {
            Ok(0) => {
                return if refused(&String::from_utf8_lossy(&said)) {
                    Outcome::Refused
                } else {
                    Outcome::ClosedByDaemon
                };
            }
            Ok(read) => said.extend_from_slice(&buffer[..read]),
            Err(_) => {}
        }
    }
    Outcome::Left
}

/// Sends a hello a byte a second, watching for the daemon closing the connection meanwhile.
fn trickle(stream: &UnixStream, until: Instant) -> Outcome {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let hello =
        "{\"id\":1,\"request\":{\"type\":\"hello\",\"protocol\":5,\"client\":\"trickle\"}}\n";
    let mut said = Vec::new();
    let mut buffer = [0u8; 4096];
    let (mut writer, mut reader) = (stream, stream);
    for byte in hello.as_bytes() {
        if Instant::now() >= until {
            return Outcome::Left;
        }
        if writer.write_all(std::slice::from_ref(byte)).is_err() {
            return Outcome::ClosedByDaemon;
        }
        // Waits a second for anything the daemon says (a refusal, a closed connection).
        match reader.read(&mut buffer) {
            Ok(0) => {
                return if refused(&String::from_utf8_lossy(&said)) {
                    Outcome::Refused
                } else {
                    Outcome::ClosedByDaemon
                };
            }
            Ok(read) => said.extend_from_slice(&buffer[..read]),
            Err(_) => {}
        }
    }
    idle(stream, until)
}

/// One connection asking for `count` sessions that hold nothing, a batch at a time (reading
/// every answer); prints how many started and the first refusal, then holds what it got.
fn job_session(socket: &PathBuf, gpu_uuid: &str, job_id: usize, until: Instant) {
    let Ok(stream) = UnixStream::connect(socket) else {
        println!("job: cannot connect");
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut writer = &stream;
    let mut reader = std::io::BufReader::new(&stream);
    let lines = format!(
        "{{\"id\":1,\"request\":{{\"type\":\"hello\",\"protocol\":7,\"client\":\"job {job_id}\"}}}}\n\
         {{\"id\":2,\"request\":{{\"type\":\"start_session\",\"session\":{{\"purpose\":\"job\",\"changes\":[{{\"gpu_uuid\":\"{gpu_uuid}\",\"settings\":[{{\"type\":\"power_limit\",\"power_limit_mw\":250000}}]}}],\"fan_curves\":[],\"job\":{{\"scheduler\":\"slurm\",\"job_id\":\"{job_id}\",\"step\":\"batch\",\"user\":\"alice\",\"uid\":1000}}}}}}}}\n"
    );
    if writer.write_all(lines.as_bytes()).is_err() {
        println!("job: the daemon closed");
        return;
    }
    loop {
        let mut line = String::new();
        match std::io::BufRead::read_line(&mut reader, &mut line) {
            Ok(0) | Err(_) => {
                println!("job: no answer");
                return;
            }
            Ok(_) if line.starts_with("{\"id\":2,") => {
                println!("job: {}", line.trim());
                break;
            }
            Ok(_) => {}
        }
    }
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // Reads (and drops) what the daemon sends until the time is up or it is killed.
    let mut sink = [0u8; 4096];
    while Instant::now() < until {
        if let Ok(0) = (&stream).read(&mut sink) {
            return;
        }
    }
}

fn empty_sessions(socket: &PathBuf, gpu_uuid: &str, count: usize, until: Instant) {
    let Ok(stream) = UnixStream::connect(socket) else {
        println!("sessions: cannot connect");
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut writer = &stream;
    let mut reader = std::io::BufReader::new(&stream);
    let hello = "{\"id\":1,\"request\":{\"type\":\"hello\",\"protocol\":5,\"client\":\"empty sessions\"}}\n";
    let (mut started, mut refused_count, mut first_refusal) = (0u64, 0u64, String::new());
    let read_one = |reader: &mut std::io::BufReader<&UnixStream>| -> Option<String> {
        let mut line = String::new();
        match std::io::BufRead::read_line(reader, &mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    };
    if writer.write_all(hello.as_bytes()).is_err() || read_one(&mut reader).is_none() {
        println!("sessions: no welcome");
        return;
    }
    let batch = 16;
    let mut asked = 0;
    'asking: while asked < count && Instant::now() < until {
        let this_batch = batch.min(count - asked);
        let lines: String = (0..this_batch)
            .map(|offset| {
                format!(
                    "{{\"id\":{},\"request\":{{\"type\":\"start_session\",\"session\":{{\"purpose\":\"run\",\"changes\":[{{\"gpu_uuid\":\"{gpu_uuid}\",\"settings\":[]}}],\"fan_curves\":[]}}}}}}\n",
                    10 + asked + offset
                )
            })
            .collect();
        if writer.write_all(lines.as_bytes()).is_err() {
            break;
        }
        asked += this_batch;
        let mut answered = 0;
        while answered < this_batch {
            let Some(line) = read_one(&mut reader) else {
                break 'asking;
            };
            if !line.starts_with("{\"id\":") {
                continue;
            }
            answered += 1;
            if line.contains("\"session_started\"") {
                started += 1;
            } else {
                refused_count += 1;
                if first_refusal.is_empty() {
                    first_refusal = line.trim().to_string();
                }
            }
        }
    }
    println!(
        "sessions: {asked} asked, {started} started, {refused_count} refused; first refusal: {first_refusal}"
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn quiet(stream: &UnixStream, until: Instant) -> Outcome {
    let mut writer = stream;
    let hello = "{\"id\":1,\"request\":{\"type\":\"hello\",\"protocol\":3,\"client\":\"quiet\"}}\n";
    if writer.write_all(hello.as_bytes()).is_err() {
        return Outcome::ClosedByDaemon;
    }
    idle(stream, until)
}

fn deaf(stream: &UnixStream, number: usize, until: Instant, counts: &Counts) -> Outcome {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    let mut writer = stream;
    let greeting = "{\"id\":1,\"request\":{\"type\":\"hello\",\"protocol\":3,\"client\":\"deaf\"}}\n{\"id\":2,\"request\":{\"type\":\"subscribe\",\"interval_ms\":100}}\n";
    if writer.write_all(greeting.as_bytes()).is_err() {
        return Outcome::ClosedByDaemon;
    }
    // Half of them give up by themselves after 1 to 4 s; the rest wait to be dropped.
    let leaves_at = number
        .is_multiple_of(2)
        .then(|| Instant::now() + Duration::from_millis(1_000 + (number as u64 * 379) % 3_000));
    let mut id = 3u64;
    while Instant::now() < until {
        if leaves_at.is_some_and(|at| Instant::now() >= at) {
            return Outcome::Left;
        }
        let line = format!("{{\"id\":{id},\"request\":{{\"type\":\"snapshot\"}}}}\n");
        match writer.write_all(line.as_bytes()) {
            Ok(()) => {
                counts.lines_sent.fetch_add(1, Ordering::SeqCst);
                id += 1;
            }
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                // Whether it was refused at once cannot be told without reading; it was not
                // (it said hello), so the daemon dropped it.
                return Outcome::ClosedByDaemon;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Outcome::Left
}

fn flood(stream: &UnixStream, until: Instant, counts: &Counts) -> Outcome {
    let Ok(reader) = stream.try_clone() else {
        return Outcome::Left;
    };
    let draining = std::thread::spawn(move || {
        let mut reader = reader;
        let mut first = Vec::new();
        let mut buffer = [0u8; 65_536];
        loop {
            match reader.read(&mut buffer) {
                Ok(0) | Err(_) => return first,
                Ok(read) => {
                    if first.len() < 4096 {
                        first.extend_from_slice(&buffer[..read.min(4096)]);
                    }
                }
            }
        }
    });
    let mut writer = stream;
    let _ = writer.set_write_timeout(Some(Duration::from_secs(2)));
    let mut outcome = Outcome::Left;
    let hello = "{\"id\":1,\"request\":{\"type\":\"hello\",\"protocol\":3,\"client\":\"flood\"}}\n";
    if writer.write_all(hello.as_bytes()).is_ok() {
        for id in 2..500u64 {
            if Instant::now() >= until {
                break;
            }
            let line = match id % 4 {
                0 => format!("{{\"id\":{id},\"request\":{{\"type\":\"snapshot\"}}}}\n"),
                1 => format!("{{\"id\":{id},\"request\":{{\"type\":\"boot_defaults\"}}}}\n"),
                2 => format!("{{\"id\":{id},\"request\":{{\"type\":\"nonsense{id}\"}}}}\n"),
                _ => "\u{1b}[2J not json at all \u{202e}\n".to_string(),
            };
            if writer.write_all(line.as_bytes()).is_err() {
                outcome = Outcome::ClosedByDaemon;
                break;
            }
            counts.lines_sent.fetch_add(1, Ordering::SeqCst);
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let first = draining.join().unwrap_or_default();
    if refused(&String::from_utf8_lossy(&first)) {
        Outcome::Refused
    } else {
        outcome
    }
}
