//! One client's connection: a reader thread (request lines in) and a writer thread (the
//! service's messages out). Whatever ends one side ends the other and tells the service at
//! once, so a client's death ends its sessions however many answers it left unread:
//!
//! - the writer gives up on a client that has not taken an answer for [`WRITE_PATIENCE`], or
//!   that the service dropped for not reading (its backlog full), and closes the socket;
//! - the reader stops reading while [`MAX_IN_FLIGHT`] answers are unsent, but keeps watching
//!   the socket for the peer hanging up and the writer giving up;
//! - a connection must say `hello` within [`HELLO_DEADLINE`] (the whole line, however slowly
//!   it trickles), and a greeted one that holds nothing is closed after [`IDLE_TIMEOUT`] of
//!   silence.
//!
//! The slot, the two threads and the one descriptor are freed when both threads end.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::slots::Slot;
use crate::service::{Input, Service};
use crate::tuning::engine::ClientInfo;
use gputune_formats::protocol::{
    MAX_REQUEST_BYTES, Message, Request, Response, parse_request_line,
};
use gputune_formats::tuning::{ClientId, TuneError, TuneErrorKind};

/// The most requests of one client waiting for an answer; past that the daemon stops reading
/// from it until it catches up.
const MAX_IN_FLIGHT: usize = 32;
/// How long a new connection has to say `hello` (its whole line, however it trickles).
pub const HELLO_DEADLINE: Duration = Duration::from_secs(3);
/// How long a greeted connection that holds nothing (no session, no subscription) may stay
/// silent before its slot is taken back. Every long-lived client holds something (a window
/// subscribes, `run` and trials hold sessions), so the protocol needs no keepalive.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Seconds that replace [`IDLE_TIMEOUT`] (for tests).
pub const IDLE_TIMEOUT_ENV: &str = "GPUTUNE_DAEMON_IDLE_S";
/// How long the reader waits for the service to say whether an idle client holds anything.
const IDLE_ANSWER_PATIENCE: Duration = Duration::from_secs(5);
/// How long one message may wait for the client to read it before the client is dropped.
pub const WRITE_PATIENCE: Duration = Duration::from_secs(10);
/// How often a reader held back by unsent answers looks at the socket.
const HANG_UP_POLL_MS: u16 = 50;
/// Linux's POLLRDHUP (the peer closed its end), which nix does not name; the same value on
/// every Linux architecture.
const POLL_PEER_CLOSED: PollFlags = PollFlags::from_bits_retain(0x2000);

/// What both threads of a connection share.
struct Connection {
    stream: UnixStream,
    closed: AtomicBool,
    in_flight: AtomicUsize,
    /// Given back when the last thread lets go.
    _slot: Slot,
}

impl Connection {
    /// Ends both directions: a blocked read returns end-of-file and a blocked write fails.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// Serves one accepted connection on two threads of its own.
pub(super) fn start(service: &Service, stream: UnixStream, client: ClientInfo, slot: Slot) {
    let id = client.id;
    let who = client.describe();
    let connection = Arc::new(Connection {
        stream,
        closed: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        _slot: slot,
    });
    let (outbox, messages) = Service::client_channel();
    let for_service = Arc::clone(&connection);
    service.open_client_with(
        client,
        outbox.clone(),
        Some(Box::new(move || for_service.close())),
    );
    let input = service.input();
    let writer_connection = Arc::clone(&connection);
    let writer = std::thread::Builder::new()
        .name(format!("gputune-client-{id}-out"))
        .spawn(move || write_messages(&writer_connection, &messages, &who));
    let reader_connection = Arc::clone(&connection);
    let reader_input = input.clone();
    let reader = std::thread::Builder::new()
        .name(format!("gputune-client-{id}-in"))
        .spawn(move || {
            read_requests(&reader_connection, id, &reader_input, &outbox);
            let _ = reader_input.send(Input::Closed { client: id });
            // The writer sends what is queued (an error reply) and closes the socket when the
            // last sender of its channel is gone.
            let _ = reader_connection.stream.shutdown(std::net::Shutdown::Read);
        });
    if writer.is_err() || reader.is_err() {
        tracing::error!("a connection's threads could not start");
        connection.close();
        let _ = input.send(Input::Closed { client: id });
    }
}

/// Reads request lines until the client closes, errs, breaks the rules, is dropped, or
/// idles past the idle timeout holding nothing.
fn read_requests(
    connection: &Connection,
    client: ClientId,
    input: &Sender<Input>,
    outbox: &SyncSender<Message>,
) {
    // The hello deadline is one instant, whatever arrives before it: a hello sent a byte at a
    // time does not stretch it.
    let hello_by = Instant::now() + HELLO_DEADLINE;
    let idle_timeout = idle_timeout_from_env();
    let mut greeted = false;
    let mut lines = LineReader::default();
    loop {
        if !wait_for_room(connection) {
            return;
        }
        let deadline = if greeted {
            Instant::now() + idle_timeout
        } else {
            hello_by
        };
        let line = match lines.next(&connection.stream, deadline) {
            Next::Line(line) => line,
            Next::Closed => return,
            Next::TooLong => {
                reply_error(
                    outbox,
                    0,
                    format!(
                        "A request may be at most {MAX_REQUEST_BYTES} bytes; this connection is closed."
                    ),
                );
                return;
            }
            Next::TimedOut if !greeted => {
                reply_error(outbox, 0, no_hello());
                return;
            }
            Next::TimedOut => {
                if connection.in_flight.load(Ordering::SeqCst) == 0 && holds_nothing(client, input)
                {
                    reply_error(outbox, 0, idle_closed(idle_timeout));
                    return;
                }
                continue;
            }
        };
        match parse_request_line(&line) {
            Ok(request) => {
                if !greeted {
                    if !matches!(request.request, Request::Hello { .. }) {
                        reply_error(
                            outbox,
                            request.id,
                            "The first request on a connection must be `hello`.".to_string(),
                        );
                        continue;
                    }
                    greeted = true;
                }
                connection.in_flight.fetch_add(1, Ordering::SeqCst);
                let sent = input.send(Input::Request {
                    client,
                    id: request.id,
                    request: request.request,
                });
                if sent.is_err() {
                    return;
                }
            }
            Err((id, message)) => reply_error(outbox, id, message),
        }
    }
}

/// Asks the service whether `client` holds nothing (no subscription, no session); a service
/// too busy to say in time is taken as "it holds something": the connection stays.
fn holds_nothing(client: ClientId, input: &Sender<Input>) -> bool {
    let (answer, answered) = std::sync::mpsc::sync_channel(1);
    if input
        .send(Input::Idle {
            client,
            holds_something: answer,
        })
        .is_err()
    {
        return false;
    }
    matches!(answered.recv_timeout(IDLE_ANSWER_PATIENCE), Ok(false))
}

/// The idle timeout: [`IDLE_TIMEOUT`], or [`IDLE_TIMEOUT_ENV`]'s seconds (1 to 3600; tests
/// shorten it).
fn idle_timeout_from_env() -> Duration {
    std::env::var(IDLE_TIMEOUT_ENV)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map_or(IDLE_TIMEOUT, |seconds| {
            Duration::from_secs(seconds.clamp(1, 3_600))
        })
}

fn idle_closed(idle_timeout: Duration) -> String {
    format!(
        "This connection sent nothing for {} s and holds no session or subscription; it is closed (connect again when needed).",
        idle_timeout.as_secs()
    )
}

/// What the next line read brought.
enum Next {
    Line(Vec<u8>),
    /// Longer than [`MAX_REQUEST_BYTES`].
    TooLong,
    /// The peer closed, or the socket failed (or was shut down by the service).
    Closed,
    /// The deadline passed with no whole line.
    TimedOut,
}

/// Splits the socket's bytes into lines, each by a deadline that holds however the bytes
/// trickle in (a read timeout alone would restart with every byte).
#[derive(Default)]
struct LineReader {
    pending: Vec<u8>,
    /// How much of `pending` holds no newline.
    scanned: usize,
}

impl LineReader {
    fn next(&mut self, stream: &UnixStream, deadline: Instant) -> Next {
        let mut chunk = [0u8; 8 * 1024];
        loop {
            if let Some(offset) = self.pending[self.scanned..]
                .iter()
                .position(|&byte| byte == b'\n')
            {
                let end = self.scanned + offset + 1;
                let line: Vec<u8> = self.pending.drain(..end).collect();
                self.scanned = 0;
                return if line.len() > MAX_REQUEST_BYTES {
                    Next::TooLong
                } else {
                    Next::Line(line)
                };
            }
            self.scanned = self.pending.len();
            if self.pending.len() > MAX_REQUEST_BYTES {
                return Next::TooLong;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Next::TimedOut;
            }
            if stream.set_read_timeout(Some(left)).is_err() {
                return Next::Closed;
            }
            match (&mut &*stream).read(&mut chunk) {
                Ok(0) => return Next::Closed,
                Ok(read) => self.pending.extend_from_slice(&chunk[..read]),
                Err(error)
                    if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    return Next::TimedOut;
                }
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Next::Closed,
            }
        }
    }
}

fn no_hello() -> String {
    format!(
        "No hello within {} s; this connection is closed.",
        HELLO_DEADLINE.as_secs()
    )
}

/// Back-pressure: a client that floods waits for its answers. Returns false when the
/// connection ended meanwhile (the peer hung up, or the writer gave up on it).
fn wait_for_room(connection: &Connection) -> bool {
    while connection.in_flight.load(Ordering::SeqCst) >= MAX_IN_FLIGHT {
        if connection.is_closed() || peer_hung_up(&connection.stream) {
            return false;
        }
    }
    !connection.is_closed()
}

/// Whether the peer closed its end (waits at most [`HANG_UP_POLL_MS`]). Requests it sent
/// before are not read: a dead client's queued requests are not acted on.
fn peer_hung_up(stream: &UnixStream) -> bool {
    let mut watched = [PollFd::new(stream.as_fd(), POLL_PEER_CLOSED)];
    match poll(&mut watched, PollTimeout::from(HANG_UP_POLL_MS)) {
        Ok(0) | Err(_) => false,
        Ok(_) => watched[0].revents().is_some_and(|events| {
            events.intersects(
                POLL_PEER_CLOSED | PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL,
            )
        }),
    }
}

fn reply_error(outbox: &SyncSender<Message>, id: u64, message: String) {
    let _ = outbox.try_send(Message::Response {
        id,
        response: Response::Error {
            error: TuneError::new(TuneErrorKind::Refused, message),
        },
    });
}

/// Writes the service's messages to the client, one JSON line each, until the service and the
/// reader let go of the channel or the client stops taking them.
fn write_messages(connection: &Connection, messages: &Receiver<Message>, who: &str) {
    let mut stream = &connection.stream;
    if stream.set_write_timeout(Some(WRITE_PATIENCE)).is_ok() {
        for message in messages {
            if matches!(message, Message::Response { .. }) {
                let _ = connection.in_flight.fetch_update(
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                    |count| count.checked_sub(1),
                );
            }
            if connection.is_closed() {
                break;
            }
            if let Err(error) = write_message(&mut stream, &message) {
                if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
                    tracing::warn!(
                        "{who} stopped reading its answers for {} s; disconnecting it",
                        WRITE_PATIENCE.as_secs()
                    );
                }
                break;
            }
        }
    }
    connection.close();
}

/// One message as one JSON line.
pub(super) fn write_message(stream: &mut impl Write, message: &Message) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)
}
