//! The loop of a command that drives checks to their end (`gputune stability`, `gputune
//! scan`): the service's events in, a tick every 20 ms, Ctrl-C or SIGTERM once, lines for the
//! terminal as they come and where things stand every 10 s.

use std::io::Write;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::service::client::TuningClient;
use crate::service::protocol::Event;

/// The longest wait for the service's next event between two ticks.
const TICK: Duration = Duration::from_millis(20);
/// A progress line this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// What a command drives: it takes the service's events, may be stopped, and says when it
/// has ended (its cards put back).
pub trait Driven {
    fn take_event(&mut self, event: &Event);
    fn stop(&mut self, client: &mut TuningClient, reason: &str);
    /// Moves on; true once everything has ended.
    fn tick(&mut self, client: &mut TuningClient) -> bool;
    /// Lines to print as soon as they exist (a scan's finished steps).
    fn news(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// Where things stand, a line each.
    fn progress(&self) -> Vec<String>;
}

/// Drives `driven` to its end, printing its lines to `messages`; whether Ctrl-C or SIGTERM
/// stopped it.
pub fn drive(
    client: &mut TuningClient,
    driven: &mut dyn Driven,
    stop: &Receiver<()>,
    messages: &mut dyn Write,
) -> bool {
    let mut last_progress = Instant::now();
    let mut stopped = false;
    loop {
        match client.next_event(TICK) {
            Ok(Some(event)) => driven.take_event(&event),
            Ok(None) => {}
            Err(error) => driven.stop(client, &format!("the tuning service went away: {error}")),
        }
        if !stopped && stop.try_recv().is_ok() {
            stopped = true;
            driven.stop(client, "stopped by Ctrl-C or SIGTERM");
        }
        if driven.tick(client) {
            return stopped;
        }
        for line in driven.news() {
            let _ = writeln!(messages, "gputune: {line}");
        }
        if last_progress.elapsed() >= PROGRESS_EVERY {
            last_progress = Instant::now();
            for line in driven.progress() {
                let _ = writeln!(messages, "gputune: {line}");
            }
        }
    }
}
