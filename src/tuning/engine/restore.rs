//! Putting cards back: the settings a session, a trial or a failed apply recorded, and the
//! journals a crashed or killed gputune left behind.

use std::path::Path;

use serde::Deserialize;

use super::{Engine, GpuRestored, Ownership, RestoreMap, TuneError, TuneErrorKind};
use crate::device::gate::validate;
use crate::device::{BackendKind, Setting};
use crate::fsafe::{self, Links};
use crate::notice::Notice;
use crate::tuning::in_force::{Control, Hold};

/// What happens to settings the driver refused to take back, for every message that says so.
pub(super) fn retry_sentence() -> String {
    format!(
        "The journal is kept: gputune puts them back before it writes anything else to that card, tries again every {} s while it runs, and at its next start.",
        super::UNRESTORED_RETRY.as_secs()
    )
}

/// The single journal of gputune 0.1 (`journal.json`, all GPUs in one file).
#[derive(Debug, Deserialize)]
struct LegacyJournal {
    backend: BackendKind,
    #[serde(default)]
    owner: Option<LegacyOwner>,
    gpus: Vec<LegacyEntry>,
}

#[derive(Debug, Deserialize)]
struct LegacyOwner {
    pid: u32,
}

#[derive(Debug, Deserialize)]
struct LegacyEntry {
    uuid: String,
    restore: Vec<Setting>,
}

const LEGACY_JOURNAL: &str = "journal.json";

impl Engine {
    /// Writes the settings of `map` to GPU `index` (each through the gate), in control order.
    pub(super) fn restore_map(&mut self, index: u32, map: &RestoreMap) -> GpuRestored {
        let settings: Vec<(Setting, bool)> = map.values().copied().collect();
        self.restore_settings(index, &settings)
    }

    /// Writes `settings` to GPU `index`, stopping at a lost GPU; reports what went back.
    pub(super) fn restore_settings(
        &mut self,
        index: u32,
        settings: &[(Setting, bool)],
    ) -> GpuRestored {
        let mut report = GpuRestored {
            gpu_index: index,
            gpu_uuid: self.gpu(index).info.identity.uuid.clone(),
            restored: Vec::new(),
            left: Vec::new(),
            exact: true,
        };
        for (position, (setting, exact)) in settings.iter().enumerate() {
            if let Some(reason) = self.gpu(index).lost.clone() {
                report.left.extend(
                    settings[position..]
                        .iter()
                        .map(|(setting, _)| (*setting, reason.clone())),
                );
                break;
            }
            let validated = match validate(&self.gpu(index).info.constraints, *setting) {
                Ok(validated) => validated,
                Err(refused) => {
                    report.left.push((*setting, refused.to_string()));
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
                Err(error) => report.left.push((*setting, error.to_string())),
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
        for (setting, _) in &report.left {
            // A value the gate refuses can never be written: waiting for it would block the
            // card for good. It is said instead.
            if let Err(refused) = validate(&constraints, *setting) {
                never.push(format!("{}: {refused}", setting.describe()));
                continue;
            }
            let control = Control::of(setting);
            let value = attempted.get(&control).copied().unwrap_or((*setting, true));
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

    /// An in-process engine that just took the locks of `holds` on GPU `index`: the journal's
    /// entries for those controls are what a gputune that ended (or this engine, earlier)
    /// could not put back, and wait in `unrestored` to be written first. Entries for other
    /// controls belong to the processes that hold them.
    pub(super) fn take_in_journal(&mut self, index: u32, holds: &[Hold]) {
        // A simulated card lives in this process only: another process's journal is not its.
        if self.ownership != Ownership::InProcess || self.backend_kind == BackendKind::Sim {
            return;
        }
        let uuid = self.gpu(index).info.identity.uuid.clone();
        let mine = |control: &Control| holds.contains(&control.hold());
        self.gpu_mut(index)
            .unrestored
            .retain(|control, _| !mine(control));
        let journal = match self.folder.read_journal(&uuid) {
            Ok(Some(journal)) if journal.backend == self.backend_kind => journal,
            Ok(_) => return,
            Err(problem) => {
                self.notice(Some(index), Notice::Warning(problem.message));
                return;
            }
        };
        let waiting: RestoreMap = journal
            .restore
            .iter()
            .filter(|setting| !self.is_phantom(index, setting))
            .map(|setting| (Control::of(setting), (*setting, true)))
            .filter(|(control, _)| mine(control))
            .collect();
        if waiting.is_empty() {
            return;
        }
        let gpu = self.gpu_mut(index);
        gpu.unrestored.extend(waiting);
        gpu.unrestored_tried = None;
    }

    /// Whether GPU `index` already runs `setting`, as read back from the card: a journal entry
    /// that asks for it has nothing to put back. Only controls NVML reads count (a clock lock
    /// is only what gputune recorded, so its entry is always written).
    fn is_phantom(&self, index: u32, setting: &Setting) -> bool {
        let readable = !matches!(
            Control::of(setting),
            Control::GpuClockLock | Control::MemoryClockLock
        );
        readable && self.gpu(index).in_force.matches(setting)
    }

    /// Restores what journals in the state folder say a gputune that ended badly left on the
    /// cards. A journal whose card is held by a live process is left to it; a damaged one is
    /// set aside and reported.
    pub(super) fn restore_pending(&mut self) -> Vec<Notice> {
        let mut notices = Vec::new();
        self.restore_legacy(&mut notices);
        for uuid in self.folder.journal_uuids() {
            let journal = match self.folder.read_journal(&uuid) {
                Ok(Some(journal)) => journal,
                Ok(None) => continue,
                Err(problem) => {
                    notices.push(Notice::Warning(problem.message));
                    continue;
                }
            };
            if journal.backend == BackendKind::Sim {
                // A simulated card ended with its process: there is nothing left to put back.
                if self.backend_kind == BackendKind::Sim || journal.backend != self.backend_kind {
                    let _ = self
                        .folder
                        .write_journal(&crate::tuning::state_folder::GpuJournal {
                            restore: Vec::new(),
                            ..journal
                        });
                }
                continue;
            }
            if journal.backend != self.backend_kind {
                continue;
            }
            let Ok(index) = self.index_of(&journal.uuid) else {
                notices.push(Notice::Warning(format!(
                    "A journal of settings to put back waits for GPU {}, which is not present now; it is kept for when the card is back.",
                    crate::text::printable(&journal.uuid)
                )));
                continue;
            };
            if let Some(notice) = self.restore_journal(index, &journal.restore, &journal.by, true) {
                notices.push(notice);
            }
        }
        notices
    }

    /// Restores one GPU from a journal's list, if its lock can be had; what the driver refuses
    /// waits in `unrestored` (and the journal).
    fn restore_journal(
        &mut self,
        index: u32,
        restore: &[Setting],
        by: &str,
        from_gpu_journal: bool,
    ) -> Option<Notice> {
        let mut restore = restore.to_vec();
        if self.ownership == Ownership::InProcess {
            let uuid = self.gpu(index).info.identity.uuid.clone();
            let by = "gputune (restoring a journal)";
            // Each control whose lock can be had: a live process holding another puts that one
            // back itself.
            let holds: std::collections::BTreeSet<Hold> = restore.iter().map(Hold::of).collect();
            let mut locked = std::collections::BTreeSet::new();
            for hold in holds {
                let one = [hold].into();
                match self.take_locks(index, by, &one) {
                    Ok(()) => {
                        locked.insert(hold);
                    }
                    Err(error) if error.kind == TuneErrorKind::Held => {}
                    Err(error) => {
                        self.release_lock(index);
                        return Some(Notice::Warning(error.message));
                    }
                }
            }
            // Reread: its owner may have finished between our listing and our lock.
            if from_gpu_journal {
                restore = match self.folder.read_journal(&uuid) {
                    Ok(Some(journal)) => journal.restore,
                    _ => Vec::new(),
                };
            }
            restore.retain(|setting| locked.contains(&Hold::of(setting)));
            if restore.is_empty() {
                self.gpu_mut(index)
                    .unrestored
                    .retain(|control, _| !locked.contains(&control.hold()));
                self.release_lock(index);
                return None;
            }
        }
        // An entry the card already runs is a phantom (its write never happened, or another
        // program put it back): nothing to write, nothing to announce, and it leaves the journal.
        let (phantoms, restore): (Vec<Setting>, Vec<Setting>) = restore
            .iter()
            .partition(|setting| self.is_phantom(index, setting));
        if !phantoms.is_empty() {
            tracing::info!(
                "GPU {index} already runs {}: nothing to put back for it.",
                crate::tuning::describe_all(&phantoms)
            );
            let gone: Vec<Control> = phantoms.iter().map(Control::of).collect();
            self.gpu_mut(index)
                .unrestored
                .retain(|control, _| !gone.contains(control));
        }
        let attempted: RestoreMap = restore
            .iter()
            .map(|setting| (Control::of(setting), (*setting, true)))
            .collect();
        if attempted.is_empty() {
            if let Err(error) = self.write_journal(index, None) {
                tracing::error!("{error}");
            }
            self.release_lock(index);
            return None;
        }
        let report = self.restore_map(index, &attempted);
        self.gpu_mut(index).unrestored_tried = Some(self.clock.now());
        let kept = self.keep_unrestored(index, &attempted, &report);
        self.release_lock(index);
        self.announce(index);
        let by = crate::text::printable(by);
        Some(if report.is_complete() {
            Notice::Info(format!(
                "Restored the settings {by} left changed on GPU {index} ({}).",
                crate::tuning::describe_all(&report.restored)
            ))
        } else {
            let kept = if kept {
                retry_sentence()
            } else {
                format!(
                    "Its journal could not be kept either: check GPU {index} with `gputune status`."
                )
            };
            self.gpu_mut(index).unrestored_said = Some(describe_left(&report));
            Notice::Error(format!(
                "Could not put back everything {by} left changed on GPU {index} ({}). {kept}",
                describe_left(&report)
            ))
        })
    }

    /// The one-file journal of gputune 0.1: restored once, then removed.
    fn restore_legacy(&mut self, notices: &mut Vec<Notice>) {
        let path = self.folder.dir().join(LEGACY_JOURNAL);
        let Some(journal) = read_legacy(&path, notices) else {
            return;
        };
        if journal.owner.as_ref().is_some_and(|owner| {
            owner.pid != std::process::id() && Path::new(&format!("/proc/{}", owner.pid)).exists()
        }) {
            return;
        }
        if journal.backend == self.backend_kind || journal.backend == BackendKind::Sim {
            if journal.backend == self.backend_kind && journal.backend != BackendKind::Sim {
                for entry in &journal.gpus {
                    if let Ok(index) = self.index_of(&entry.uuid)
                        && let Some(notice) =
                            self.restore_journal(index, &entry.restore, "an older gputune", false)
                    {
                        notices.push(notice);
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn read_legacy(path: &Path, notices: &mut Vec<Notice>) -> Option<LegacyJournal> {
    let bytes = match fsafe::read_limited(path, 64 * 1024, Links::Refuse) {
        Ok(bytes) => bytes,
        Err(error) if error.is_not_found() => return None,
        Err(error) => {
            notices.push(Notice::Warning(format!("{error} It was left as it is.")));
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(journal) => Some(journal),
        Err(error) => {
            notices.push(Notice::Warning(format!(
                "The old journal {} is damaged ({error}); it was left as it is: check your GPUs' settings with `gputune status`, then delete it.",
                path.display()
            )));
            None
        }
    }
}

/// "fan 0 at 80 %: the driver refused (…); the power limit …": what was left, and why.
pub(super) fn describe_left(report: &GpuRestored) -> String {
    report
        .left
        .iter()
        .map(|(setting, reason)| format!("{}: {reason}", setting.describe()))
        .collect::<Vec<_>>()
        .join("; ")
}
