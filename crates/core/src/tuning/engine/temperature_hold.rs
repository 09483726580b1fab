//! Temperature holds: the daemon keeps a card at or below a temperature by moving its power
//! limit within the user's bounds, with no client attached, until the hold is cleared or the
//! daemon stops (the neighbour of a kept fan curve, `fan_curves.rs`). The control is
//! `tuning::temperature_control`; here the hold is set, driven after each reading, paused
//! while a session holds the card's power limit, and cleared.
//!
//! A hold is no session: it holds nothing, so a trial, a sweep, a check or a run takes the
//! power limit as usual and the hold waits for it to end (a plain apply of the power limit is
//! refused while a hold moves it). Before its first write it records, and journals as the card's
//! oldest value, the limit it found: cleared, it writes it back; cleared while a session holds
//! the limit, it hands that value to the session, which puts it back at its end; a daemon
//! killed meanwhile has it put back from the journal at its next start.

use std::collections::BTreeSet;
use std::time::Duration;

use super::state::HoldKeeper;
use super::{ClientInfo, Engine, RestoreEntry, RestoreMap};
use crate::device::gate::validate;
use crate::tuning::in_force::Control;
use crate::tuning::temperature_control::{Step, TemperatureControl};
use gputune_formats::card::{Setting, Telemetry};
use gputune_formats::temperature_hold::{
    TemperatureHold, TemperatureHoldState, TemperatureHoldStatus,
};
use gputune_formats::tuning::{Hold, Notice, TuneError, TuneErrorKind};
use gputune_formats::units::watts_exact;

/// After a write the driver refused, the hold waits this long before it writes again.
pub const HOLD_REFUSED_WAIT: Duration = Duration::from_secs(60);
/// Who the history says moved the limit.
const HOLD_BY: &str = "temperature hold";

impl Engine {
    /// The daemon keeps `hold` on the card `gpu_uuid` (`None` clears it, and the power limit
    /// goes back to what it was before the hold). A new hold replaces the card's current one
    /// and keeps what it will put back. Refused without the daemon, outside the card's range,
    /// and while another session holds the card's power limit.
    pub fn keep_temperature_hold(
        &mut self,
        client: &ClientInfo,
        gpu_uuid: &str,
        hold: Option<TemperatureHold>,
    ) -> Result<(), TuneError> {
        self.check_may_write(client)?;
        let index = self.index_of(gpu_uuid)?;
        self.check_daemon_keeps("Holding a temperature", "")?;
        let Some(hold) = hold else {
            if self.gpu(index).temperature_hold.is_none() {
                return Err(TuneError::new(
                    TuneErrorKind::NotFound,
                    format!("The daemon keeps no temperature hold on GPU {index}."),
                ));
            }
            self.clear_temperature_hold(index, &client.describe());
            return Ok(());
        };
        self.check_temperature_hold(index, &hold)?;
        self.check_present(index)?;
        let set_by = kept_hold_setter(client);
        let since_ms = self.clock.now_ms();
        match self.gpu_mut(index).temperature_hold.as_mut() {
            Some(kept) => {
                // What it puts back stays; a refusal's wait does not outlive a new request.
                kept.hold = hold;
                kept.set_by = set_by;
                kept.control.reset();
                kept.quiet_until = None;
                if !matches!(kept.state, TemperatureHoldState::Paused { .. }) {
                    kept.state = TemperatureHoldState::Starting;
                }
            }
            None => {
                let power: BTreeSet<Hold> = [Hold::PowerLimit].into();
                self.check_free(index, client.id, &power, false)?;
                self.put_back_unrestored(index)?;
                self.gpu_mut(index).temperature_hold = Some(HoldKeeper {
                    hold,
                    set_by,
                    since_ms,
                    control: TemperatureControl::default(),
                    restore: None,
                    state: TemperatureHoldState::Starting,
                    quiet_until: None,
                });
            }
        }
        self.note_change(
            index,
            &client.describe(),
            format!("temperature hold set: {}", hold.describe()),
        );
        Ok(())
    }

    /// Whether `hold` could be kept on GPU `index` (nothing is changed): a boot default's is
    /// checked before it is stored.
    pub fn check_temperature_hold(
        &self,
        index: u32,
        hold: &TemperatureHold,
    ) -> Result<(), TuneError> {
        let gpu = self.gpus.get(index as usize).ok_or_else(|| {
            TuneError::new(TuneErrorKind::NotFound, format!("There is no GPU {index}."))
        })?;
        hold.check(&gpu.info.constraints)
            .map_err(|why| TuneError::new(TuneErrorKind::Refused, format!("GPU {index}: {why}")))
    }

    /// Refuses a plain apply of the power limit while a hold moves it.
    pub(super) fn check_hold_allows(
        &self,
        index: u32,
        holds: &BTreeSet<Hold>,
    ) -> Result<(), TuneError> {
        match &self.gpu(index).temperature_hold {
            Some(kept) if holds.contains(&Hold::PowerLimit) => Err(TuneError::new(
                TuneErrorKind::Held,
                format!(
                    "GPU {index}'s power limit is moved by the temperature hold the daemon keeps ({}, set by {}): clear it with `gputune hold-temp clear --gpu {index}` first, or set the hold again with other bounds.",
                    kept.hold.describe(),
                    kept.set_by
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The hold's status for clients: paused whenever a session holds the power limit.
    pub(super) fn temperature_hold_status(&self, index: u32) -> Option<TemperatureHoldStatus> {
        let kept = self.gpu(index).temperature_hold.as_ref()?;
        let state = match self.power_limit_holder(index) {
            Some(by) => TemperatureHoldState::Paused { by },
            None => kept.state.clone(),
        };
        Some(TemperatureHoldStatus {
            hold: kept.hold,
            set_by: kept.set_by.clone(),
            since_ms: kept.since_ms,
            state,
            put_back_mw: match kept.restore {
                Some(RestoreEntry {
                    setting: Setting::PowerLimit { power_limit_mw },
                    ..
                }) => Some(power_limit_mw),
                _ => self.gpu(index).in_force.power_limit_mw,
            },
        })
    }

    /// "a sweep of gputune sweep (pid 4242, user alice)", when a session holds the limit.
    fn power_limit_holder(&self, index: u32) -> Option<String> {
        let id = self.holding(index, Hold::PowerLimit)?;
        let holder = self.holder_of(id, index)?;
        Some(holder.purpose.describe_by(&holder.by))
    }

    /// After each reading of GPU `index`: the hold's control, and its write when it moves.
    pub(super) fn drive_temperature_hold(&mut self, index: u32, reading: &Telemetry) {
        if self.gpu(index).temperature_hold.is_none() || self.gpu(index).lost.is_some() {
            return;
        }
        if let Some(by) = self.power_limit_holder(index) {
            self.pause_hold(index, by);
            return;
        }
        let now = self.clock.now();
        let limit_mw = self
            .gpu(index)
            .in_force
            .power_limit_mw
            .or(reading.power_limit_mw);
        let (Some(temperature_c), Some(limit_mw)) = (reading.temperature_c, limit_mw) else {
            return;
        };
        let Some(kept) = self.gpu_mut(index).temperature_hold.as_mut() else {
            return;
        };
        if let TemperatureHoldState::Paused { .. } = kept.state {
            // Going on where the session left the card.
            kept.state = TemperatureHoldState::Holding {
                power_limit_mw: limit_mw,
                temperature_c,
            };
            self.notice(
                Some(index),
                Notice::Info(format!(
                    "GPU {index}'s temperature hold goes on: nothing else holds the power limit now."
                )),
            );
            self.announce(index);
            return;
        }
        if kept.quiet_until.is_some_and(|until| now < until) {
            return;
        }
        let hold = kept.hold;
        let Some(step) = kept.control.observe(
            &hold,
            reading.sampled_at_ms,
            temperature_c,
            reading.power_draw_mw,
            limit_mw,
        ) else {
            return;
        };
        if step.write_mw.is_some() && !self.gpu(index).unrestored.is_empty() {
            // Nothing new over a card whose earlier values are not back: they go first, and
            // this step (counted from the limit they replace) is skipped.
            if let Err(error) = self.put_back_unrestored(index) {
                self.refuse_hold(index, error.message);
            }
            return;
        }
        let written = match step.write_mw {
            Some(target_mw) => self.write_hold_limit(index, &hold, limit_mw, target_mw, &step),
            None => true,
        };
        if written {
            self.settle_hold_state(index, &hold, &step);
        }
    }

    /// Another session holds the power limit: the hold waits, said once.
    fn pause_hold(&mut self, index: u32, by: String) {
        let Some(kept) = self.gpu_mut(index).temperature_hold.as_mut() else {
            return;
        };
        let paused = TemperatureHoldState::Paused { by: by.clone() };
        if kept.state == paused {
            return;
        }
        kept.state = paused;
        kept.control.reset();
        self.notice(
            Some(index),
            Notice::Info(format!(
                "GPU {index}'s temperature hold is paused: {by} holds the power limit; it goes on when that ends."
            )),
        );
        self.announce(index);
    }

    /// The state after a step, told to every client when it changed.
    fn settle_hold_state(&mut self, index: u32, hold: &TemperatureHold, step: &Step) {
        let state = if step.at_floor {
            TemperatureHoldState::AtFloor {
                power_limit_mw: step.power_limit_mw,
                temperature_c: step.temperature_c,
            }
        } else {
            TemperatureHoldState::Holding {
                power_limit_mw: step.power_limit_mw,
                temperature_c: step.temperature_c,
            }
        };
        let Some(kept) = self.gpu_mut(index).temperature_hold.as_mut() else {
            return;
        };
        let newly_at_floor =
            step.at_floor && !matches!(kept.state, TemperatureHoldState::AtFloor { .. });
        let changed = std::mem::discriminant(&kept.state) != std::mem::discriminant(&state)
            || step.write_mw.is_some();
        kept.state = state;
        if newly_at_floor {
            self.notice(
                Some(index),
                Notice::Warning(format!(
                    "GPU {index} is at {} °C, over its hold of {} °C, at the hold's lowest power limit ({}): improve its cooling, or give the hold a lower bound.",
                    step.temperature_c,
                    hold.max_temperature_c,
                    watts_exact(hold.min_power_limit_mw)
                )),
            );
        }
        if changed {
            self.announce(index);
        }
    }

    /// Writes the hold's new limit through the gate: its put-back recorded and journaled
    /// first. A refusal is said once, and the hold waits [`HOLD_REFUSED_WAIT`] before it writes
    /// again. Says whether the limit was written.
    fn write_hold_limit(
        &mut self,
        index: u32,
        hold: &TemperatureHold,
        from_mw: u32,
        target_mw: u32,
        step: &Step,
    ) -> bool {
        let setting = Setting::PowerLimit {
            power_limit_mw: target_mw,
        };
        let recorded_now = match self.record_hold_restore(index) {
            Ok(recorded_now) => recorded_now,
            Err(error) => {
                self.refuse_hold(index, error.message);
                return false;
            }
        };
        let result = validate(&self.gpu(index).info.constraints, setting)
            .map_err(|refused| refused.to_string())
            .and_then(|validated| {
                self.write(index, validated)
                    .map_err(|error| error.to_string())
            });
        if let Err(reason) = result {
            if recorded_now {
                if let Some(kept) = self.gpu_mut(index).temperature_hold.as_mut() {
                    kept.restore = None;
                }
                if let Err(error) = self.write_journal(index, None) {
                    tracing::error!("{error}");
                }
            }
            self.refuse_hold(index, reason);
            return false;
        }
        let why = if step.temperature_c > hold.max_temperature_c {
            format!(
                "{} °C over {} °C",
                step.temperature_c, hold.max_temperature_c
            )
        } else {
            format!(
                "{} °C, hold {} °C",
                step.temperature_c, hold.max_temperature_c
            )
        };
        self.note_change(
            index,
            HOLD_BY,
            format!(
                "temperature hold: {} to {} ({why})",
                watts_exact(from_mw),
                watts_exact(target_mw)
            ),
        );
        true
    }

    /// Records (and journals) the power limit before the hold's first write: one an earlier
    /// put-back still owes the card, else what the card runs, else its default when it does
    /// not say. Says whether it was recorded now.
    fn record_hold_restore(&mut self, index: u32) -> Result<bool, TuneError> {
        let gpu = self.gpu(index);
        let owed = gpu.unrestored.get(&Control::PowerLimit).copied();
        let in_force = || RestoreEntry::of(&gpu.in_force, Control::PowerLimit);
        let entry = owed.or_else(in_force).or_else(|| {
            gpu.info
                .constraints
                .power_limit_default_mw
                .map(|power_limit_mw| RestoreEntry {
                    setting: Setting::PowerLimit { power_limit_mw },
                    exact: false,
                })
        });
        let Some(kept) = self.gpu_mut(index).temperature_hold.as_mut() else {
            return Ok(false);
        };
        if kept.restore.is_some() {
            return Ok(false);
        }
        let Some(entry) = entry else {
            return Err(TuneError::new(
                TuneErrorKind::Device,
                "the card says neither its power limit nor its default, so the hold could not note what to put back",
            ));
        };
        kept.restore = Some(entry);
        if let Err(error) = self.write_journal(index, None) {
            if let Some(kept) = self.gpu_mut(index).temperature_hold.as_mut() {
                kept.restore = None;
            }
            return Err(error);
        }
        Ok(true)
    }

    /// The driver (or the journal) refused the hold's write: said once, tried again later.
    fn refuse_hold(&mut self, index: u32, reason: String) {
        let wait_until = self.clock.now() + HOLD_REFUSED_WAIT;
        let Some(kept) = self.gpu_mut(index).temperature_hold.as_mut() else {
            return;
        };
        kept.quiet_until = Some(wait_until);
        kept.control.reset();
        let refused = TemperatureHoldState::Refused {
            reason: reason.clone(),
        };
        if kept.state == refused {
            return;
        }
        kept.state = refused;
        self.notice(
            Some(index),
            Notice::Error(format!(
                "GPU {index}'s temperature hold could not set its power limit ({reason}); it tries again in {} s.",
                HOLD_REFUSED_WAIT.as_secs()
            )),
        );
        self.announce(index);
    }

    /// Ends GPU `index`'s hold: the power limit goes back to what it was before it, now, or
    /// at the end of the session that holds the limit now.
    pub(super) fn clear_temperature_hold(&mut self, index: u32, by: &str) {
        let Some(kept) = self.gpu_mut(index).temperature_hold.take() else {
            return;
        };
        let Some(entry) = kept.restore else {
            self.note_change(index, by, "temperature hold cleared".to_string());
            return;
        };
        if let Some(id) = self.holding(index, Hold::PowerLimit) {
            // The session's put-back is the hold's: what the card had before either. A
            // trial's own put-back of the limit carries it when the session's does not.
            if let Some(part) = self.session_part_mut(id, index) {
                let trial = part.trial.as_mut().map(|trial| &mut trial.restore);
                match trial {
                    Some(restore)
                        if !part.restore.contains_key(&Control::PowerLimit)
                            && restore.contains_key(&Control::PowerLimit) =>
                    {
                        restore.insert(Control::PowerLimit, entry);
                    }
                    _ => {
                        part.restore.insert(Control::PowerLimit, entry);
                    }
                }
            }
            if let Err(error) = self.write_journal(index, None) {
                tracing::error!("{error}");
            }
            self.note_change(
                index,
                by,
                format!(
                    "temperature hold cleared: {} goes back when the session holding it ends",
                    entry.setting.describe()
                ),
            );
            return;
        }
        let map: RestoreMap = [(Control::PowerLimit, entry)].into();
        let report = self.restore_map(index, &map);
        self.keep_unrestored(index, &map, &report);
        let what = if report.restored.is_empty() {
            format!(
                "temperature hold cleared; {} could not be put back yet",
                entry.setting.describe()
            )
        } else {
            format!(
                "temperature hold cleared: put back {}",
                crate::tuning::describe_all(&report.restored)
            )
        };
        self.note_change(index, by, what);
    }

    /// Clears every hold (the daemon is stopping): each card's limit goes back.
    pub(super) fn clear_temperature_holds(&mut self) {
        for index in 0..self.gpus.len() as u32 {
            self.clear_temperature_hold(index, "gputune is stopping");
        }
    }

    /// The hold's put-back, as the journal's oldest layer.
    pub(super) fn hold_restore_layer(&self, index: u32) -> RestoreMap {
        self.gpu(index)
            .temperature_hold
            .as_ref()
            .and_then(|kept| kept.restore)
            .map(|entry| [(Control::PowerLimit, entry)].into())
            .unwrap_or_default()
    }
}

/// Who a kept hold says set it: the user ("alice") when known, else the client. It belongs to
/// no connection, like a kept fan curve.
fn kept_hold_setter(client: &ClientInfo) -> String {
    client.user.clone().unwrap_or_else(|| client.describe())
}
