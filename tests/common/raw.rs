//! A raw connection to a daemon's socket, speaking the protocol by hand: for tests that must
//! misbehave (never read, never greet, flood) in ways the real client never does.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use gputune_formats::protocol::{PROTOCOL_VERSION, Request, RequestLine};

pub struct Raw {
    pub stream: UnixStream,
}

impl Raw {
    pub fn connect(socket: &Path) -> Raw {
        let stream = UnixStream::connect(socket).expect("the daemon accepts");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a timeout");
        Raw { stream }
    }

    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends one request as the real client would write it.
    pub fn send_request(&mut self, id: u64, request: Request) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&RequestLine { id, request }).expect("a request");
        line.push(b'\n');
        self.send(&line)
    }

    /// The next line from the daemon (a response or an event); `None` when it closed.
    pub fn line(&mut self) -> Option<String> {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            match self.stream.read(&mut byte) {
                Ok(0) => return (!line.is_empty()).then(|| String::from_utf8_lossy(&line).into()),
                Ok(_) if byte[0] == b'\n' => return Some(String::from_utf8_lossy(&line).into()),
                Ok(_) => line.push(byte[0]),
                Err(_) => return None,
            }
        }
    }

    /// Sends a request and returns the response to its id (events in between are skipped).
    pub fn ask(&mut self, id: u64, request: Request) -> String {
        self.send_request(id, request).expect("the request is sent");
        let prefix = format!("{{\"id\":{id},");
        loop {
            let line = self.line().expect("an answer");
            if line.starts_with(&prefix) {
                return line;
            }
        }
    }

    /// Greets the daemon; panics unless it welcomes.
    pub fn hello(&mut self, label: &str) {
        let welcome = self.ask(
            1,
            Request::Hello {
                protocol: PROTOCOL_VERSION,
                client: label.to_string(),
            },
        );
        assert!(welcome.contains("\"welcome\""), "{welcome}");
    }
}
