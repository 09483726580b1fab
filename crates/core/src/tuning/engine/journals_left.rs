//! Journals left behind: what a gputune that crashed or was killed (or this engine, when the
//! driver refused) wrote down to put back. Read at start (`Engine::open` → `restore_pending`),
//! and by an engine without the daemon each time it takes a control's lock (`take_in_journal`).
//! The put-back itself is `restore.rs`.

use std::path::Path;

use super::restore::{describe_left, retry_sentence};
use super::{Engine, Ownership, RestoreEntry, RestoreMap};
use crate::fsafe::{self, Links};
use crate::tuning::in_force::Control;
use crate::tuning::in_force::ControlsInForce;
use gputune_formats::card::{BackendKind, Setting};
use gputune_formats::legacy::JournalV1;
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::TuneErrorKind;

/// The single journal of gputune 0.1 (all GPUs in one file; its format is `JournalV1`).
const LEGACY_JOURNAL: &str = "journal.json";

impl Engine {
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
            .map(|setting| (Control::of(setting), RestoreEntry::exact(*setting)))
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
                        .write_journal(&gputune_formats::files::GpuJournal {
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
            .map(|setting| (Control::of(setting), RestoreEntry::exact(*setting)))
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
                            self.restore_journal(index, &entry.restore(), "an older gputune", false)
                    {
                        notices.push(notice);
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn read_legacy(path: &Path, notices: &mut Vec<Notice>) -> Option<JournalV1> {
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
