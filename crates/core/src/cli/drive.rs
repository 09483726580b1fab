//! The loop of a command that drives checks to their end (`gputune stability`, `gputune
//! scan`): the service's events in, a tick every 20 ms, Ctrl-C or SIGTERM once, lines for the
//! terminal as they come and where things stand every 10 s.

use std::io::Write;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::service::client::TuningClient;
use gputune_formats::card::{DeviceError, GpuProcess, Telemetry};
use gputune_formats::protocol::Event;
use gputune_formats::tuning::Hold;

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

/// The processes on each GPU, as the first readings after subscribing list them (waiting at
/// most `wait` for them), else as `latest` (the snapshot's) does.
pub fn gpu_processes(
    client: &mut TuningClient,
    latest: &[Option<Result<Telemetry, DeviceError>>],
    wait: Duration,
) -> Vec<Option<Vec<GpuProcess>>> {
    let of = |readings: &[Option<&Telemetry>]| -> Vec<Option<Vec<GpuProcess>>> {
        readings
            .iter()
            .map(|reading| reading.and_then(|reading| reading.processes.clone()))
            .collect()
    };
    let deadline = Instant::now() + wait;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match client.next_event(left.min(TICK * 5)) {
            Ok(Some(Event::Samples { readings })) => {
                let readings: Vec<Option<&Telemetry>> = readings
                    .iter()
                    .map(|reading| reading.as_ref().ok())
                    .collect();
                return of(&readings);
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let readings: Vec<Option<&Telemetry>> = latest
        .iter()
        .map(|reading| reading.as_ref().and_then(|reading| reading.as_ref().ok()))
        .collect();
    of(&readings)
}

/// Refuses a check or scan (`what`) of `gpu` when another gputune process (each with its own
/// engine, without a daemon) holds its clock offset or lock: a scan, or a check of a profile.
pub fn refuse_if_held_elsewhere(
    client: &TuningClient,
    folders: &crate::folders::Folders,
    gpu: &gputune_formats::tuning::GpuInfo,
    what: &str,
) -> Result<(), String> {
    if client.is_daemon() {
        return Ok(());
    }
    let holds = [Hold::GpuClockOffset, Hold::GpuClockLock];
    match crate::tuning::engine::held_elsewhere(folders, &gpu.identity.uuid, &holds) {
        Some((hold, holder)) => Err(format!(
            "GPU {} is busy: its {} is held by {}; wait for it to end, or stop it there. The {what} did not start; nothing was measured.",
            gpu.identity.index,
            hold.name(),
            crate::text::printable(&holder)
        )),
        None => Ok(()),
    }
}
