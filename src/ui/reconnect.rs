//! The window's model through a daemon restart: the graphs stay, a break marks the time no
//! reading came, what the window ran through the old daemon is said to have ended with it,
//! and once the link reaches the new daemon the same cards go on.

use crate::ui::model::{Connection, WindowModel};
use gputune_core::sweep::runner::SweepPhase;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{GpuInfo, TrialPhase};

/// The daemon is away; the link tries again.
#[derive(Debug, Clone, PartialEq)]
pub struct Reconnecting {
    /// When the window noticed (Unix ms).
    pub lost_at_ms: u64,
    /// Why the last try failed (or why the connection ended).
    pub why: String,
    /// Tries so far (0 before the first).
    pub attempt: u32,
    pub retry_in_ms: u64,
}

/// The daemon went away and the window reached it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnected {
    /// When the old daemon went away (Unix ms): the restart, as near as the window knows.
    pub lost_at_ms: u64,
    pub at_ms: u64,
}

impl WindowModel {
    /// The connection ended or could not be made; the link tries again.
    pub(super) fn lost(&mut self, why: String, at_ms: u64) {
        if let Connection::Reconnecting(reconnecting) = &mut self.connection {
            reconnecting.why = why;
            return;
        }
        let mut ended = Vec::new();
        for (index, gpu) in self.gpus.iter_mut().enumerate() {
            // No reading from here until the window hears from a daemon again.
            gpu.history.push(at_ms, None);
            if let Some(trial) = &mut gpu.trial
                && trial.phase != TrialPhase::Ended
            {
                trial.phase = TrialPhase::Ended;
                trial.failed = true;
                trial.message = Some(
                    "Ended with the daemon that ran it: its journal puts the card back when the daemon starts again.".to_string(),
                );
                ended.push(format!("the trial on GPU {index}"));
            }
            if let Some(stability) = &mut gpu.stability
                && stability.running
            {
                stability.running = false;
                ended.push(format!(
                    "the {} on GPU {index}",
                    if stability.scanning {
                        "undervolt scan"
                    } else {
                        "stability check"
                    }
                ));
            }
            if let Some(sweep) = &mut gpu.sweep
                && sweep.view.phase != SweepPhase::Finished
            {
                sweep.view.phase = SweepPhase::Finished;
                sweep
                    .notes
                    .push("Ended with the daemon that ran it.".to_string());
                ended.push(format!("the sweep on GPU {index}"));
            }
        }
        if let Some(run) = self.box_runs.ended_with_the_daemon() {
            ended.push(run.to_string());
        }
        if !ended.is_empty() {
            self.notices.push(Notice::Warning(format!(
                "The gputune daemon went away at {}, and with it {}: the daemon's journal puts the cards back when it starts again; start them again once it is back.",
                gputune_formats::units::local_time(at_ms, "%H:%M:%S"),
                ended.join(", ")
            )));
        }
        self.connection = Connection::Reconnecting(Reconnecting {
            lost_at_ms: at_ms,
            why,
            attempt: 0,
            retry_in_ms: 0,
        });
    }

    /// The link reached a daemon again that has the cards the window shows, in their order.
    pub(super) fn is_same_daemon_again(&self, gpus: &[GpuInfo]) -> bool {
        matches!(self.connection, Connection::Reconnecting(_))
            && !self.gpus.is_empty()
            && self.gpus.len() == gpus.len()
            && self
                .gpus
                .iter()
                .zip(gpus)
                .all(|(known, new)| known.info.identity.uuid == new.identity.uuid)
    }

    /// Goes on with the same cards after a reconnect: their graphs stay, the new daemon's
    /// history fills the time between (`LinkEvent::Refilled`).
    pub(super) fn reconnected_to(
        &mut self,
        connection: Connection,
        gpus: Vec<GpuInfo>,
        notices: Vec<Notice>,
        at_ms: u64,
    ) {
        if let Connection::Reconnecting(reconnecting) = &self.connection {
            self.reconnected = Some(Reconnected {
                lost_at_ms: reconnecting.lost_at_ms,
                at_ms,
            });
        }
        self.connection = connection;
        for (gpu, info) in self.gpus.iter_mut().zip(gpus) {
            gpu.info = info;
        }
        for notice in notices {
            if !self.notices.contains(&notice) {
                self.notices.push(notice);
            }
        }
    }
}
