//! A client of the tuning service, for the window and the CLI: the daemon through its socket
//! when one answers, else a service started in this process. The same requests either way.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::{Input, Service, ServiceOptions};
use crate::device::{BackendChoice, BackendOptions, open_backend};
use crate::folders::Folders;
use crate::tuning::engine::{ClientInfo, EngineOptions, Ownership};
use gputune_formats::protocol::{
    Event, MAX_MESSAGE_BYTES, Message, PROTOCOL_VERSION, Request, RequestLine, Response, Welcome,
};
use gputune_formats::tuning::{ClientId, TuneError, TuneErrorKind};

/// Environment variable naming the daemon's socket. Unset: the default path, when a daemon is
/// there. Empty: never use a daemon (run the engine in this process).
pub const SOCKET_ENV: &str = "GPUTUNE_SOCKET";
/// Where the daemon listens by default.
pub const DEFAULT_SOCKET: &str = "/run/gputune/gputune.sock";
/// How long a request may take before the client gives up on the service. Long, because one
/// request may make many driver calls, each with its own deadline.
const REQUEST_PATIENCE: Duration = Duration::from_secs(600);

/// Where to find the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketChoice {
    /// The default socket when a daemon answers there, else in-process.
    Default,
    /// This socket only: no daemon there is an error.
    Path(PathBuf),
    /// Never a daemon.
    None,
}

impl SocketChoice {
    /// From `--socket` / `GPUTUNE_SOCKET`.
    pub fn from_option(option: Option<&Path>) -> SocketChoice {
        match option {
            Some(path) if path.as_os_str().is_empty() => SocketChoice::None,
            Some(path) => SocketChoice::Path(path.to_path_buf()),
            None => SocketChoice::Default,
        }
    }

    /// The daemon's socket this choice names; `None` when no daemon is to be used.
    pub fn daemon_path(&self) -> Option<PathBuf> {
        match self {
            SocketChoice::Default => Some(PathBuf::from(DEFAULT_SOCKET)),
            SocketChoice::Path(path) => Some(path.clone()),
            SocketChoice::None => None,
        }
    }
}

/// Where the GPUs are and where the daemon is: what every front end is started with.
#[derive(Debug, Clone)]
pub struct TuningOptions {
    pub backend: BackendOptions,
    pub socket: SocketChoice,
    /// This user's folders (an engine in this process, profiles), found once at the start.
    pub folders: Folders,
}

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub backend: BackendOptions,
    pub socket: SocketChoice,
    /// Where an engine in this process keeps its state (`TuningOptions::folders`).
    pub folders: Folders,
    /// What the client is, for messages that name a holder ("gputune apply --try 60").
    pub label: String,
}

/// Why no service could be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "The gputune daemon at {} refuses this user: join its group with `sudo usermod -aG {group} $USER`, then log in again.",
        path.display()
    )]
    Denied { path: PathBuf, group: String },
    #[error("No gputune daemon answers at {} ({detail}): start it with `sudo systemctl start gputuned`, or leave {SOCKET_ENV} unset.", path.display())]
    NoDaemon { path: PathBuf, detail: String },
    #[error("{0}")]
    Device(#[from] gputune_formats::card::DeviceError),
    #[error("{0}")]
    Service(#[from] TuneError),
    #[error("{0}")]
    Protocol(String),
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("The gputune daemon closed the connection: it stopped, or it was restarted.")]
    Closed,
    #[error("The gputune daemon did not answer within {0} s.")]
    Timeout(u64),
    #[error(
        "The gputune daemon sent something this gputune cannot read ({0}); use the same version for both."
    )]
    Unreadable(String),
    #[error("{0}")]
    Refused(TuneError),
}

impl ClientError {
    /// The service's refusal, when it is one.
    pub fn refusal(&self) -> Option<&TuneError> {
        match self {
            ClientError::Refused(error) => Some(error),
            _ => None,
        }
    }
}

enum Transport {
    Local {
        client: ClientId,
        input: Sender<Input>,
        messages: Receiver<Message>,
    },
    Socket {
        writer: UnixStream,
        reader: BufReader<UnixStream>,
        partial: Vec<u8>,
    },
}

/// A connection to the tuning service.
pub struct TuningClient {
    transport: Transport,
    next_id: u64,
    /// Events that arrived while waiting for an answer.
    backlog: VecDeque<Event>,
    welcome: Welcome,
    /// The in-process service, kept alive as long as the client.
    service: Option<Service>,
}

/// Connects as `options` say: the daemon if it answers (or must), else a service in this
/// process on the backend the options name.
pub fn connect(options: &ConnectOptions) -> Result<TuningClient, ConnectError> {
    // A simulated GPU lives in this process; the daemon has its own GPUs.
    let try_daemon = options.backend.choice != BackendChoice::Sim;
    match (&options.socket, try_daemon) {
        (SocketChoice::Path(path), _) => connect_daemon(path, &options.label),
        (SocketChoice::Default, true) => {
            let path = Path::new(DEFAULT_SOCKET);
            match connect_daemon(path, &options.label) {
                Ok(client) => Ok(client),
                Err(ConnectError::NoDaemon { .. }) => connect_in_process(options),
                Err(error) => Err(error),
            }
        }
        _ => connect_in_process(options),
    }
}

/// A service in this process, on the options' backend.
pub fn connect_in_process(options: &ConnectOptions) -> Result<TuningClient, ConnectError> {
    let opened = open_backend(&options.backend)?;
    let state_dir = options.folders.state_dir.clone().ok_or_else(|| {
        TuneError::new(
            TuneErrorKind::State,
            format!(
                "No state folder could be found: set {} to a writable folder.",
                crate::folders::STATE_DIR_ENV
            ),
        )
    })?;
    let service = Service::start(
        opened,
        ServiceOptions {
            engine: EngineOptions {
                state_dir,
                record_dir: options.folders.record_dir.clone(),
                ownership: Ownership::InProcess,
                call_timeout: crate::device::worker::call_timeout_from_env(),
                owner_label: options.label.clone(),
                box_journal_dir: None,
            },
            daemon: false,
            boot_defaults_dir: None,
            boot_profile: None,
            write_group: None,
            history: None,
            jobs_dir: None,
            job_price: None,
        },
    )?;
    // The driver decides: root and the simulator may write, others are told how.
    let mut connection = local_client(&service, &options.label, true)?;
    connection.service = Some(service);
    Ok(connection)
}

/// A reading client of a service already running in this process (the daemon's metrics): it
/// may not change settings.
pub fn attach(service: &Service, label: &str) -> Result<TuningClient, ConnectError> {
    local_client(service, label, false)
}

/// A client of `service` in this process, greeted; it does not own the service.
fn local_client(
    service: &Service,
    label: &str,
    may_write: bool,
) -> Result<TuningClient, ConnectError> {
    let client = ClientInfo {
        id: service.next_client_id(),
        pid: Some(std::process::id()),
        uid: Some(crate::fsafe::effective_uid()),
        user: current_user_name(),
        label: label.to_string(),
        may_write,
    };
    let id = client.id;
    let messages = service.open_client(client);
    let mut connection = TuningClient {
        transport: Transport::Local {
            client: id,
            input: service.input(),
            messages,
        },
        next_id: 1,
        backlog: VecDeque::new(),
        welcome: service.welcome().clone(),
        service: None,
    };
    connection.hello(label)?;
    Ok(connection)
}

/// The daemon at `path` only (never a service in this process).
pub fn connect_daemon(path: &Path, label: &str) -> Result<TuningClient, ConnectError> {
    let stream = UnixStream::connect(path).map_err(|error| match error.kind() {
        ErrorKind::PermissionDenied => ConnectError::Denied {
            path: path.to_path_buf(),
            group: socket_group(path),
        },
        _ => ConnectError::NoDaemon {
            path: path.to_path_buf(),
            detail: error.to_string(),
        },
    })?;
    let reader = stream
        .try_clone()
        .map_err(|error| ConnectError::Protocol(error.to_string()))?;
    let placeholder = Welcome {
        protocol: PROTOCOL_VERSION,
        version: String::new(),
        backend: gputune_formats::card::BackendKind::Nvml,
        simulated_because: None,
        gpus: Vec::new(),
        daemon: true,
        notices: Vec::new(),
        job_price: None,
    };
    let mut client = TuningClient {
        transport: Transport::Socket {
            writer: stream,
            reader: BufReader::new(reader),
            partial: Vec::new(),
        },
        next_id: 1,
        backlog: VecDeque::new(),
        welcome: placeholder,
        service: None,
    };
    client.hello(label)?;
    Ok(client)
}

/// The group the daemon gave its socket to (the one its writers must join); the default
/// group's name when the socket cannot be read.
fn socket_group(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .and_then(|metadata| {
            nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(metadata.gid()))
                .ok()
                .flatten()
        })
        .filter(|group| group.gid.as_raw() != 0)
        .map_or_else(|| "gputune".to_string(), |group| group.name)
}

/// This user's name, for messages that name a holder.
pub fn current_user_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|user| user.name)
}

impl TuningClient {
    fn hello(&mut self, label: &str) -> Result<(), ConnectError> {
        let response = self.request(Request::Hello {
            protocol: PROTOCOL_VERSION,
            client: label.to_string(),
        });
        match response {
            Ok(Response::Welcome(welcome)) => {
                self.welcome = *welcome;
                Ok(())
            }
            Ok(other) => Err(ConnectError::Protocol(format!(
                "the service answered a greeting with {other:?}"
            ))),
            Err(ClientError::Refused(error)) => Err(ConnectError::Service(error)),
            Err(error) => Err(ConnectError::Protocol(error.to_string())),
        }
    }

    /// What the service said when the connection opened.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Whether a daemon answers (rather than an engine in this process).
    pub fn is_daemon(&self) -> bool {
        self.service.is_none()
    }

    /// Sends a request and waits for its answer; events that arrive meanwhile are kept for
    /// [`TuningClient::next_event`]. A refusal is `ClientError::Refused`.
    pub fn request(&mut self, request: Request) -> Result<Response, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        if let Err(error) = self.send(id, request) {
            return Err(self.why_closed().unwrap_or(error));
        }
        let deadline = Instant::now() + REQUEST_PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout(REQUEST_PATIENCE.as_secs()));
            }
            match self.receive(left)? {
                Some(Message::Response {
                    id: answered,
                    response,
                }) if answered == id => {
                    return match response {
                        Response::Error { error } => Err(ClientError::Refused(error)),
                        response => Ok(response),
                    };
                }
                // Id 0: the daemon refuses the connection itself (full, no hello in time).
                Some(Message::Response {
                    id: 0,
                    response: Response::Error { error },
                }) => return Err(ClientError::Refused(error)),
                Some(Message::Response { .. }) => {}
                Some(Message::Event { event }) => self.backlog.push_back(event),
                None => {}
            }
        }
    }

    /// The refusal the daemon sent before it closed the connection, when it sent one (a write
    /// to a closed connection fails before the reason is read).
    fn why_closed(&mut self) -> Option<ClientError> {
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            match self.receive(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(Message::Response {
                    response: Response::Error { error },
                    ..
                })) => return Some(ClientError::Refused(error)),
                Ok(Some(_)) | Ok(None) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// The next event, waiting at most `timeout`; `None` when none came.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Event>, ClientError> {
        if let Some(event) = self.backlog.pop_front() {
            return Ok(Some(event));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.receive(left)? {
                Some(Message::Event { event }) => return Ok(Some(event)),
                Some(Message::Response { .. }) => {}
                None => return Ok(None),
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    fn send(&mut self, id: u64, request: Request) -> Result<(), ClientError> {
        match &mut self.transport {
            Transport::Local { client, input, .. } => input
                .send(Input::Request {
                    client: *client,
                    id,
                    request,
                })
                .map_err(|_| ClientError::Closed),
            Transport::Socket { writer, .. } => {
                let mut line = serde_json::to_vec(&RequestLine { id, request })
                    .map_err(|error| ClientError::Unreadable(error.to_string()))?;
                line.push(b'\n');
                writer.write_all(&line).map_err(|_| ClientError::Closed)
            }
        }
    }

    /// One message, waiting at most `timeout`.
    fn receive(&mut self, timeout: Duration) -> Result<Option<Message>, ClientError> {
        match &mut self.transport {
            Transport::Local { messages, .. } => match messages.recv_timeout(timeout) {
                Ok(message) => Ok(Some(message)),
                Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => Err(ClientError::Closed),
            },
            Transport::Socket {
                reader, partial, ..
            } => {
                let timeout = timeout.max(Duration::from_millis(1));
                reader
                    .get_ref()
                    .set_read_timeout(Some(timeout))
                    .map_err(|_| ClientError::Closed)?;
                // Bytes of a line read before a timeout stay in `partial` for the next call.
                let limit = (MAX_MESSAGE_BYTES + 1 - partial.len().min(MAX_MESSAGE_BYTES)) as u64;
                match std::io::Read::take(&mut *reader, limit).read_until(b'\n', partial) {
                    Ok(0) => Err(ClientError::Closed),
                    Ok(_) if partial.last() == Some(&b'\n') => {
                        let line = std::mem::take(partial);
                        serde_json::from_slice(&line)
                            .map(Some)
                            .map_err(|error| ClientError::Unreadable(error.to_string()))
                    }
                    Ok(_) if partial.len() > MAX_MESSAGE_BYTES => Err(ClientError::Unreadable(
                        "a message longer than the protocol allows".to_string(),
                    )),
                    Ok(_) => Ok(None),
                    Err(error)
                        if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                    {
                        Ok(None)
                    }
                    Err(_) => Err(ClientError::Closed),
                }
            }
        }
    }
}

impl Drop for TuningClient {
    fn drop(&mut self) {
        if let Transport::Local { client, input, .. } = &self.transport {
            let _ = input.send(Input::Closed { client: *client });
        }
        // The in-process service (if any) stops after this, putting its sessions back.
    }
}
