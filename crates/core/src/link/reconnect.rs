//! Reaching the daemon again after it went away (a package upgrade restarts it, or it
//! crashed and systemd starts it again): tries on the same socket with a growing wait, while
//! the window keeps its graphs and hears why nothing changes meanwhile.

use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::link::{LinkCommand, LinkEvent, TuneCommand, WINDOW_LABEL};
use crate::service::client::{TuningClient, connect_daemon};
use gputune_formats::tuning::GpuInfo;
use gputune_formats::tuning::Notice;

/// The first wait after the daemon went away; each failed try doubles it, up to
/// [`LONGEST_WAIT`] (a restart takes well under a second; a daemon gone for good is not
/// asked more than every few seconds).
const FIRST_WAIT: Duration = Duration::from_millis(250);
const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// The time the window has no readings of: from its last reading to the next connection.
pub(crate) struct Gap {
    /// The last reading the window got (Unix ms).
    pub from_ms: u64,
    /// The cards the lost daemon had, in index order.
    pub gpu_uuids: Vec<String>,
}

impl Gap {
    /// The new daemon has the same cards in the same order: the window's graphs go on.
    pub fn same_gpus(&self, gpus: &[GpuInfo]) -> bool {
        self.gpu_uuids.len() == gpus.len()
            && self
                .gpu_uuids
                .iter()
                .zip(gpus)
                .all(|(uuid, gpu)| *uuid == gpu.identity.uuid)
    }
}

/// A socket is at `path` (a daemon listens there, or is about to again).
pub(crate) fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_socket())
}

/// The wait before try `attempt` (1, 2, ...).
pub(crate) fn wait_before(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    FIRST_WAIT.saturating_mul(1 << doublings).min(LONGEST_WAIT)
}

/// Tries the daemon at `path` until it answers; `None` when the window closed meanwhile.
/// The window's commands are answered with why they cannot run now; a new interval is kept
/// for the next subscription.
pub(crate) fn again(
    path: &Path,
    interval_ms: &mut u64,
    commands: &Receiver<LinkCommand>,
    send: &dyn Fn(LinkEvent) -> bool,
) -> Option<TuningClient> {
    let mut attempt = 1;
    loop {
        let wait = wait_before(attempt);
        if !wait_for(wait, interval_ms, commands, send) {
            return None;
        }
        match connect_daemon(path, WINDOW_LABEL) {
            Ok(client) => return Some(client),
            Err(error) => {
                let told = send(LinkEvent::Reconnecting {
                    attempt,
                    retry_in_ms: wait_before(attempt + 1).as_millis() as u64,
                    why: error.to_string(),
                });
                if !told {
                    return None;
                }
            }
        }
        attempt += 1;
    }
}

/// Waits `wait`, answering the window's commands meanwhile; false when the window closed.
fn wait_for(
    wait: Duration,
    interval_ms: &mut u64,
    commands: &Receiver<LinkCommand>,
    send: &dyn Fn(LinkEvent) -> bool,
) -> bool {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        match commands.recv_timeout(left) {
            Ok(command) => refuse(command, interval_ms, send),
            Err(RecvTimeoutError::Timeout) => return true,
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
}

/// Says why a command cannot run while no daemon answers.
fn refuse(command: LinkCommand, interval_ms: &mut u64, send: &dyn Fn(LinkEvent) -> bool) {
    let gpu_index = match &command {
        LinkCommand::SetInterval { interval_ms: asked } => {
            *interval_ms = *asked;
            return;
        }
        // Nothing runs: nothing to stop.
        LinkCommand::StopSweep { .. } | LinkCommand::StopStability { .. } => return,
        LinkCommand::StartSweep(launch) => Some(launch.gpu_index),
        LinkCommand::StartStability(launch) => Some(launch.gpu_index),
        LinkCommand::Tune(
            TuneCommand::Apply { gpu_index, .. }
            | TuneCommand::StartTrial { gpu_index, .. }
            | TuneCommand::KeepTrial { gpu_index }
            | TuneCommand::RevertTrial { gpu_index }
            | TuneCommand::SetFanCurve { gpu_index, .. }
            | TuneCommand::SetTemperatureHold { gpu_index, .. },
        ) => Some(*gpu_index),
        LinkCommand::Tune(
            TuneCommand::ApplyAll { changes } | TuneCommand::StartTrialAll { changes, .. },
        ) => changes.first().map(|(gpu_index, _)| *gpu_index),
    };
    send(LinkEvent::Notice {
        gpu_index,
        notice: Notice::Error(
            "The gputune daemon is not reachable now (the window is reconnecting); nothing was changed. Try again once it is back."
                .to_string(),
        ),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_a_quarter_second_up_to_five_seconds() {
        let waits: Vec<u128> = (1..=8).map(|try_| wait_before(try_).as_millis()).collect();
        assert_eq!(waits, [250, 500, 1_000, 2_000, 4_000, 5_000, 5_000, 5_000]);
        assert_eq!(wait_before(u32::MAX), LONGEST_WAIT);
    }
}
