//! Driving a gputune process in a test: stderr lines as they come, signals, and the end.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// How long a test waits for gputune before it gives up (only matters when something is broken).
pub const PATIENCE: Duration = Duration::from_secs(90);

/// Starts `command` with stdout and stderr piped; stderr lines arrive on a channel.
pub fn spawn_piped(mut command: Command) -> Running {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gputune binary starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    Running {
        child,
        lines,
        stderr: Vec::new(),
    }
}

/// A gputune process under test.
pub struct Running {
    pub child: Child,
    pub lines: Receiver<String>,
    pub stderr: Vec<String>,
}

impl Running {
    /// Waits for a stderr line containing `text`.
    pub fn wait_for_line(&mut self, text: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(text);
                    self.stderr.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("no line with {text:?} on stderr; got {:?}", self.stderr);
                }
            }
        }
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name}");
    }

    /// Waits for the process to end; returns its status, stdout and whole stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("the child can be waited on") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("gputune did not end; stderr so far: {:?}", self.stderr);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stdout = String::new();
        if let Some(mut pipe) = self.child.stdout.take() {
            let _ = pipe.read_to_string(&mut stdout);
        }
        // The reader thread ends with the pipe; collect what it still has.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stderr.push(line);
        }
        (status, stdout, self.stderr.join("\n"))
    }
}

/// Every process's pid and command line (its arguments joined by spaces), read from /proc.
pub fn command_lines() -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let command = raw
                .split(|&byte| byte == 0)
                .filter(|part| !part.is_empty())
                .map(|part| String::from_utf8_lossy(part).into_owned())
                .collect::<Vec<_>>()
                .join(" ");
            Some((pid, command))
        })
        .collect()
}
