//! The metrics endpoint: one thread (`gputune-metrics-http`) that serves every connection
//! through `poll(2)`, non-blocking. Each connection gets a deadline to send its request head
//! (at most 8 KiB) and another to take its answer; past either it is closed. An idle or
//! trickling client costs a file descriptor and a small buffer, never a thread, and when the
//! connections are at their limit the oldest one is closed to make room, so a flood of hostile
//! connections cannot keep Prometheus out. Answers are the published bytes, copied by pointer.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::feed::Published;
use super::http::{self, MAX_REQUEST_BYTES, Parsed};

/// What one connection may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From the connection's start to its complete request head.
    pub request_timeout: Duration,
    /// From the answer's start to its last byte taken by the client.
    pub answer_timeout: Duration,
    /// Connections open at once; past it the oldest is closed.
    pub most_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            request_timeout: Duration::from_secs(10),
            answer_timeout: Duration::from_secs(10),
            most_connections: 256,
        }
    }
}

/// How long accepting pauses after the system refused a connection (no file descriptors left).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// How long a closing connection's leftover input is read, so the close is clean.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Reads or writes one connection makes before the others get their turn.
const MAX_STEPS: usize = 64;

/// Binds the listening socket, with a message that says what to do when it cannot.
pub fn bind(address: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address).map_err(|error| {
        let advice = match error.kind() {
            ErrorKind::AddrInUse => format!(
                "another program listens there (another gputune exporter, dcgm-exporter?): choose another port, e.g. {}",
                SocketAddr::new(address.ip(), address.port().saturating_add(1))
            ),
            ErrorKind::PermissionDenied if address.port() < 1024 => {
                "ports below 1024 need root: choose a port above 1023".to_string()
            }
            ErrorKind::AddrNotAvailable => {
                "that address is not one of this machine's: use 127.0.0.1, 0.0.0.0 or one of its addresses".to_string()
            }
            _ if error.raw_os_error() == Some(nix::libc::EAFNOSUPPORT) => {
                "this process may not use network sockets (under systemd, gputuned.service allows only Unix sockets: see docs/metrics.md for the drop-in that allows TCP)".to_string()
            }
            _ => "check the address and port".to_string(),
        };
        anyhow::anyhow!("Cannot listen for metrics on {address}: {error}; {advice}.")
    })
}

/// The running endpoint.
pub struct Server {
    stop: Arc<AtomicBool>,
    waker: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `published` on `listener` until stopped.
    pub fn start(
        listener: TcpListener,
        published: Arc<Published>,
        limits: Limits,
    ) -> std::io::Result<Server> {
        listener.set_nonblocking(true)?;
        let (waker, woken) = UnixStream::pair()?;
        woken.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("gputune-metrics-http".to_string())
            .spawn(move || serve(&listener, &woken, &published, limits, &stopping))?;
        Ok(Server {
            stop,
            waker,
            thread: Some(thread),
        })
    }

    /// Stops serving; open connections are closed.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = (&self.waker).write(&[1]);
        if let Some(thread) = self.thread.take()
            && !crate::join::join_within(thread, std::time::Duration::from_secs(5))
        {
            tracing::warn!("the metrics endpoint did not stop; not waiting for it");
        }
    }
}

enum Phase {
    Reading(Vec<u8>),
    Answering {
        head: Vec<u8>,
        body: Option<Arc<Vec<u8>>>,
        written: usize,
    },
    Draining,
}

struct Connection {
    stream: TcpStream,
    phase: Phase,
    deadline: Instant,
}

fn serve(
    listener: &TcpListener,
    woken: &UnixStream,
    published: &Published,
    limits: Limits,
    stop: &AtomicBool,
) {
    let mut connections: Vec<Connection> = Vec::new();
    let mut accept_paused_until: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let accepting = accept_paused_until.is_none_or(|until| now >= until);
        let wait = connections
            .iter()
            .map(|connection| connection.deadline)
            .chain(accept_paused_until.filter(|_| !accepting))
            .min()
            .map(|deadline| deadline.saturating_duration_since(now));
        let (listener_ready, waker_ready, ready) = {
            let mut fds = Vec::with_capacity(connections.len() + 2);
            fds.push(PollFd::new(woken.as_fd(), PollFlags::POLLIN));
            if accepting {
                fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            }
            for connection in &connections {
                let events = match connection.phase {
                    Phase::Answering { .. } => PollFlags::POLLOUT,
                    Phase::Reading(_) | Phase::Draining => PollFlags::POLLIN,
                };
                fds.push(PollFd::new(connection.stream.as_fd(), events));
            }
            let timeout = wait.map_or(PollTimeout::NONE, |wait| {
                // Round up, so a deadline is not polled for again a moment too early.
                let millis = wait.as_millis().saturating_add(1).min(60_000);
                PollTimeout::try_from(millis as u64).unwrap_or(PollTimeout::MAX)
            });
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(error) => {
                    tracing::error!("the metrics endpoint stopped: poll failed ({error})");
                    return;
                }
            }
            let is_ready = |fd: &PollFd| fd.revents().is_some_and(|events| !events.is_empty());
            let offset = if accepting { 2 } else { 1 };
            (
                accepting && is_ready(&fds[1]),
                is_ready(&fds[0]),
                fds[offset..].iter().map(is_ready).collect::<Vec<bool>>(),
            )
        };
        if waker_ready {
            let _ = (&*woken).read(&mut [0; 16]);
        }
        let now = Instant::now();
        let mut keep = Vec::with_capacity(connections.len());
        for (connection, ready) in connections.into_iter().zip(ready) {
            let connection = if ready {
                progress(connection, published, limits, now)
            } else {
                Some(connection)
            };
            if let Some(connection) = connection.filter(|c| now < c.deadline) {
                keep.push(connection);
            }
        }
        connections = keep;
        if listener_ready {
            accept_paused_until = accept(listener, &mut connections, limits);
        }
    }
}

/// Accepts every waiting connection; returns until when to pause accepting, if the system
/// refused one.
fn accept(
    listener: &TcpListener,
    connections: &mut Vec<Connection>,
    limits: Limits,
) -> Option<Instant> {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let _ = stream.set_nodelay(true);
                if connections.len() >= limits.most_connections.max(1) {
                    // The oldest connection is the likeliest to be an idle or hostile one.
                    connections.remove(0);
                }
                connections.push(Connection {
                    stream,
                    phase: Phase::Reading(Vec::new()),
                    deadline: Instant::now() + limits.request_timeout,
                });
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => return None,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => {
                // Out of file descriptors, or a connection reset before it was accepted.
                tracing::debug!("accepting a metrics connection failed: {error}");
                if connections.len() >= 2 {
                    connections.remove(0);
                }
                return Some(Instant::now() + ACCEPT_PAUSE);
            }
        }
    }
}

/// Moves one connection on as far as it can go without blocking; `None` when it is done.
fn progress(
    mut connection: Connection,
    published: &Published,
    limits: Limits,
    now: Instant,
) -> Option<Connection> {
    // Bounded, so a client that sends without end cannot keep the thread from the others.
    for _ in 0..MAX_STEPS {
        match &mut connection.phase {
            Phase::Reading(received) => {
                let mut chunk = [0u8; 2048];
                match connection.stream.read(&mut chunk) {
                    Ok(0) => return None,
                    Ok(count) => {
                        let room = (MAX_REQUEST_BYTES + 4).saturating_sub(received.len());
                        received.extend_from_slice(&chunk[..count.min(room)]);
                        if let Parsed::Answer(route) = http::parse(received) {
                            let body = published.body();
                            let (head, body_follows) =
                                http::answer(route, body.as_ref().map(|body| body.len()));
                            connection.phase = Phase::Answering {
                                head,
                                body: body.filter(|_| body_follows),
                                written: 0,
                            };
                            connection.deadline = now + limits.answer_timeout;
                        }
                    }
                    Err(error) if error.kind() == ErrorKind::WouldBlock => return Some(connection),
                    Err(error) if error.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return None,
                }
            }
            Phase::Answering {
                head,
                body,
                written,
            } => {
                let head_len = head.len();
                let total = head_len + body.as_ref().map_or(0, |body| body.len());
                if *written >= total {
                    let _ = connection.stream.shutdown(Shutdown::Write);
                    connection.phase = Phase::Draining;
                    connection.deadline = now + DRAIN_TIMEOUT;
                    continue;
                }
                let pending = if *written < head_len {
                    &head[*written..]
                } else {
                    match body {
                        Some(body) => &body[*written - head_len..],
                        None => &[][..],
                    }
                };
                match connection.stream.write(pending) {
                    Ok(0) => return None,
                    Ok(count) => *written += count,
                    Err(error) if error.kind() == ErrorKind::WouldBlock => return Some(connection),
                    Err(error) if error.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return None,
                }
            }
            Phase::Draining => {
                let mut chunk = [0u8; 2048];
                match connection.stream.read(&mut chunk) {
                    Ok(0) => return None,
                    Ok(_) => {}
                    Err(error) if error.kind() == ErrorKind::WouldBlock => return Some(connection),
                    Err(error) if error.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return None,
                }
            }
        }
    }
    Some(connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving(limits: Limits) -> (Server, SocketAddr) {
        let listener = bind("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let published = Arc::new(Published::default());
        let server = Server::start(listener, published, limits).unwrap_or_else(|e| panic!("{e}"));
        (server, address)
    }

    fn answer_of(stream: &mut TcpStream) -> String {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }

    #[test]
    fn a_slow_client_is_closed_at_its_deadline_and_the_oldest_gives_way() {
        let limits = Limits {
            request_timeout: Duration::from_millis(300),
            answer_timeout: Duration::from_millis(300),
            most_connections: 4,
        };
        let (server, address) = serving(limits);
        let connect = || TcpStream::connect(address).unwrap_or_else(|e| panic!("{e}"));
        let mut slow = connect();
        let _ = slow.write_all(b"GET /met");
        let started = Instant::now();
        assert_eq!(answer_of(&mut slow), "", "closed without an answer");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(5));
        // Five idle connections where four fit: the first is closed at once.
        let mut idle: Vec<TcpStream> = (0..5).map(|_| connect()).collect();
        let started = Instant::now();
        assert_eq!(answer_of(&mut idle[0]), "");
        assert!(started.elapsed() < Duration::from_millis(250));
        // No body yet (the service not reached): 503, and the server goes on.
        let mut scrape = connect();
        let _ = scrape.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(answer_of(&mut scrape).starts_with("HTTP/1.1 503 "));
        server.stop();
        assert!(
            TcpStream::connect(address).is_err(),
            "the listener is closed"
        );
    }
}
