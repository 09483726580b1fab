//! The socket: created safely (never over a file that is not a stale socket of ours), group
//! `gputune`, mode 0660; one reader and one writer thread per connection; bounded lines,
//! bounded requests in flight, bounded connections. A malformed, huge or unknown request gets
//! an error reply (or, past the size limit, the connection closed); the daemon stays up.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::time::Duration;

use anyhow::{Context, bail};

use super::peer::peer_of;
use crate::service::protocol::{MOST_REQUEST_BYTES, Message, Response, parse_request_line};
use crate::service::{Input, Service};
use crate::tuning::engine::{ClientId, ClientInfo, TuneError, TuneErrorKind};

/// The most clients connected at once.
pub const MOST_CONNECTIONS: usize = 64;
/// The most requests of one client waiting for an answer; past that the daemon stops reading
/// from it until it catches up.
const MOST_IN_FLIGHT: usize = 32;

/// Serves until SIGTERM / SIGINT; removes the socket on the way out.
pub fn serve(service: &Service, socket: &Path, group: &str) -> anyhow::Result<()> {
    let listener = bind(socket, group)?;
    listener
        .set_nonblocking(true)
        .context("The socket cannot be made non-blocking")?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    ctrlc::set_handler(move || stopping.store(true, Ordering::SeqCst))
        .context("The SIGTERM handler could not be installed")?;
    eprintln!(
        "gputune daemon: listening on {} ({} GPU(s), {} backend)",
        socket.display(),
        service.welcome().gpus.len(),
        service.welcome().backend.as_str()
    );
    let connections = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => accept(service, stream, group, &connections),
            Err(error) if error.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(error) => {
                tracing::warn!("accepting a connection failed: {error}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let _ = std::fs::remove_file(socket);
    eprintln!("gputune daemon: stopping; putting every session's cards back");
    Ok(())
}

/// Binds the socket: a stale socket of a dead daemon is replaced, anything else is refused.
fn bind(socket: &Path, group: &str) -> anyhow::Result<UnixListener> {
    match std::fs::symlink_metadata(socket) {
        Ok(metadata) if metadata.file_type().is_socket() => {
            if UnixStream::connect(socket).is_ok() {
                bail!(
                    "Another gputune daemon is already listening on {}.",
                    socket.display()
                );
            }
            std::fs::remove_file(socket).with_context(|| {
                format!("The stale socket {} cannot be removed", socket.display())
            })?;
        }
        Ok(_) => bail!(
            "{} exists and is not a socket; the daemon will not replace it. Remove it if it is not needed.",
            socket.display()
        ),
        Err(error) if error.kind() == ErrorKind::NotFound => {}
        Err(error) => bail!("{} cannot be checked: {error}", socket.display()),
    }
    if let Some(folder) = socket.parent()
        && !folder.as_os_str().is_empty()
        && !folder.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(folder)
            .with_context(|| format!("The folder {} cannot be created", folder.display()))?;
    }
    let listener = UnixListener::bind(socket)
        .with_context(|| format!("The socket {} cannot be created", socket.display()))?;
    let group_id = nix::unistd::Group::from_name(group)
        .ok()
        .flatten()
        .map(|group| group.gid);
    let mode = match group_id {
        Some(gid) => match nix::unistd::chown(socket, None, Some(gid)) {
            Ok(()) => 0o660,
            Err(error) => {
                tracing::warn!(
                    "the socket cannot be given to the group {group}: {error}; only its owner can use it"
                );
                0o600
            }
        },
        None => {
            tracing::warn!(
                "there is no group \"{group}\": only root can use the daemon (create it with `sudo groupadd --system {group}`)"
            );
            0o600
        }
    };
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("The socket {} cannot be restricted", socket.display()))?;
    Ok(listener)
}

/// Sets up one connection: its peer, its client slot, its reader and writer threads.
fn accept(service: &Service, stream: UnixStream, group: &str, connections: &Arc<AtomicUsize>) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    if connections.load(Ordering::SeqCst) >= MOST_CONNECTIONS {
        let message = Message::Response {
            id: 0,
            response: Response::Error {
                error: TuneError::new(
                    TuneErrorKind::Refused,
                    format!(
                        "The gputune daemon already serves {MOST_CONNECTIONS} clients; try again later."
                    ),
                ),
            },
        };
        let _ = write_message(&mut &stream, &message);
        return;
    }
    let peer = peer_of(&stream, group);
    let id = service.next_client_id();
    let client = ClientInfo {
        id,
        pid: peer.as_ref().map(|peer| peer.pid),
        uid: peer.as_ref().map(|peer| peer.uid),
        user: peer.as_ref().and_then(|peer| peer.user.clone()),
        label: format!("client {id}"),
        may_write: peer.as_ref().is_some_and(|peer| peer.may_write),
    };
    let Ok(writer_stream) = stream.try_clone() else {
        return;
    };
    let (outbox, messages) = Service::client_channel();
    service.open_client_with(client, outbox.clone());
    let input = service.input();
    let in_flight = Arc::new(AtomicUsize::new(0));
    connections.fetch_add(1, Ordering::SeqCst);
    let writer_in_flight = Arc::clone(&in_flight);
    let writer = std::thread::Builder::new()
        .name(format!("gputune-client-{id}-out"))
        .spawn(move || write_messages(writer_stream, &messages, &writer_in_flight));
    let reader_connections = Arc::clone(connections);
    let reader = std::thread::Builder::new()
        .name(format!("gputune-client-{id}-in"))
        .spawn(move || {
            read_requests(&stream, id, &input, &outbox, &in_flight);
            let _ = input.send(Input::Closed { client: id });
            // The writer sends what is queued (an error reply) and closes the socket when the
            // last sender of its channel is gone.
            let _ = stream.shutdown(std::net::Shutdown::Read);
            drop(outbox);
            reader_connections.fetch_sub(1, Ordering::SeqCst);
        });
    if writer.is_err() || reader.is_err() {
        tracing::error!("a connection's threads could not start");
    }
}

/// Reads request lines until the client closes, errs or breaks the rules.
fn read_requests(
    stream: &UnixStream,
    client: ClientId,
    input: &Sender<Input>,
    outbox: &SyncSender<Message>,
    in_flight: &AtomicUsize,
) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        // Back-pressure: a client that floods waits for its answers.
        while in_flight.load(Ordering::SeqCst) >= MOST_IN_FLIGHT {
            std::thread::sleep(Duration::from_millis(5));
        }
        line.clear();
        let limit = (MOST_REQUEST_BYTES + 1) as u64;
        match (&mut reader).take(limit).read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(_) => return,
        }
        if line.len() > MOST_REQUEST_BYTES || line.last() != Some(&b'\n') {
            if line.len() > MOST_REQUEST_BYTES {
                reply_error(
                    outbox,
                    0,
                    format!(
                        "A request may be at most {MOST_REQUEST_BYTES} bytes; this connection is closed."
                    ),
                );
            }
            return;
        }
        match parse_request_line(&line) {
            Ok(request) => {
                in_flight.fetch_add(1, Ordering::SeqCst);
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

fn reply_error(outbox: &SyncSender<Message>, id: u64, message: String) {
    let _ = outbox.try_send(Message::Response {
        id,
        response: Response::Error {
            error: TuneError::new(TuneErrorKind::Refused, message),
        },
    });
}

/// Writes the service's messages to the client, one JSON line each.
fn write_messages(stream: UnixStream, messages: &Receiver<Message>, in_flight: &AtomicUsize) {
    let mut stream = stream;
    // A client that does not read for this long is gone as far as the daemon is concerned.
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    for message in messages {
        if matches!(message, Message::Response { .. }) {
            let _ = in_flight.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |count| {
                count.checked_sub(1)
            });
        }
        if write_message(&mut stream, &message).is_err() {
            break;
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn write_message(stream: &mut impl Write, message: &Message) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)
}
