//! The socket: created safely (never over a file that is not a stale socket of ours), group
//! `gputune`, mode 0660; connections admitted by `slots` (bounded in all, per user, with slots
//! kept for users who may write and for root) and served by `connection` (two threads each,
//! bounded lines and requests in flight, a hello deadline, an idle timeout). The daemon stays
//! up whatever a client sends.

use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::connection;
use super::peer::peer_of;
use super::slots::{Applicant, Slots};
use crate::service::Service;
use crate::tuning::engine::ClientInfo;
use gputune_formats::protocol::{Message, Response};
use gputune_formats::tuning::{TuneError, TuneErrorKind};

/// Serves until SIGTERM / SIGINT; removes the socket on the way out.
pub fn serve(service: &Service, socket: &Path, group: &str) -> anyhow::Result<()> {
    let listener = bind(socket, group)?;
    listener
        .set_nonblocking(true)
        .context("The socket cannot be made non-blocking")?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    // The accept loop sleeps in poll(2) until a client or a signal comes (an idle daemon does
    // not wake on a timer): the handler writes to this pipe to wake it.
    let (woken, wake) = nix::unistd::pipe().context("The daemon's wake-up pipe cannot be made")?;
    ctrlc::set_handler(move || {
        stopping.store(true, Ordering::SeqCst);
        let _ = nix::unistd::write(&wake, b"!");
    })
    .context("The SIGTERM handler could not be installed")?;
    eprintln!(
        "gputune daemon: listening on {} ({} GPU(s), {} backend)",
        socket.display(),
        service.welcome().gpus.len(),
        service.welcome().backend.as_str()
    );
    let slots = Slots::new();
    while !stop.load(Ordering::SeqCst) {
        let mut watched = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(woken.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut watched, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(error) => {
                tracing::warn!("waiting for connections failed: {error}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match listener.accept() {
            Ok((stream, _)) => accept(service, stream, group, &slots),
            Err(error) if error.kind() == ErrorKind::WouldBlock => {}
            Err(error) => {
                tracing::warn!("accepting a connection failed: {error}");
                // Out of descriptors, say: a breath before trying again, not a busy loop.
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
        // Members of the group must reach the socket whatever the umask (the unit's is 0077).
        std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755)).with_context(
            || {
                format!(
                    "The folder {} cannot be opened to the group",
                    folder.display()
                )
            },
        )?;
    }
    if let Some(folder) = socket.parent()
        && let Ok(metadata) = std::fs::metadata(folder)
        && metadata.permissions().mode() & 0o011 == 0
    {
        tracing::warn!(
            "{} is open to its owner only: members of the group {group} cannot reach the socket (`chmod 755` it)",
            folder.display()
        );
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

/// Admits one connection (a slot by the rules in `slots`, or a one-line refusal) and starts
/// its threads.
fn accept(service: &Service, stream: UnixStream, group: &str, slots: &Arc<Slots>) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let peer = peer_of(&stream, group);
    let applicant = Applicant {
        uid: peer.as_ref().map(|peer| peer.uid),
        user: peer.as_ref().and_then(|peer| peer.user.clone()),
        may_write: peer.as_ref().is_some_and(|peer| peer.may_write),
        is_root: peer.as_ref().is_some_and(|peer| peer.is_root),
    };
    let slot = match slots.take(&applicant) {
        Ok(slot) => slot,
        Err(sentence) => {
            refuse(&stream, sentence);
            return;
        }
    };
    let id = service.next_client_id();
    let client = ClientInfo {
        id,
        pid: peer.as_ref().map(|peer| peer.pid),
        uid: applicant.uid,
        user: applicant.user,
        label: format!("client {id}"),
        may_write: applicant.may_write,
    };
    connection::start(service, stream, client, slot);
}

/// Tells a connection it is not served, as an error reply the client shows, and closes it.
fn refuse(stream: &UnixStream, sentence: String) {
    let message = Message::Response {
        id: 0,
        response: Response::Error {
            error: TuneError::new(TuneErrorKind::Refused, sentence),
        },
    };
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = connection::write_message(&mut &*stream, &message);
}
