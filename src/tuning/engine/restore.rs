//! Putting cards back: the settings a session, a trial or a failed apply recorded, and the
//! journals a crashed or killed gputune left behind.

use std::path::Path;

use serde::Deserialize;

use super::{Engine, GpuRestored, Ownership, RestoreMap};
use crate::device::gate::validate;
use crate::device::{BackendKind, Setting};
use crate::fsafe::{self, Links};
use crate::notice::Notice;
use crate::tuning::in_force::Control;

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
            exact: settings.iter().all(|(_, exact)| *exact),
        };
        for (position, (setting, _)) in settings.iter().enumerate() {
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
                Ok(()) => report.restored.push(*setting),
                Err(error) => report.left.push((*setting, error.to_string())),
            }
        }
        if !report.left.is_empty() {
            report.exact = false;
        }
        report
    }

    /// After a restore: GPU `index`'s journal keeps only what could not be put back (and is
    /// removed when that is nothing).
    pub(super) fn journal_what_is_left(&self, index: u32, report: &GpuRestored) {
        let left: super::RestoreMap = report
            .left
            .iter()
            .map(|(setting, _)| (Control::of(setting), (*setting, false)))
            .collect();
        if let Err(error) = self.write_journal(index, Some((&left, super::Layer::Pending))) {
            tracing::error!("{error}");
        }
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

    /// Restores one GPU from a journal's list, if its lock can be had; keeps what is left.
    fn restore_journal(
        &mut self,
        index: u32,
        restore: &[Setting],
        by: &str,
        from_gpu_journal: bool,
    ) -> Option<Notice> {
        if self.ownership == Ownership::InProcess {
            let uuid = self.gpu(index).info.identity.uuid.clone();
            match self.folder.try_lock(&uuid, "gputune (restoring a journal)") {
                Ok(lock) => self.gpu_mut(index).lock = Some(lock),
                // Its owner is alive and will put it back itself.
                Err(_) => return None,
            }
            // Reread: its owner may have finished between our listing and our lock.
            if from_gpu_journal && !matches!(self.folder.read_journal(&uuid), Ok(Some(_))) {
                self.release_lock(index);
                return None;
            }
        }
        let settings: Vec<(Setting, bool)> =
            restore.iter().map(|setting| (*setting, true)).collect();
        let report = self.restore_settings(index, &settings);
        let remaining: crate::tuning::engine::RestoreMap = report
            .left
            .iter()
            .map(|(setting, _)| {
                (
                    crate::tuning::in_force::Control::of(setting),
                    (*setting, true),
                )
            })
            .collect();
        let kept = self.write_journal(index, Some((&remaining, super::Layer::Pending)));
        self.release_lock(index);
        self.announce(index);
        let by = crate::text::printable(by);
        Some(if report.is_complete() {
            Notice::Info(format!(
                "Restored the settings {by} left changed on GPU {index} ({}).",
                crate::tuning::describe_all(&report.restored)
            ))
        } else {
            let left: Vec<String> = report
                .left
                .iter()
                .map(|(setting, reason)| format!("{}: {reason}", setting.describe()))
                .collect();
            Notice::Error(format!(
                "Could not put back everything {by} left changed on GPU {index} ({}); {}",
                left.join("; "),
                match kept {
                    Ok(()) =>
                        "the journal is kept, so the next start of gputune tries again.".to_string(),
                    Err(error) => error.to_string(),
                }
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
