//! Fan curves: following a curve while a session holds the card's fans (the window's curve,
//! a run's), and the curve the daemon keeps with no client (a boot default's). The safety net
//! that overrides a curve when the card runs hot is in `fan_safety_net.rs`.

use std::collections::BTreeSet;

use super::{ClientInfo, Engine, KEPT_CURVE_CLIENT, Ownership, RestoreEntry};
use crate::device::gate::validate;
use crate::tuning::in_force::Control;
use gputune_formats::card::Setting;
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::{SessionId, SessionPurpose, TuneError, TuneErrorKind};

impl Engine {
    /// Refuses `what` (something the daemon keeps with no client attached: a fan curve, a
    /// temperature hold) in an engine that is not the daemon's, saying how to get one.
    pub(super) fn check_daemon_keeps(&self, what: &str, meanwhile: &str) -> Result<(), TuneError> {
        if self.ownership == Ownership::Daemon {
            return Ok(());
        }
        Err(TuneError::new(
            TuneErrorKind::Refused,
            format!(
                "{what} needs the gputune daemon, which is not running: install it with `sudo gputune daemon install`{meanwhile}."
            ),
        ))
    }

    /// Follows `curve` on every fan of a GPU while the client stays connected (`None` stops,
    /// and the fans go back to what they were before), in a fan-curve session that holds the
    /// card's fans only: other sessions may hold its other controls meanwhile. A client that
    /// follows a curve on the card already gets the new curve in the same session.
    pub fn set_fan_curve(
        &mut self,
        client: &ClientInfo,
        gpu_uuid: &str,
        curve: Option<FanCurve>,
    ) -> Result<(), TuneError> {
        self.check_may_write(client)?;
        let index = self.index_of(gpu_uuid)?;
        let fans: BTreeSet<Hold> = [Hold::Fans].into();
        self.check_free(index, client.id, &fans, true)?;
        let own_curve = self.holding(index, Hold::Fans).filter(|id| {
            self.sessions
                .get(id)
                .and_then(|session| session.gpus.get(&index))
                .is_some_and(|part| part.follows_curve)
        });
        match curve {
            Some(curve) => {
                self.check_fans(index)?;
                self.check_present(index)?;
                let id = match own_curve {
                    Some(id) => {
                        self.put_back_unrestored(index)?;
                        id
                    }
                    None => {
                        let trial_of_fans = self
                            .holding(index, Hold::Fans)
                            .and_then(|id| self.sessions.get(&id)?.gpus.get(&index))
                            .is_some_and(|part| part.trial.is_some());
                        if trial_of_fans {
                            return Err(TuneError::new(
                                TuneErrorKind::Held,
                                format!(
                                    "A trial of fan speeds runs on GPU {index}: keep or revert it first."
                                ),
                            ));
                        }
                        self.open_session(client, SessionPurpose::FanCurve, &[(index, fans)])?
                    }
                };
                self.start_and_announce(id, index, curve, own_curve.is_none())
            }
            None => {
                let Some(id) = own_curve else {
                    return Err(TuneError::new(
                        TuneErrorKind::NotFound,
                        format!("gputune follows no fan curve of yours on GPU {index}."),
                    ));
                };
                self.stop_curve(id, index);
                Ok(())
            }
        }
    }

    /// The daemon keeps `curve` on every fan of a GPU with no client attached (`None` clears
    /// it, and the fans go back to what they were before): a session of its own
    /// ([`SessionPurpose::KeptFanCurve`], client [`KEPT_CURVE_CLIENT`]) that holds the fans
    /// until it is cleared or the daemon stops, whoever set it and whenever that client goes.
    /// A new curve replaces the kept one in the same session; the client's own followed curve
    /// on the card gives way to it.
    pub fn keep_fan_curve(
        &mut self,
        client: &ClientInfo,
        gpu_uuid: &str,
        curve: Option<FanCurve>,
    ) -> Result<(), TuneError> {
        self.check_may_write(client)?;
        let index = self.index_of(gpu_uuid)?;
        self.check_daemon_keeps(
            "Keeping a fan curve",
            " (the window can still follow a curve while it is open)",
        )?;
        let kept = self.kept_curve(index);
        let Some(curve) = curve else {
            let Some(id) = kept else {
                return Err(TuneError::new(
                    TuneErrorKind::NotFound,
                    format!("The daemon keeps no fan curve on GPU {index}."),
                ));
            };
            self.stop_curve(id, index);
            return Ok(());
        };
        self.check_fans(index)?;
        self.check_present(index)?;
        let setter = kept_curve_client(client);
        let id = match kept {
            Some(id) => {
                self.put_back_unrestored(index)?;
                if let Some(session) = self.sessions.get_mut(&id) {
                    session.client = setter;
                }
                id
            }
            None => {
                // The client's own followed curve (the window's) gives way to the kept one.
                let own_followed = self.holding(index, Hold::Fans).filter(|id| {
                    self.sessions.get(id).is_some_and(|session| {
                        session.client.id == client.id
                            && session.purpose == SessionPurpose::FanCurve
                    })
                });
                if let Some(own) = own_followed {
                    self.stop_curve(own, index);
                }
                let fans: BTreeSet<Hold> = [Hold::Fans].into();
                self.open_session(&setter, SessionPurpose::KeptFanCurve, &[(index, fans)])?
            }
        };
        self.start_and_announce(id, index, curve, kept.is_none())
    }

    /// Starts `curve` for session `id` and tells every client; a curve the card refuses ends
    /// the session when it was `opened` for this curve (nothing of it is left to hold).
    fn start_and_announce(
        &mut self,
        id: SessionId,
        index: u32,
        curve: FanCurve,
        opened: bool,
    ) -> Result<(), TuneError> {
        if let Err(error) = self.start_curve(id, index, curve) {
            if opened {
                self.end_session_now(id, false, "Put back");
            }
            return Err(error);
        }
        self.announce(index);
        Ok(())
    }

    /// The session of the curve the daemon keeps on GPU `index`, if any.
    pub(super) fn kept_curve(&self, index: u32) -> Option<SessionId> {
        self.holding(index, Hold::Fans).filter(|id| {
            self.sessions
                .get(id)
                .is_some_and(|session| session.purpose == SessionPurpose::KeptFanCurve)
        })
    }

    /// Starts following `curve` on GPU `index` for session `id`. What each fan was is recorded
    /// (and journaled) before the curve first writes to it, and only then: a curve the driver
    /// refuses leaves nothing to put back.
    pub(super) fn start_curve(
        &mut self,
        id: SessionId,
        index: u32,
        curve: FanCurve,
    ) -> Result<(), TuneError> {
        self.check_fans(index)?;
        if let Some(part) = self.session_part_mut(id, index) {
            part.follows_curve = true;
        }
        let fans = &mut self.gpu_mut(index).fans;
        fans.curve = Some(curve);
        fans.target_pct = None;
        if let Some(latest) = self.gpu(index).recent.back().cloned() {
            self.drive_fans(index, &latest);
        }
        Ok(())
    }

    /// Records (and journals) what fan `fan_index` of GPU `index` was, in session `id`, before
    /// its curve first writes to it. Says whether it was recorded now.
    fn record_fan(&mut self, id: SessionId, index: u32, fan_index: u32) -> Result<bool, TuneError> {
        let control = Control::Fan { fan_index };
        // A driver that does not say who drives the fans: they were the driver's.
        let value = RestoreEntry::of(&self.gpu(index).in_force, control).unwrap_or(RestoreEntry {
            setting: Setting::FanAutomatic { fan_index },
            exact: false,
        });
        let Some(part) = self.session_part_mut(id, index) else {
            return Ok(false);
        };
        if part.restore.contains_key(&control) {
            return Ok(false);
        }
        part.restore.insert(control, value);
        if let Err(error) = self.write_journal(index, None) {
            self.forget_fan(id, index, fan_index);
            return Err(error);
        }
        Ok(true)
    }

    /// Takes fan `fan_index` out of session `id`'s record again (its write was refused: the
    /// fan is as it was), and out of the journal.
    fn forget_fan(&mut self, id: SessionId, index: u32, fan_index: u32) {
        if let Some(part) = self.session_part_mut(id, index) {
            part.restore.remove(&Control::Fan { fan_index });
        }
        if let Err(error) = self.write_journal(index, None) {
            tracing::error!("{error}");
        }
    }

    /// Writes one fan's speed for the curve: recorded and journaled first, taken out of the
    /// record again when the driver refuses it.
    pub(super) fn write_curve_speed(
        &mut self,
        index: u32,
        setting: Setting,
        fan_index: u32,
    ) -> Result<(), String> {
        let constraints = self.gpu(index).info.constraints.clone();
        let validated = validate(&constraints, setting).map_err(|error| error.to_string())?;
        let id = self.holding(index, Hold::Fans);
        let recorded_now = match id {
            Some(id) => self
                .record_fan(id, index, fan_index)
                .map_err(|error| error.message)?,
            None => false,
        };
        self.write(index, validated).map_err(|error| {
            if let (Some(id), true) = (id, recorded_now) {
                self.forget_fan(id, index, fan_index);
            }
            error.to_string()
        })
    }

    /// Stops the curve of session `id` on GPU `index` and puts the fans back.
    fn stop_curve(&mut self, id: SessionId, index: u32) {
        let fans = &mut self.gpu_mut(index).fans;
        fans.curve = None;
        fans.target_pct = None;
        let purpose = self.sessions.get(&id).map(|session| session.purpose);
        let alone = self
            .sessions
            .get(&id)
            .and_then(|session| session.gpus.get(&index))
            .is_some_and(|part| part.trial.is_none())
            && matches!(
                purpose,
                Some(SessionPurpose::FanCurve | SessionPurpose::KeptFanCurve)
            );
        if alone {
            // The session was only the curve: ending it puts the fans back and frees the card.
            self.end_session_now(id, false, "Stopped following the fan curve: put back");
            return;
        }
        let fan_entries = match self.session_part_mut(id, index) {
            Some(part) => {
                part.follows_curve = false;
                part.held.remove(&Hold::Fans);
                let entries: super::RestoreMap = part
                    .restore
                    .iter()
                    .filter(|(control, _)| matches!(control, Control::Fan { .. }))
                    .map(|(control, value)| (*control, *value))
                    .collect();
                part.restore
                    .retain(|control, _| !matches!(control, Control::Fan { .. }));
                entries
            }
            None => return,
        };
        let report = self.restore_map(index, &fan_entries);
        self.keep_unrestored(index, &fan_entries, &report);
        self.release_lock(index);
        self.announce(index);
    }
}

/// Who a kept curve's session says set it: the user ("alice") when known, else the client
/// ("the gputune daemon (boot default)"). It belongs to no connection.
fn kept_curve_client(client: &ClientInfo) -> ClientInfo {
    ClientInfo {
        id: KEPT_CURVE_CLIENT,
        pid: None,
        uid: None,
        user: None,
        label: client.user.clone().unwrap_or_else(|| client.describe()),
        may_write: true,
    }
}
