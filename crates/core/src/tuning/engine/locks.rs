//! The cards' locks. The daemon holds every card's lock for its life; an engine without it
//! (a gputune process that may write) shares the card's lock with other gputune processes and
//! takes one lock per control it changes, giving each back when nothing needs it any more.

use super::{Engine, Ownership};
use crate::tuning::gpu_locks::LockRefused;
use gputune_formats::tuning::{ClockLockInForce, Hold};
use gputune_formats::tuning::{TuneError, TuneErrorKind};

impl Engine {
    /// Takes the locks of `holds` on GPU `index` for `by` when the engine does not hold them
    /// already, and catches up with what other gputune processes did to those controls
    /// meanwhile. The daemon holds every card's lock for its life; an engine without it shares
    /// the card's lock and takes one lock per control.
    pub(super) fn take_locks(
        &mut self,
        index: u32,
        by: &str,
        holds: &std::collections::BTreeSet<Hold>,
    ) -> Result<(), TuneError> {
        if self.ownership == Ownership::InProcess {
            let uuid = self.gpu(index).info.identity.uuid.clone();
            let refusal = |refused: LockRefused, message: String| {
                let kind = match refused {
                    LockRefused::Held { .. } => TuneErrorKind::Held,
                    LockRefused::Unusable { .. } => TuneErrorKind::State,
                };
                TuneError::new(kind, message)
            };
            if self.gpu(index).card_lock.is_none() {
                let lock = self.folder.try_lock_shared(&uuid, by).map_err(|refused| {
                    let message =
                        refused.message(index, "wait for it to finish, or stop it first.");
                    refusal(refused, message)
                })?;
                self.gpu_mut(index).card_lock = Some(lock);
            }
            let mut newly = Vec::new();
            for &hold in holds {
                if self.gpu(index).control_locks.contains_key(&hold) {
                    continue;
                }
                match self.folder.try_lock_control(&uuid, hold, by) {
                    Ok(lock) => {
                        self.gpu_mut(index).control_locks.insert(hold, lock);
                        newly.push(hold);
                    }
                    Err(refused) => {
                        // Only what this call took goes back.
                        let gpu = self.gpu_mut(index);
                        for hold in &newly {
                            gpu.control_locks.remove(hold);
                        }
                        if gpu.control_locks.is_empty() {
                            gpu.card_lock = None;
                        }
                        let (what, verb) = gputune_formats::holds::describe_holds(&[hold]);
                        let message = match &refused {
                            LockRefused::Held { holder } => format!(
                                "GPU {index}'s {what} {verb} being changed by {holder}: wait for it to finish, or stop it first."
                            ),
                            LockRefused::Unusable { .. } => refused.message(index, ""),
                        };
                        return Err(refusal(refused, message));
                    }
                }
            }
            if !newly.is_empty() {
                // Another process may have changed the card since this engine last looked:
                // what a session would put back must be what the card runs now.
                self.refresh_settings(index);
                self.take_in_journal(index, &newly);
            }
        }
        self.take_in_lock_record(index);
        Ok(())
    }

    /// Takes in the clock locks recorded for GPU `index`: another gputune (an in-process
    /// engine beside the daemon) may have set them. A recorded value wins over what this engine
    /// remembers, which only it wrote to the same record.
    pub(super) fn take_in_lock_record(&mut self, index: u32) {
        let uuid = &self.gpu(index).info.identity.uuid;
        let Some(recorded) = self.folder.read_locks(uuid) else {
            return;
        };
        // A lock a session of this engine holds is this engine's to know.
        let gpu_free = self.holding(index, Hold::GpuClockLock).is_none();
        let memory_free = self.holding(index, Hold::MemoryClockLock).is_none();
        let in_force = &mut self.gpu_mut(index).in_force;
        if gpu_free && recorded.gpu_clock_lock != ClockLockInForce::Unknown {
            in_force.gpu_clock_lock = recorded.gpu_clock_lock;
        }
        if memory_free && recorded.memory_clock_lock != ClockLockInForce::Unknown {
            in_force.memory_clock_lock = recorded.memory_clock_lock;
        }
    }

    /// Gives back the locks of GPU `index`'s controls that no session holds and no put-back
    /// waits for, and the card's lock with the last of them (in-process engines only). A
    /// control whose put-back the driver refused stays locked: this engine tries it again and
    /// no other process writes over it meanwhile.
    pub(super) fn release_lock(&mut self, index: u32) {
        if self.ownership != Ownership::InProcess {
            return;
        }
        let needed: std::collections::BTreeSet<Hold> = Hold::ALL
            .into_iter()
            .filter(|hold| {
                self.holding(index, *hold).is_some()
                    || self
                        .gpu(index)
                        .unrestored
                        .keys()
                        .any(|control| control.hold() == *hold)
            })
            .collect();
        let gpu = self.gpu_mut(index);
        gpu.control_locks.retain(|hold, _| needed.contains(hold));
        if gpu.control_locks.is_empty() {
            gpu.card_lock = None;
        }
    }
}
