//! Writing settings: a plain apply (permanent, all or nothing: what it wrote is rolled back
//! when a later write fails) and the temporary writes of sessions and trials, each journaled
//! before it is made.

use std::time::Instant;

use super::{ClientInfo, Engine, Layer, RestoreEntry, RestoreMap};
use crate::device::gate::ValidatedSetting;
use crate::tuning::in_force::controls_written;
use gputune_formats::card::Setting;
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::{GpuApplied, GpuChange, TuneError, TuneErrorKind};

impl Engine {
    /// Applies every change, permanently. Validated on every GPU first (nothing is written if
    /// one value is refused); journaled while it runs, so a crash mid-way is put back at the next
    /// start; and when the driver refuses a write, what this apply wrote before is rolled back.
    pub fn apply_changes(
        &mut self,
        client: &ClientInfo,
        changes: &[GpuChange],
    ) -> Result<Vec<GpuApplied>, TuneError> {
        self.check_may_write(client)?;
        let mut plan: Vec<(u32, Vec<ValidatedSetting>)> = Vec::new();
        for change in changes {
            let index = self.index_of(&change.gpu_uuid)?;
            self.check_present(index)?;
            // A control another session holds is refused; one no session holds goes through,
            // whoever holds the card's other controls.
            let holds = change.settings.iter().map(Hold::of).collect();
            self.check_free(index, client.id, &holds, true)?;
            self.check_hold_allows(index, &holds)?;
            self.check_own_session_allows(index, &change.settings)?;
            let settings = self.validate_all(index, &change.settings)?;
            match plan.iter_mut().find(|(planned, _)| *planned == index) {
                Some((_, existing)) => existing.extend(settings),
                None => plan.push((index, settings)),
            }
        }
        if plan.iter().all(|(_, settings)| settings.is_empty()) {
            return Err(TuneError::new(TuneErrorKind::Refused, "Nothing to apply."));
        }
        let by = client.describe();
        for (position, (index, settings)) in plan.iter().enumerate() {
            let holds = settings
                .iter()
                .map(|setting| Hold::of(setting.setting()))
                .collect();
            // What an earlier put-back could not write goes back before anything new.
            let taken = self
                .take_locks(*index, &by, &holds)
                .and_then(|()| self.put_back_unrestored(*index));
            if let Err(error) = taken {
                for (taken, _) in &plan[..=position] {
                    self.release_lock(*taken);
                }
                return Err(error);
            }
        }
        let mut done: Vec<(u32, RestoreMap, Vec<Setting>)> = Vec::new();
        let mut failure = None;
        for (index, settings) in &plan {
            let mut map = RestoreMap::new();
            match self.write_temporary(*index, settings, &mut map, Layer::Pending) {
                Ok(written) => done.push((*index, map, written)),
                Err((written, error)) => {
                    done.push((*index, map, written));
                    failure = Some(error);
                    break;
                }
            }
        }
        let Some(error) = failure else {
            // Success: the changes are permanent, so nothing is left to restore.
            let mut applied = Vec::new();
            for (index, _, written) in done {
                if let Err(error) = self.write_journal(index, None) {
                    tracing::error!("{error}");
                }
                self.forget_in_session(index, &written);
                self.note_change(index, &by, crate::tuning::describe_all(&written));
                applied.push(self.applied_report(index, written));
                self.release_lock(index);
            }
            return Ok(applied);
        };
        // Roll back what this apply wrote, newest GPU first.
        let mut said = Vec::new();
        for (index, map, written) in done.into_iter().rev() {
            if written.is_empty() {
                let _ = self.write_journal(index, None);
                self.release_lock(index);
                continue;
            }
            let restored = self.restore_map(index, &map);
            self.keep_unrestored(index, &map, &restored);
            said.push(if restored.is_complete() {
                format!(
                    "What was written on GPU {index} ({}) was rolled back.",
                    crate::tuning::describe_all(&written)
                )
            } else {
                format!(
                    "GPU {index}: {} was written and could not all be rolled back ({}). {}",
                    crate::tuning::describe_all(&written),
                    super::restore::describe_left(&restored),
                    super::restore::retry_sentence()
                )
            });
            self.release_lock(index);
            self.announce(index);
        }
        let outcome = if said.is_empty() {
            "Nothing was changed.".to_string()
        } else {
            said.join(" ")
        };
        Err(TuneError::new(
            error.kind,
            format!("{} {outcome}", error.message),
        ))
    }

    /// Writes `settings` to GPU `index` as temporary changes recorded in `map` (which stands for
    /// `layer` in the journal): the value each control had is recorded and journaled before the
    /// first write to it. On failure, returns what was written before it; the failed control is
    /// not left in `map` unless something else changed it earlier.
    pub(super) fn write_temporary(
        &mut self,
        index: u32,
        settings: &[ValidatedSetting],
        map: &mut RestoreMap,
        layer: Layer,
    ) -> Result<Vec<Setting>, (Vec<Setting>, TuneError)> {
        self.write_temporary_until(index, settings, map, layer, None)
    }

    /// [`Engine::write_temporary`] that starts no write after `deadline`: a trial whose time
    /// runs out while a slow driver is still taking its settings stops there, so what was
    /// written is put back within the trial's time and one call.
    pub(super) fn write_temporary_until(
        &mut self,
        index: u32,
        settings: &[ValidatedSetting],
        map: &mut RestoreMap,
        layer: Layer,
        deadline: Option<Instant>,
    ) -> Result<Vec<Setting>, (Vec<Setting>, TuneError)> {
        let mut written = Vec::new();
        for (position, setting) in settings.iter().enumerate() {
            if deadline.is_some_and(|deadline| self.clock.now() >= deadline) {
                let message = format!(
                    "GPU {index}'s driver answers too slowly: the time ran out after {position} of {} settings were written.",
                    settings.len()
                );
                return Err((written, TuneError::new(TuneErrorKind::Device, message)));
            }
            // Each control the write changes (an offset: each compute P-state's) is recorded
            // with its value now before the first write to it.
            let gpu = self.gpu(index);
            let controls =
                controls_written(setting.setting(), &gpu.info.constraints, &gpu.in_force);
            let mut recorded_now = Vec::new();
            for control in controls {
                if map.contains_key(&control) {
                    continue;
                }
                let Some(value) = RestoreEntry::of(&self.gpu(index).in_force, control) else {
                    for recorded in &recorded_now {
                        map.remove(recorded);
                    }
                    return Err((
                        written,
                        TuneError::new(
                            TuneErrorKind::Refused,
                            format!(
                                "GPU {index} does not report {}, so gputune could not put it back: it is not changed.",
                                control.describe()
                            ),
                        ),
                    ));
                };
                map.insert(control, value);
                recorded_now.push(control);
            }
            if !recorded_now.is_empty()
                && let Err(error) = self.write_journal(index, Some((map, layer)))
            {
                for recorded in &recorded_now {
                    map.remove(recorded);
                }
                return Err((written, error));
            }
            if let Err(error) = self.write(index, *setting) {
                if !recorded_now.is_empty() {
                    for recorded in &recorded_now {
                        map.remove(recorded);
                    }
                    let _ = self.write_journal(index, Some((map, layer)));
                }
                return Err((
                    written,
                    TuneError::device(&error, &format!("GPU {index}: ")),
                ));
            }
            written.push(*setting.setting());
        }
        Ok(written)
    }

    /// A plain apply by the holder of a control makes its change permanent: the session no
    /// longer puts that control back.
    fn forget_in_session(&mut self, index: u32, written: &[Setting]) {
        for setting in written {
            let gpu = self.gpu(index);
            let controls = controls_written(setting, &gpu.info.constraints, &gpu.in_force);
            let Some(id) = self.holding(index, Hold::of(setting)) else {
                continue;
            };
            if let Some(part) = self.session_part_mut(id, index) {
                for control in &controls {
                    part.restore.remove(control);
                }
            }
        }
        let _ = self.write_journal(index, None);
    }

    /// The holder's own plain apply must not fight its trial or its fan curve.
    fn check_own_session_allows(&self, index: u32, settings: &[Setting]) -> Result<(), TuneError> {
        for setting in settings {
            let hold = Hold::of(setting);
            let Some(part) = self
                .holding(index, hold)
                .and_then(|id| self.sessions.get(&id))
                .and_then(|session| session.gpus.get(&index))
            else {
                continue;
            };
            if part.trial.is_some() {
                return Err(TuneError::new(
                    TuneErrorKind::Held,
                    format!(
                        "A trial runs on GPU {index}: keep or revert it before applying anything else."
                    ),
                ));
            }
            if part.follows_curve && hold == Hold::Fans {
                return Err(TuneError::new(
                    TuneErrorKind::Held,
                    format!(
                        "gputune follows a fan curve on GPU {index}: stop following it before setting the fans by hand."
                    ),
                ));
            }
        }
        Ok(())
    }

    /// What GPU `index` runs after `written`, with the enforced limit read back.
    pub(super) fn applied_report(&mut self, index: u32, written: Vec<Setting>) -> GpuApplied {
        self.refresh_settings(index);
        let enforced_power_limit_mw = self.read_enforced_limit(index);
        GpuApplied {
            gpu_index: index,
            applied: written,
            in_force: self.gpu(index).in_force.clone(),
            enforced_power_limit_mw,
        }
    }

    /// Whether GPU `index` has fans a curve can drive (for a boot default's curve).
    pub fn check_fan_curve(&self, index: u32) -> Result<(), TuneError> {
        self.check_fans(index)
    }

    /// Refuses fan control on a card without controllable fans.
    pub(super) fn check_fans(&self, index: u32) -> Result<(), TuneError> {
        let constraints = &self.gpu(index).info.constraints;
        if constraints.fan_count == 0 || constraints.fan_speed_range.is_none() {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                format!(
                    "GPU {index} has no fans to control (datacenter cards are cooled by the chassis)."
                ),
            ));
        }
        Ok(())
    }
}
