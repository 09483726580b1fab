//! Sessions: a trial, a run, a window's fan curve or a sweep holds the controls it changes on
//! its cards, changes them temporarily, and puts back exactly what was there when it ends, is
//! stopped, or its client goes away. One session per control at a time: sessions holding
//! different controls of one card (a power-limit trial beside a fan curve) go on together.
//! Starting and changing sessions is here; ending them (and a client going away) is in
//! `session_end.rs`; their data (`Session`, `SessionGpu`) is in `state.rs`.

use std::collections::{BTreeMap, BTreeSet};

use super::state::{Session, SessionGpu, Trial};
use super::{ClientInfo, Engine, Layer, RestoreMap, check_change_count, check_settings_count};
use gputune_formats::card::Telemetry;
use gputune_formats::tuning::{
    ClientId, GpuApplied, GpuChange, GpuFanCurve, Holder, SessionId, SessionPurpose,
    SessionRequest, SessionStarted, TuneError, TuneErrorKind,
};
use gputune_formats::{holds::describe_holds, tuning::Hold};

/// The most readings a session keeps per GPU for its statistics (a day at 1 Hz); past that,
/// every other one is dropped, so a week-long run costs the same memory as a day.
const MAX_SESSION_SAMPLES: usize = 86_400;

impl Engine {
    /// Who holds GPU `index` through session `id`.
    pub(super) fn holder_of(&self, id: SessionId, index: u32) -> Option<Holder> {
        let session = self.sessions.get(&id)?;
        let part = session.gpus.get(&index);
        let trial_ends_at_ms = part
            .and_then(|part| part.trial.as_ref())
            .and_then(Trial::ends_at_ms);
        Some(Holder {
            session: id,
            controls: part
                .map(|part| part.held.iter().copied().collect())
                .unwrap_or_default(),
            purpose: session.purpose,
            by: session.job.as_ref().map_or_else(
                || session.client.describe(),
                gputune_formats::tuning::JobInfo::describe,
            ),
            client: session.client.id,
            since_ms: session.started_at_ms,
            trial_ends_at_ms,
            job_pid: session.job_pid,
            energy_at_start_mj: part.and_then(|part| part.energy_at_start_mj),
            job: session.job.clone(),
        })
    }

    /// Refuses a client that may not write.
    pub(super) fn check_may_write(&self, client: &ClientInfo) -> Result<(), TuneError> {
        if client.may_write {
            Ok(())
        } else {
            Err(TuneError::new(
                TuneErrorKind::NotAllowed,
                "Only root and members of the gputune group may change GPU settings through the daemon: `sudo usermod -aG gputune $USER`, then log in again.",
            ))
        }
    }

    /// Refuses when a session holds one of `holds` on GPU `index`, naming the session and the
    /// controls: another client's always; the client's own unless `own_allowed` (its plain
    /// apply, which becomes permanent).
    pub(super) fn check_free(
        &self,
        index: u32,
        client: ClientId,
        holds: &BTreeSet<Hold>,
        own_allowed: bool,
    ) -> Result<(), TuneError> {
        let mut conflicts: BTreeMap<SessionId, Vec<Hold>> = BTreeMap::new();
        for &hold in holds {
            if let Some(id) = self.holding(index, hold) {
                conflicts.entry(id).or_default().push(hold);
            }
        }
        let mut own = None;
        for (id, held) in conflicts {
            let Some(holder) = self.holder_of(id, index) else {
                continue;
            };
            let (what, verb) = describe_holds(&held);
            if holder.client != client {
                let until = holder
                    .trial_ends_at_ms
                    .map(|ends_ms| {
                        format!(
                            " until {}",
                            gputune_formats::units::local_time(ends_ms, "%H:%M:%S")
                        )
                    })
                    .unwrap_or_default();
                if holder.purpose == SessionPurpose::KeptFanCurve {
                    return Err(TuneError::new(
                        TuneErrorKind::Held,
                        format!(
                            "GPU {index}'s {what} {verb} held by the fan curve kept by the daemon, set by {}: clear it with `gputune fan curve clear --gpu {index}` first.",
                            holder.by
                        ),
                    ));
                }
                return Err(TuneError::new(
                    TuneErrorKind::Held,
                    format!(
                        "GPU {index}'s {what} {verb} held by {} of {}{until}: wait for it to end, or stop it there.",
                        holder.purpose.describe(),
                        holder.by
                    ),
                ));
            }
            if !own_allowed && own.is_none() {
                own = Some(TuneError::new(
                    TuneErrorKind::Held,
                    format!(
                        "GPU {index}'s {what} {verb} already held by one of your sessions ({}): end it first.",
                        holder.purpose.describe()
                    ),
                ));
            }
        }
        own.map_or(Ok(()), Err)
    }

    /// Starts a session: holds the cards, applies its changes and follows its curves. All or
    /// nothing: what was written before a failure is put back, and the session does not start.
    pub fn start_session(
        &mut self,
        client: &ClientInfo,
        request: &SessionRequest,
    ) -> Result<SessionStarted, TuneError> {
        self.check_may_write(client)?;
        check_change_count(request.changes.len() + request.fan_curves.len())?;
        check_settings_count(&request.changes)?;
        self.check_job_request(client, request)?;
        if request.purpose == SessionPurpose::BoxCheck {
            self.check_box_check_free()?;
        }
        if let Some(joined) = self.join_job(client, request)? {
            return Ok(joined);
        }
        // The cards, each once, in the order named.
        let mut indices: Vec<u32> = Vec::new();
        for uuid in request
            .changes
            .iter()
            .map(|change| change.gpu_uuid.as_str())
            .chain(request.fan_curves.iter().map(|kept| kept.gpu_uuid.as_str()))
        {
            let index = self.index_of(uuid)?;
            if !indices.contains(&index) {
                indices.push(index);
            }
        }
        if indices.is_empty() {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                "A session needs at least one GPU to change.",
            ));
        }
        let mut validated = BTreeMap::new();
        for change in &request.changes {
            let index = self.index_of(&change.gpu_uuid)?;
            validated
                .entry(index)
                .or_insert_with(Vec::new)
                .extend(self.validate_all(index, &change.settings)?);
        }
        let mut parts: Vec<(u32, BTreeSet<Hold>)> = indices
            .iter()
            .map(|index| {
                let holds = validated
                    .get(index)
                    .into_iter()
                    .flatten()
                    .map(|setting| Hold::of(setting.setting()))
                    .collect();
                (*index, holds)
            })
            .collect();
        for GpuFanCurve { gpu_uuid, .. } in &request.fan_curves {
            let index = self.index_of(gpu_uuid)?;
            self.check_fans(index)?;
            if let Some((_, holds)) = parts.iter_mut().find(|(part, _)| *part == index) {
                holds.insert(Hold::Fans);
            }
        }
        let id = self.open_session(client, request.purpose, &parts)?;
        if let Some(session) = self.sessions.get_mut(&id) {
            session.job_pid = request.job_pid;
            session.job = request.job.clone();
        }
        if request.purpose == SessionPurpose::BoxCheck
            && let Err(error) = self.box_check_started(id, &indices, clock_cap_mhz(request))
        {
            self.end_session_now(id, false, "The box check could not be journaled");
            return Err(error);
        }
        let mut applied = Vec::new();
        for (&index, settings) in &validated {
            match self.session_write(id, index, settings) {
                Ok(written) => applied.push(written),
                Err(error) => {
                    let report = self.end_session_now(id, false, "Put back after a failed start");
                    let restored = if report.is_complete() {
                        " What was written was put back."
                    } else {
                        " Not everything written could be put back: see the messages."
                    };
                    return Err(TuneError::new(
                        error.kind,
                        format!("{}{restored}", error.message),
                    ));
                }
            }
        }
        for GpuFanCurve { gpu_uuid, curve } in &request.fan_curves {
            let index = self.index_of(gpu_uuid)?;
            if let Err(error) = self.start_curve(id, index, curve.clone()) {
                self.end_session_now(id, false, "Put back after a failed start");
                return Err(error);
            }
        }
        for &index in &indices {
            self.announce(index);
        }
        Ok(SessionStarted {
            session: id,
            applied,
            joined: false,
        })
    }

    /// Holds the controls of `parts` (each card with the controls held on it) for a new
    /// session of `client`: each card present, each control free, its lock taken.
    pub(super) fn open_session(
        &mut self,
        client: &ClientInfo,
        purpose: SessionPurpose,
        parts: &[(u32, BTreeSet<Hold>)],
    ) -> Result<SessionId, TuneError> {
        self.check_room(client, parts.len())?;
        for (index, holds) in parts {
            self.check_present(*index)?;
            self.check_free(*index, client.id, holds, false)?;
        }
        let by = client.describe();
        for (position, (index, holds)) in parts.iter().enumerate() {
            // What an earlier put-back could not write goes back before this session's changes.
            let taken = self
                .take_locks(*index, &by, holds)
                .and_then(|()| self.put_back_unrestored(*index));
            if let Err(error) = taken {
                for (taken, _) in &parts[..=position] {
                    self.release_lock(*taken);
                }
                return Err(error);
            }
        }
        let id = self.next_session;
        self.next_session += 1;
        self.sessions.insert(
            id,
            Session {
                client: client.clone(),
                purpose,
                started_at_ms: self.clock.now_ms(),
                gpus: parts
                    .iter()
                    .map(|(index, holds)| {
                        (
                            *index,
                            SessionGpu {
                                held: holds.clone(),
                                restore: RestoreMap::new(),
                                trial: None,
                                during: Vec::new(),
                                follows_curve: false,
                                energy_at_start_mj: self
                                    .gpu(*index)
                                    .recent
                                    .back()
                                    .and_then(|reading| reading.energy_total_mj),
                                tally: None,
                            },
                        )
                    })
                    .collect(),
                job_pid: None,
                job: None,
                steps: Vec::new(),
            },
        );
        Ok(id)
    }

    /// More temporary changes within a running session (a sweep's next step).
    pub fn session_apply(
        &mut self,
        client: &ClientInfo,
        id: SessionId,
        changes: &[GpuChange],
    ) -> Result<Vec<GpuApplied>, TuneError> {
        self.own_session(client, id)?;
        check_change_count(changes.len())?;
        check_settings_count(changes)?;
        let mut applied = Vec::new();
        for change in changes {
            let index = self.index_of(&change.gpu_uuid)?;
            let part = self
                .sessions
                .get(&id)
                .and_then(|session| session.gpus.get(&index));
            match part {
                None => {
                    return Err(TuneError::new(
                        TuneErrorKind::Refused,
                        format!("GPU {index} is not part of this session."),
                    ));
                }
                Some(part) if part.trial.is_some() => {
                    return Err(TuneError::new(
                        TuneErrorKind::Refused,
                        format!("A trial runs on GPU {index}: keep or revert it first."),
                    ));
                }
                Some(_) => {}
            }
            let settings = self.validate_all(index, &change.settings)?;
            self.hold_more(client, id, index, &settings)?;
            self.put_back_unrestored(index)?;
            applied.push(self.session_write(id, index, &settings)?);
        }
        // A box check holding a new cap: its journal says it before the load resumes.
        self.box_check_cap(id, clock_cap_mhz_of(changes));
        Ok(applied)
    }

    /// Makes session `id` hold the controls of `settings` on GPU `index` it does not hold yet,
    /// when they are free.
    fn hold_more(
        &mut self,
        client: &ClientInfo,
        id: SessionId,
        index: u32,
        settings: &[crate::device::gate::ValidatedSetting],
    ) -> Result<(), TuneError> {
        let held = self
            .sessions
            .get(&id)
            .and_then(|session| session.gpus.get(&index))
            .map(|part| part.held.clone())
            .unwrap_or_default();
        let more: BTreeSet<Hold> = settings
            .iter()
            .map(|setting| Hold::of(setting.setting()))
            .filter(|hold| !held.contains(hold))
            .collect();
        if more.is_empty() {
            return Ok(());
        }
        self.check_free(index, client.id, &more, false)?;
        self.take_locks(index, &client.describe(), &more)?;
        if let Some(part) = self.session_part_mut(id, index) {
            part.held.extend(more);
        }
        Ok(())
    }

    /// Writes `settings` to GPU `index` as session `id`'s temporary changes.
    fn session_write(
        &mut self,
        id: SessionId,
        index: u32,
        settings: &[crate::device::gate::ValidatedSetting],
    ) -> Result<GpuApplied, TuneError> {
        let by = self
            .sessions
            .get(&id)
            .map(|session| session.client.describe())
            .unwrap_or_default();
        let mut map = self
            .session_part_mut(id, index)
            .map(|part| std::mem::take(&mut part.restore))
            .unwrap_or_default();
        let result = self.write_temporary(index, settings, &mut map, Layer::Session);
        if let Some(part) = self.session_part_mut(id, index) {
            part.restore = map;
        }
        let written = match result {
            Ok(written) => written,
            Err((written, error)) => {
                self.note_change(index, &by, crate::tuning::describe_all(&written));
                return Err(error);
            }
        };
        self.note_change(index, &by, crate::tuning::describe_all(&written));
        Ok(self.applied_report(index, written))
    }

    pub(super) fn session_part_mut(
        &mut self,
        id: SessionId,
        index: u32,
    ) -> Option<&mut SessionGpu> {
        self.sessions.get_mut(&id)?.gpus.get_mut(&index)
    }

    /// Refuses a session that does not exist or is another client's.
    pub(super) fn own_session(&self, client: &ClientInfo, id: SessionId) -> Result<(), TuneError> {
        match self.sessions.get(&id) {
            Some(session) if session.client.id == client.id => Ok(()),
            Some(_) => Err(TuneError::new(
                TuneErrorKind::NotAllowed,
                format!("Session {id} belongs to another client."),
            )),
            None => Err(TuneError::new(
                TuneErrorKind::NotFound,
                format!("There is no session {id} (it may have ended already)."),
            )),
        }
    }

    /// Files a reading of GPU `index` with the sessions on it.
    pub(super) fn record_in_sessions(&mut self, index: u32, reading: &Telemetry) {
        for id in self.sessions_on(index) {
            if self.tally_job(id, index, reading) {
                continue;
            }
            let Some(part) = self.session_part_mut(id, index) else {
                continue;
            };
            if part.during.len() >= MAX_SESSION_SAMPLES {
                let mut keep = false;
                part.during.retain(|_| {
                    keep = !keep;
                    keep
                });
            }
            part.during.push(reading.clone());
            // A session that began before the card's first reading counts its energy from the
            // first reading it sees (a second at most is not counted).
            if part.energy_at_start_mj.is_none() {
                part.energy_at_start_mj = reading.energy_total_mj;
            }
            if let Some(trial) = part.trial.as_mut() {
                trial.observe(reading);
            }
        }
    }
}

/// The top of the clock lock a box check holds on its cards, when it holds one.
fn clock_cap_mhz(request: &SessionRequest) -> Option<u32> {
    clock_cap_mhz_of(&request.changes)
}

fn clock_cap_mhz_of(changes: &[GpuChange]) -> Option<u32> {
    changes
        .iter()
        .flat_map(|change| &change.settings)
        .find_map(|setting| match setting {
            gputune_formats::card::Setting::LockGpuClocks { max_mhz, .. } => Some(*max_mhz),
            _ => None,
        })
}
