//! A card's critical error (an Xid): on a tuned card, most likely the tuning failed. By the
//! Xid's class (`device::xid`), the engine puts back the clock offsets and locks first — to
//! what the session holding each recorded, or to stock (offset 0, lock reset) for what a plain
//! apply or a boot default set — and never writes the fans for it. Then the sessions on the
//! card that held what went back, or a power limit, end (marked ended by the crash; what else
//! they changed goes back, as at any end), except a session that drives the card's fans: it
//! keeps its fans (and its power limit) and goes on without its clocks; a trial ends whole. A
//! plain-applied power limit stays (a lower limit cannot make a card unstable). The crash is
//! noted as the card's last change, and every client is told in one sentence.

use std::collections::BTreeSet;

use super::{Engine, Ownership, RestoreEntry, RestoreMap};
use crate::device::XidMeaning;
use crate::device::XidResponse;
use crate::tuning::in_force::Control;
use crate::tuning::in_force::ControlsInForce;
use gputune_formats::card::{CriticalEvent, PstateOffset, Setting};
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{ClockLockInForce, Hold, SettingsInForce};
use gputune_formats::tuning::{CriticalNote, EngineEvent, GpuRestored, SessionId, SettingLeft};

/// The controls an Xid's response puts back on a card running `in_force`, in the order they
/// are written: the offsets first (they move the card off its stock voltage/frequency curve),
/// each P-state's own where the card says per P-state, then the locks.
fn controls_back(response: XidResponse, in_force: &SettingsInForce) -> Vec<Control> {
    // The one offset (a card that does not say per P-state), then each P-state's own.
    let offsets = |one: Control, at: fn(u32) -> Control, per_pstate: &[PstateOffset]| {
        std::iter::once(one)
            .chain(per_pstate.iter().map(|offset| at(offset.pstate)))
            .collect::<Vec<Control>>()
    };
    let gpu_offsets = || {
        offsets(
            Control::GpuClockOffset,
            |pstate| Control::GpuClockOffsetAt { pstate },
            &in_force.gpu_clock_offsets,
        )
    };
    let memory_offsets = || {
        offsets(
            Control::MemoryClockOffset,
            |pstate| Control::MemoryClockOffsetAt { pstate },
            &in_force.memory_clock_offsets,
        )
    };
    match response {
        XidResponse::ClocksBack => {
            let mut controls = gpu_offsets();
            controls.extend(memory_offsets());
            controls.extend([Control::GpuClockLock, Control::MemoryClockLock]);
            controls
        }
        XidResponse::MemoryClockBack => {
            let mut controls = memory_offsets();
            controls.push(Control::MemoryClockLock);
            controls
        }
        XidResponse::NothingBack => Vec::new(),
    }
}

/// What puts `control` back to stock when it is tuned now (a plain apply's, a boot default's):
/// `None` at stock, or when the card does not report it. A card that says its offsets per
/// P-state has each put back on its own (its one compute offset is not written as well).
fn stock_entry(in_force: &SettingsInForce, control: Control) -> Option<RestoreEntry> {
    let tuned_at = |offsets: &[PstateOffset], pstate: u32| {
        offsets
            .iter()
            .any(|offset| offset.pstate == pstate && offset.offset_mhz != 0)
    };
    let setting = match control {
        Control::GpuClockOffset => in_force
            .gpu_clock_offset_mhz
            .filter(|offset| *offset != 0 && in_force.gpu_clock_offsets.is_empty())
            .map(|_| Setting::GpuClockOffset { offset_mhz: 0 }),
        Control::MemoryClockOffset => in_force
            .memory_clock_offset_mhz
            .filter(|offset| *offset != 0 && in_force.memory_clock_offsets.is_empty())
            .map(|_| Setting::MemoryClockOffset { offset_mhz: 0 }),
        Control::GpuClockOffsetAt { pstate } => tuned_at(&in_force.gpu_clock_offsets, pstate)
            .then_some(Setting::GpuClockOffsetAt {
                pstate,
                offset_mhz: 0,
            }),
        Control::MemoryClockOffsetAt { pstate } => tuned_at(&in_force.memory_clock_offsets, pstate)
            .then_some(Setting::MemoryClockOffsetAt {
                pstate,
                offset_mhz: 0,
            }),
        Control::GpuClockLock => matches!(in_force.gpu_clock_lock, ClockLockInForce::Locked { .. })
            .then_some(Setting::ResetGpuClocks),
        Control::MemoryClockLock => {
            matches!(in_force.memory_clock_lock, ClockLockInForce::Locked { .. })
                .then_some(Setting::ResetMemoryClocks)
        }
        Control::PowerLimit | Control::Fan { .. } => None,
    };
    setting.map(RestoreEntry::exact)
}

/// How soon after a crash that put a card back another Xid is taken as the rest of its burst.
const BURST_MS: u64 = 60_000;

/// Settings, each with the session it was put back for (`None`: stock, for no session).
type ForSession<T> = Vec<(Option<SessionId>, T)>;

/// One control to put back, and the session whose record it comes from (none: stock).
struct PutBack {
    control: Control,
    entry: RestoreEntry,
    holder: Option<SessionId>,
}

impl Engine {
    /// The driver reported a critical error on a card: see the module documentation.
    pub fn on_critical_event(&mut self, event: CriticalEvent) {
        let index = event.gpu_index;
        if index as usize >= self.gpus.len() {
            return;
        }
        let before = self.gpu(index).in_force.clone();
        let controls = controls_back(event.response(), &before);
        let holds: BTreeSet<Hold> = controls.iter().map(|control| control.hold()).collect();
        // The holders are found before anything changes.
        let holders = self.crash_holders(index, &holds);
        let (written, left) = self.put_back_clocks(index, &controls);
        let ending: Vec<SessionId> = holders
            .iter()
            .copied()
            .filter(|id| self.trial_only(*id, index) || !self.drives_fans(*id, index))
            .collect();
        let sentence = self.crash_sentence(index, &event, &before, &written, &left, &ending);
        for id in holders {
            let restored_here = written
                .iter()
                .filter(|(holder, _)| *holder == Some(id))
                .map(|(_, setting)| *setting)
                .collect::<Vec<_>>();
            let left_here = left
                .iter()
                .filter(|(holder, _)| *holder == Some(id))
                .map(|(_, left)| left.clone())
                .collect::<Vec<_>>();
            let ends = ending.contains(&id);
            self.settle_holder(id, event, &holds, &sentence, ends, restored_here, left_here);
        }
        let put_back: Vec<Setting> = written.iter().map(|(_, setting)| *setting).collect();
        let waiting: Vec<Setting> = left.iter().map(|(_, left)| left.setting).collect();
        self.record_crash(event, &put_back, &waiting, !ending.is_empty(), sentence);
    }

    /// The sessions on GPU `index` that held what goes back (`holds`), or a power limit (a
    /// sweep's step, a trial: a crash leaves their measurement meaningless).
    fn crash_holders(&self, index: u32, holds: &BTreeSet<Hold>) -> Vec<SessionId> {
        self.sessions_on(index)
            .into_iter()
            .filter(|id| {
                self.sessions
                    .get(id)
                    .and_then(|session| session.gpus.get(&index))
                    .is_some_and(|part| {
                        part.held.iter().any(|hold| {
                            holds.contains(hold) || (*hold == Hold::PowerLimit && !holds.is_empty())
                        })
                    })
            })
            .collect()
    }

    /// What a crash does to one session that held what went back: a trial alone ends whole
    /// (failed); a session's trial ends; then the session ends (`ends`), or, driving the fans,
    /// keeps them (and whatever else it holds) and goes on without the clocks.
    #[allow(clippy::too_many_arguments)]
    fn settle_holder(
        &mut self,
        id: SessionId,
        event: CriticalEvent,
        holds: &BTreeSet<Hold>,
        sentence: &str,
        ends: bool,
        restored_here: Vec<Setting>,
        left_here: Vec<SettingLeft>,
    ) {
        let index = event.gpu_index;
        if self.trial_only(id, index) {
            let reason = if self.changed_more(id) {
                format!("{sentence} The trial ended; what else it tried went back:")
            } else {
                format!("{sentence} The trial ended.")
            };
            // Failed: its client says the trial did not end as it should.
            self.finish_trial_with(id, index, false, &reason, true);
            return;
        }
        if self
            .sessions
            .get(&id)
            .and_then(|session| session.gpus.get(&index))
            .is_some_and(|part| part.trial.is_some())
        {
            self.finish_trial_with(id, index, false, sentence, true);
        }
        if ends {
            self.end_by_crash(id, index, event, sentence, restored_here, left_here);
        } else if let Some(part) = self.session_part_mut(id, index) {
            part.held.retain(|hold| !holds.contains(hold));
            self.release_lock(index);
        }
    }

    /// Notes the crash as the card's last critical error and last change, and tells every
    /// client: `put_back` what was written, `waiting` what the driver refused, `ended` whether
    /// sessions ended. The rest of a burst that did nothing is told as that.
    fn record_crash(
        &mut self,
        event: CriticalEvent,
        put_back: &[Setting],
        waiting: &[Setting],
        ended: bool,
        sentence: String,
    ) {
        let index = event.gpu_index;
        // Xids come in bursts (13, then 43 and 45): one that did nothing does not hide the
        // note of the one that put the card back.
        let did_something = !put_back.is_empty() || !waiting.is_empty() || ended;
        let at_ms = self.clock.now_ms();
        let gpu = self.gpu_mut(index);
        // The rest of a burst, soon after the Xid that put the card back: said as that, so the
        // newest line a user reads does not seem to contradict the one before it.
        let burst_of = gpu
            .last_critical
            .as_ref()
            .filter(|note| {
                !did_something
                    && !note.put_back.is_empty()
                    && at_ms.saturating_sub(note.at_ms) < BURST_MS
            })
            .map(|note| note.critical.xid);
        if did_something
            || gpu
                .last_critical
                .as_ref()
                .is_none_or(|note| note.put_back.is_empty())
        {
            gpu.last_critical = Some(CriticalNote {
                at_ms,
                critical: event,
                put_back: put_back.to_vec(),
                sentence: sentence.clone(),
            });
        }
        // A setting change for the history; an Xid that changed nothing (the rest of a burst, a
        // card at stock) is told but changes no setting, so it does not bury the one that did.
        if did_something {
            let what = if !put_back.is_empty() {
                format!("put back {}", crate::tuning::describe_all(put_back))
            } else if !waiting.is_empty() {
                format!(
                    "could not put back {} yet",
                    crate::tuning::describe_all(waiting)
                )
            } else {
                "ended the sessions holding its clocks".to_string()
            };
            self.note_change(index, &format!("the Xid {} crash", event.xid), what);
        }
        match burst_of {
            Some(first_xid) => self.notice(
                Some(index),
                Notice::Warning(format!(
                    "GPU {index} reported Xid {} ({}) right after Xid {first_xid}: nothing more to put back.",
                    event.xid,
                    event.meaning()
                )),
            ),
            None => self.notice(Some(index), Notice::Error(sentence)),
        }
        // After the sessions' ends: a client that holds one hears it was put back first.
        self.events.push(EngineEvent::Critical { critical: event });
    }

    /// Whether session `id` has changes of its own (or its trial's) left to put back.
    pub(super) fn changed_more(&self, id: SessionId) -> bool {
        self.sessions.get(&id).is_some_and(|session| {
            session.gpus.values().any(|part| {
                !part.restore.is_empty()
                    || part
                        .trial
                        .as_ref()
                        .is_some_and(|trial| !trial.restore.is_empty())
            })
        })
    }

    /// Whether session `id` drives GPU `index`'s fans (a curve, a fan speed).
    pub(super) fn drives_fans(&self, id: SessionId, index: u32) -> bool {
        self.sessions
            .get(&id)
            .and_then(|session| session.gpus.get(&index))
            .is_some_and(|part| part.held.contains(&Hold::Fans))
    }

    /// Writes `controls` back on GPU `index`, in order: each to what the session holding it
    /// recorded, or to stock when it is tuned and no session recorded it. Takes them out of the
    /// sessions' records (what the driver refuses waits in the journal, tried again). Returns
    /// what was written and what was left, each with the session it was for.
    fn put_back_clocks(
        &mut self,
        index: u32,
        controls: &[Control],
    ) -> (ForSession<Setting>, ForSession<SettingLeft>) {
        let mut written = Vec::new();
        let mut left = Vec::new();
        // An engine without the daemon locks what no session of its own holds before writing
        // it: another gputune process may be changing it.
        let unheld: BTreeSet<Hold> = controls
            .iter()
            .map(|control| control.hold())
            .filter(|hold| self.holding(index, *hold).is_none())
            .collect();
        let locked = match self.take_locks(index, "gputune (after a crash)", &unheld) {
            Ok(()) => Ok(()),
            Err(error) if self.ownership == Ownership::InProcess => Err(error.message),
            Err(_) => Ok(()),
        };
        let mut plan = Vec::new();
        for &control in controls {
            let holder = self.holding(index, control.hold());
            let recorded = holder
                .and_then(|id| self.sessions.get(&id)?.gpus.get(&index))
                .and_then(|part| {
                    part.restore
                        .get(&control)
                        .or_else(|| part.trial.as_ref()?.restore.get(&control))
                })
                .or_else(|| self.gpu(index).unrestored.get(&control))
                .copied();
            let Some(entry) = recorded.or_else(|| stock_entry(&self.gpu(index).in_force, control))
            else {
                continue;
            };
            if holder.is_none()
                && let Err(reason) = &locked
            {
                left.push((
                    None,
                    SettingLeft {
                        setting: entry.setting,
                        reason: reason.clone(),
                    },
                ));
                continue;
            }
            plan.push(PutBack {
                control,
                entry,
                holder,
            });
        }
        let had_plan = !plan.is_empty();
        let mut attempted = RestoreMap::new();
        let mut report = GpuRestored::nothing(index, &self.gpu(index).info.identity.uuid);
        for PutBack {
            control,
            entry,
            holder,
        } in plan
        {
            if let Some(part) = holder.and_then(|id| self.session_part_mut(id, index)) {
                part.restore.remove(&control);
                if let Some(trial) = part.trial.as_mut() {
                    trial.restore.remove(&control);
                }
            }
            // A session that wrote what the card had (a profile's +0 MHz) has nothing to undo.
            if entry.exact && self.gpu(index).in_force.matches(&entry.setting) {
                continue;
            }
            attempted.insert(control, entry);
            let one = self.restore_settings(index, &[entry]);
            report.exact &= one.exact;
            for setting in one.restored {
                report.restored.push(setting);
                written.push((holder, setting));
            }
            for setting_left in one.left {
                report.left.push(setting_left.clone());
                left.push((holder, setting_left));
            }
        }
        if had_plan {
            // The journal loses what was taken out of the sessions' records.
            self.keep_unrestored(index, &attempted, &report);
        }
        self.release_lock(index);
        (written, left)
    }

    /// Ends session `id` after a crash on GPU `index`: what else it changed goes back, its
    /// report names the crash and what was put back for it, and its client is told.
    fn end_by_crash(
        &mut self,
        id: SessionId,
        index: u32,
        event: CriticalEvent,
        sentence: &str,
        restored_here: Vec<Setting>,
        left_here: Vec<SettingLeft>,
    ) {
        let Some(client) = self.sessions.get(&id).map(|session| session.client.id) else {
            return;
        };
        let mut report = self.end_session_now(id, false, sentence);
        report.critical_event = Some(event);
        match report
            .restored
            .iter_mut()
            .find(|gpu| gpu.gpu_index == index)
        {
            Some(gpu) => {
                // What the driver refused a moment ago and took at the session's end is back.
                let taken_since: Vec<Control> = gpu.restored.iter().map(Control::of).collect();
                let still_left = left_here
                    .into_iter()
                    .filter(|left| !taken_since.contains(&Control::of(&left.setting)));
                gpu.left.splice(0..0, still_left);
                gpu.restored.splice(0..0, restored_here);
            }
            None => report.restored.push(GpuRestored {
                restored: restored_here,
                left: left_here,
                ..GpuRestored::nothing(index, &self.gpu(index).info.identity.uuid)
            }),
        }
        self.events
            .push(EngineEvent::SessionEnded { client, report });
    }
}
