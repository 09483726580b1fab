//! Putting cards back: the settings a session, a trial or a failed apply recorded; what the
//! driver refused to take back waits in the card's journal and is tried again (before any new
//! write, and every `UNRESTORED_RETRY` from `tick`). Journals left by a gputune that ended
//! badly are read in `journals_left.rs`.

use super::{Engine, RestoreEntry, RestoreMap};
use crate::device::gate::validate;
use crate::tuning::in_force::Control;
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{GpuRestored, SettingLeft, TuneError, TuneErrorKind};

/// What happens to settings the driver refused to take back, for every message that says so.
pub(super) fn retry_sentence() -> String {
    format!(
        "The journal is kept: gputune puts them back before it writes anything else to that card, tries again every {} s while it runs, and at its next start.",
        super::UNRESTORED_RETRY.as_secs()
    )
}

impl Engine {
    /// Writes the settings of `map` to GPU `index` (each through the gate), in control order.
    pub(super) fn restore_map(&mut self, index: u32, map: &RestoreMap) -> GpuRestored {
        let settings: Vec<RestoreEntry> = map.values().copied().collect();
        self.restore_settings(index, &settings)
    }

    /// Writes `settings` to GPU `index`, stopping at a lost GPU; reports what went back.
    pub(super) fn restore_settings(
        &mut self,
        index: u32,
        settings: &[RestoreEntry],
    ) -> GpuRestored {
        let mut report = GpuRestored::nothing(index, &self.gpu(index).info.identity.uuid);
        for (position, RestoreEntry { setting, exact }) in settings.iter().enumerate() {
            if let Some(reason) = self.gpu(index).lost.clone() {
                report
                    .left
                    .extend(settings[position..].iter().map(|entry| SettingLeft {
                        setting: entry.setting,
                        reason: reason.clone(),
                    }));
                break;
            }
            let validated = match validate(&self.gpu(index).info.constraints, *setting) {
                Ok(validated) => validated,
                Err(refused) => {
                    report.left.push(SettingLeft {
                        setting: *setting,
                        reason: refused.to_string(),
                    });
                    continue;
                }
            };
            match self.write(index, validated) {
                Ok(()) => {
                    report.restored.push(*setting);
                    // Only a reset of a lock gputune did not know is inexact; what was not
                    // written at all is in `left`, said as such.
                    report.exact &= *exact;
                }
                Err(error) => report.left.push(SettingLeft {
                    setting: *setting,
                    reason: error.to_string(),
                }),
            }
        }
        report
    }

    /// After a put-back of `attempted` on GPU `index`: what the driver refused waits in the
    /// card's `unrestored` (and so in its journal, which is removed when nothing waits), to be
    /// written before anything else is. Says whether the journal could be written.
    pub(super) fn keep_unrestored(
        &mut self,
        index: u32,
        attempted: &RestoreMap,
        report: &GpuRestored,
    ) -> bool {
        let constraints = self.gpu(index).info.constraints.clone();
        let mut never = Vec::new();
        let gpu = self.gpu_mut(index);
        gpu.unrestored
            .retain(|control, _| !attempted.contains_key(control));
        for SettingLeft { setting, .. } in &report.left {
            // A value the gate refuses can never be written: waiting for it would block the
            // card for good. It is said instead.
            if let Err(refused) = validate(&constraints, *setting) {
                never.push(format!("{}: {refused}", setting.describe()));
                continue;
            }
            let control = Control::of(setting);
            let value = attempted
                .get(&control)
                .copied()
                .unwrap_or(RestoreEntry::exact(*setting));
            gpu.unrestored.insert(control, value);
        }
        if gpu.unrestored.is_empty() {
            gpu.unrestored_said = None;
        }
        if !never.is_empty() {
            self.notice(
                Some(index),
                Notice::Error(format!(
                    "GPU {index} cannot take back {}; gputune stops trying: check the card with `gputune status`.",
                    never.join("; ")
                )),
            );
        }
        match self.write_journal(index, None) {
            Ok(()) => true,
            Err(error) => {
                tracing::error!("{error}");
                false
            }
        }
    }

    /// Before anything new is written to GPU `index`: puts back what an earlier put-back could
    /// not. Refuses, saying what still waits and why, when the driver still will not take it:
    /// nothing is written over a card whose earlier values are not back.
    pub(super) fn put_back_unrestored(&mut self, index: u32) -> Result<(), TuneError> {
        if self.gpu(index).unrestored.is_empty() {
            return Ok(());
        }
        let map = self.gpu(index).unrestored.clone();
        self.gpu_mut(index).unrestored_tried = Some(self.clock.now());
        let report = self.restore_map(index, &map);
        self.keep_unrestored(index, &map, &report);
        if !report.restored.is_empty() {
            self.note_change(
                index,
                "gputune",
                format!(
                    "put back {} (an earlier put-back the driver refused)",
                    crate::tuning::describe_all(&report.restored)
                ),
            );
        }
        if report.is_complete() {
            self.notice(
                Some(index),
                Notice::Info(format!(
                    "Put back on GPU {index} what an earlier put-back could not write: {}.",
                    crate::tuning::describe_all(&report.restored)
                )),
            );
            return Ok(());
        }
        let left = describe_left(&report);
        if self.gpu(index).unrestored_said.as_deref() != Some(left.as_str()) {
            self.gpu_mut(index).unrestored_said = Some(left.clone());
            self.notice(
                Some(index),
                Notice::Error(format!(
                    "GPU {index} still waits for gputune to put back {left}. {}",
                    retry_sentence()
                )),
            );
        }
        Err(TuneError::new(
            TuneErrorKind::Device,
            format!(
                "GPU {index} still waits for gputune to put back {left}, so nothing new is written to it. {}",
                retry_sentence()
            ),
        ))
    }

    /// Tries again, every [`super::UNRESTORED_RETRY`], to put back what the driver refused
    /// (from `tick`), held cards included: what waits is the value their session expects back.
    /// An in-process engine does so only when it holds or can take the card's lock.
    pub(super) fn retry_unrestored(&mut self) {
        let now = self.clock.now();
        for index in 0..self.gpus.len() as u32 {
            let gpu = self.gpu(index);
            let due = !gpu.unrestored.is_empty()
                && gpu.lost.is_none()
                && gpu.unrestored_tried.is_none_or(|tried| {
                    now.saturating_duration_since(tried) >= super::UNRESTORED_RETRY
                });
            if !due {
                continue;
            }
            // An engine without the daemon keeps the locks of what waits (see `release_lock`);
            // one it lost meanwhile is taken again, or left to the process that holds it.
            let holds: std::collections::BTreeSet<Hold> = self
                .gpu(index)
                .unrestored
                .keys()
                .map(|control| control.hold())
                .collect();
            if self
                .take_locks(index, "gputune (putting back a journal)", &holds)
                .is_err()
            {
                self.gpu_mut(index).unrestored_tried = Some(self.clock.now());
                continue;
            }
            let _ = self.put_back_unrestored(index);
            self.release_lock(index);
            self.announce(index);
        }
    }
}
/// "fan 0 at 80 %: the driver refused (…); the power limit …": what was left, and why.
pub(super) fn describe_left(report: &GpuRestored) -> String {
    report
        .left
        .iter()
        .map(|left| format!("{}: {}", left.setting.describe(), left.reason))
        .collect::<Vec<_>>()
        .join("; ")
}
