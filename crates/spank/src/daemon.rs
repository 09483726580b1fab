//! The step's connection to the node's gputune daemon: one Unix socket, opened at the step's
//! start and kept in slurmstepd for the step's life, so that whatever ends slurmstepd — the
//! step's end, `scancel`, a time limit, a `kill -9` — ends the connection and with it the
//! session (the daemon puts the cards back when a client goes). Blocking calls, each with a
//! deadline: slurmstepd never waits on the daemon for longer than the site's `timeout_s`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use gputune_formats::jobs::JobRecord;
use gputune_formats::protocol::{
    MAX_MESSAGE_BYTES, Message, PROTOCOL_VERSION, Request, RequestLine, Response, Welcome,
};
use gputune_formats::tuning::{SessionId, SessionReport, SessionRequest, SessionStarted};

pub struct DaemonLink {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    timeout: Duration,
}

impl DaemonLink {
    /// Connects and greets the daemon as `label`; its welcome lists the node's cards.
    pub fn connect(
        socket: &Path,
        label: &str,
        timeout: Duration,
    ) -> Result<(DaemonLink, Welcome), String> {
        let stream = UnixStream::connect(socket).map_err(|error| {
            format!(
                "gputune: the node's gputune daemon does not answer on {} ({error}): is gputuned running on this node (systemctl status gputuned)?",
                socket.display()
            )
        })?;
        let reader = stream
            .try_clone()
            .map_err(|error| format!("gputune: the daemon's socket: {error}"))?;
        let mut link = DaemonLink {
            writer: stream,
            reader: BufReader::new(reader),
            next_id: 1,
            timeout,
        };
        let welcome = match link.call(Request::Hello {
            protocol: PROTOCOL_VERSION,
            client: label.to_string(),
        })? {
            Response::Welcome(welcome) => *welcome,
            other => return Err(unexpected("hello", &other)),
        };
        Ok((link, welcome))
    }

    pub fn start(&mut self, request: SessionRequest) -> Result<SessionStarted, String> {
        match self.call(Request::StartSession { session: request })? {
            Response::SessionStarted(started) => Ok(started),
            other => Err(unexpected("start_session", &other)),
        }
    }

    pub fn end(&mut self, session: SessionId) -> Result<SessionReport, String> {
        match self.call(Request::EndSession {
            session,
            keep: false,
        })? {
            Response::SessionEnded { report } => Ok(report),
            other => Err(unexpected("end_session", &other)),
        }
    }

    /// The daemon's newest record of job `job_id` on this node.
    pub fn job_record(&mut self, job_id: &str) -> Result<JobRecord, String> {
        match self.call(Request::Job {
            job_id: job_id.to_string(),
        })? {
            Response::Job { record } => Ok(*record),
            other => Err(unexpected("job", &other)),
        }
    }

    /// Sends one request and waits, within the deadline, for its answer (events on the way
    /// are passed over). The daemon's refusal is its own sentence.
    fn call(&mut self, request: Request) -> Result<Response, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(&RequestLine { id, request })
            .map_err(|error| format!("gputune: a request could not be written: {error}"))?;
        line.push(b'\n');
        let deadline = Instant::now() + self.timeout;
        self.writer
            .set_write_timeout(Some(self.timeout))
            .and_then(|()| self.writer.write_all(&line))
            .map_err(|error| format!("gputune: the daemon did not take the request ({error})."))?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "gputune: the node's gputune daemon did not answer within {} s.",
                    self.timeout.as_secs()
                ));
            }
            self.reader
                .get_ref()
                .set_read_timeout(Some(left))
                .map_err(|error| format!("gputune: the daemon's socket: {error}"))?;
            let mut buffer = Vec::new();
            let read = (&mut self.reader)
                .take(MAX_MESSAGE_BYTES as u64 + 1)
                .read_until(b'\n', &mut buffer);
            match read {
                Ok(0) => {
                    return Err(
                        "gputune: the node's gputune daemon closed the connection.".to_string()
                    );
                }
                Ok(_) if !buffer.ends_with(b"\n") => {
                    return Err("gputune: the daemon sent a line too long to read.".to_string());
                }
                Ok(_) => {}
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(error) => return Err(format!("gputune: reading the daemon's answer: {error}")),
            }
            match serde_json::from_slice::<Message>(&buffer) {
                Ok(Message::Response {
                    id: answered,
                    response,
                }) if answered == id || answered == 0 => {
                    return match response {
                        Response::Error { error } => Err(format!("gputune: {}", error.message)),
                        response => Ok(response),
                    };
                }
                Ok(_) => continue,
                Err(error) => {
                    return Err(format!(
                        "gputune: the daemon's answer could not be read: {error}"
                    ));
                }
            }
        }
    }
}

fn unexpected(request: &str, response: &Response) -> String {
    let kind = serde_json::to_value(response)
        .ok()
        .and_then(|value| {
            value
                .get("type")
                .and_then(|t| t.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default();
    format!(
        "gputune: the daemon answered {request} with {kind}; is it the same gputune release as the plugin?"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A stand-in daemon that reads the hello and answers with `answer` (or nothing).
    fn daemon(answer: Option<Vec<u8>>) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let socket = dir.path().join("gputune.sock");
        let listener = UnixListener::bind(&socket).unwrap_or_else(|error| panic!("{error}"));
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut line = String::new();
                let _ = BufReader::new(&stream).read_line(&mut line);
                if let Some(bytes) = answer {
                    let _ = stream.write_all(&bytes);
                }
                std::thread::sleep(Duration::from_secs(3));
            }
        });
        (dir, socket)
    }

    fn connect(socket: &Path) -> Result<(DaemonLink, Welcome), String> {
        DaemonLink::connect(socket, "test", Duration::from_millis(500))
    }

    #[test]
    fn a_daemon_that_is_not_there_is_one_sentence() {
        let said = connect(Path::new("/nonexistent/gputune.sock"))
            .err()
            .unwrap_or_default();
        assert!(
            said.contains("does not answer on /nonexistent/gputune.sock"),
            "{said}"
        );
        assert!(said.contains("systemctl status gputuned"), "{said}");
    }

    #[test]
    fn a_silent_daemon_costs_the_step_its_timeout_not_more() {
        let (_dir, socket) = daemon(None);
        let started = Instant::now();
        let said = connect(&socket).err().unwrap_or_default();
        assert!(said.contains("did not answer within"), "{said}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "bounded by timeout_s"
        );
    }

    #[test]
    fn a_line_too_long_or_not_json_is_refused() {
        let mut huge = vec![b'x'; MAX_MESSAGE_BYTES + 10];
        huge.push(b'\n');
        let (_dir, socket) = daemon(Some(huge));
        let said = connect(&socket).err().unwrap_or_default();
        assert!(said.contains("too long"), "{said}");
        let (_dir, socket) = daemon(Some(b"{\"id\":1,\"response\":42}\n".to_vec()));
        let said = connect(&socket).err().unwrap_or_default();
        assert!(said.contains("could not be read"), "{said}");
        let (_dir, socket) = daemon(Some(
            b"{\"id\":1,\"response\":{\"type\":\"error\",\"error\":{\"kind\":\"refused\",\"message\":\"no room\"}}}\n"
                .to_vec(),
        ));
        assert_eq!(connect(&socket).err(), Some("gputune: no room".to_string()));
    }
}
