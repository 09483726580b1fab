//! Writing a card's journal: how to put back every control changed temporarily, written
//! before each temporary change. Journals left behind are read back in `journals_left.rs`,
//! put back by `restore.rs`; the file itself is `tuning::state_folder`'s.

use std::collections::BTreeMap;

use super::state::{Layer, RestoreMap, SessionGpu};
use super::{Engine, Ownership};
use crate::tuning::in_force::Control;
use crate::tuning::state_folder::EngineJournal;
use gputune_formats::files::GpuJournal;
use gputune_formats::tuning::{TuneError, TuneErrorKind};

impl Engine {
    /// Writes GPU `index`'s journal: for every control changed temporarily, the oldest value
    /// (what the card had before any of it). The sessions on the card hold different controls,
    /// so their layers never name the same control: each session's own changes, then its
    /// trial's, then what an earlier put-back could not write, then a pending apply's.
    /// `replacing` stands in for one of those layers while its owner edits it.
    ///
    /// What could not be put back comes after the sessions' layers: nothing new is written to a
    /// card while it waits, so it can only be older than a session that began before it failed.
    ///
    /// Without the daemon, other gputune processes may hold other controls of the card and keep
    /// their entries in the same file: the file is rewritten under its journal lock, with this
    /// engine's entries for the controls it holds and every other entry as it was.
    pub(super) fn write_journal(
        &self,
        index: u32,
        replacing: Option<(&RestoreMap, Layer)>,
    ) -> Result<(), TuneError> {
        let gpu = self.gpu(index);
        let parts: Vec<&SessionGpu> = self
            .sessions_on(index)
            .into_iter()
            .filter_map(|id| self.sessions.get(&id)?.gpus.get(&index))
            .collect();
        // A temperature hold's put-back is older than any session that took the limit after it.
        let hold_layer = self.hold_restore_layer(index);
        let mut layers: Vec<&RestoreMap> = vec![&hold_layer];
        layers.extend(parts.iter().map(|part| &part.restore));
        let replaced = |layer: Layer| {
            replacing
                .filter(|(_, replaced)| *replaced == layer)
                .map(|(map, _)| map)
        };
        layers.extend(replaced(Layer::Session));
        layers.extend(
            parts
                .iter()
                .filter_map(|part| part.trial.as_ref().map(|trial| &trial.restore)),
        );
        layers.extend(replaced(Layer::Trial));
        layers.push(&gpu.unrestored);
        layers.extend(replaced(Layer::Pending));
        let mut merged: RestoreMap = BTreeMap::new();
        for layer in layers {
            for (control, value) in layer {
                merged.entry(*control).or_insert(*value);
            }
        }
        let mut by: Vec<String> = Vec::new();
        for id in self.sessions_on(index) {
            if let Some(session) = self.sessions.get(&id) {
                let described = session.client.describe();
                if !by.contains(&described) {
                    by.push(described);
                }
            }
        }
        let mut restore: Vec<gputune_formats::card::Setting> =
            merged.values().map(|entry| entry.setting).collect();
        let uuid = &gpu.info.identity.uuid;
        let state_error = |message: String| {
            TuneError::new(
                TuneErrorKind::State,
                format!(
                    "{message} Nothing more was changed: gputune writes down how to undo a change before making it."
                ),
            )
        };
        let _journal_lock = if self.ownership == Ownership::InProcess {
            let lock = self.folder.lock_journal(uuid).map_err(|refused| {
                state_error(refused.message(index, "its journal could not be rewritten."))
            })?;
            // Other processes' entries: the controls this engine does not hold.
            match self.folder.read_journal(uuid) {
                Ok(Some(theirs)) if theirs.backend == self.backend_kind => {
                    let kept: Vec<gputune_formats::card::Setting> = theirs
                        .restore
                        .iter()
                        .filter(|setting| {
                            let control = Control::of(setting);
                            !merged.contains_key(&control)
                                && !gpu.control_locks.contains_key(&control.hold())
                        })
                        .copied()
                        .collect();
                    if !kept.is_empty() && !by.contains(&theirs.by) {
                        by.push(theirs.by.clone());
                    }
                    restore.extend(kept);
                }
                Ok(_) => {}
                Err(problem) => tracing::warn!("{}", problem.message),
            }
            Some(lock)
        } else {
            None
        };
        let by = if by.is_empty() {
            "gputune".to_string()
        } else {
            by.join(" and ")
        };
        let journal = GpuJournal::new(self.backend_kind, uuid, index, restore, &by);
        self.folder
            .write_journal(&journal)
            .map_err(|error| state_error(error.to_string()))
    }
}
