//! The answers to clients' requests: the engine's (apply, sessions, trials, fan curves),
//! the service's own (`hello` and its welcome, a snapshot, a subscription) and the daemon's
//! boot defaults (kept by `tuning::boot_defaults`). `history` and job requests are taken before
//! they get here (`mod.rs`: the recorder, `job_records`).

use super::{Router, error};
use crate::service::INTERVAL_RANGE_MS;
use crate::tuning::engine::{ClientInfo, Engine};
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::protocol::{
    BootDefault, PROTOCOL_VERSION, Request, Response, Snapshot, Welcome,
};
use gputune_formats::temperature_hold::TemperatureHold;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{ClientId, TuneError, TuneErrorKind};

/// The longest client label kept, in characters.
const MAX_LABEL_CHARS: usize = 200;
const NO_DAEMON_FOR_BOOT_DEFAULTS: &str = "Boot defaults are kept and applied by the gputune daemon, which is not running: install it with `sudo gputune daemon install`.";

impl Router {
    pub(super) fn answer(
        &mut self,
        engine: &mut Engine,
        client: ClientId,
        request: Request,
    ) -> Response {
        let Some(info) = self.clients.get(&client).map(|slot| slot.info.clone()) else {
            return error(TuneErrorKind::NotFound, "This connection is closed.");
        };
        if request.writes() && !info.may_write {
            let group = self.write_group.as_deref().unwrap_or("gputune");
            return error(
                TuneErrorKind::NotAllowed,
                format!(
                    "Only root and members of the {group} group may change GPU settings through the daemon: `sudo usermod -aG {group} $USER`, then log in again."
                ),
            );
        }
        let answer = |result: Result<Response, TuneError>| {
            result.unwrap_or_else(|error| Response::Error { error })
        };
        match request {
            Request::Hello {
                protocol,
                client: label,
            } => self.hello(engine, client, &info, protocol, &label),
            Request::Snapshot => Response::Snapshot(Box::new(Snapshot {
                gpus: engine.gpus(),
                tunings: engine.tunings(),
                latest: self.latest.clone(),
            })),
            Request::Subscribe { interval_ms } => {
                let interval_ms = interval_ms.clamp(INTERVAL_RANGE_MS.0, INTERVAL_RANGE_MS.1);
                if let Some(slot) = self.clients.get_mut(&client) {
                    slot.subscribed_ms = Some(interval_ms);
                }
                self.update_interval();
                Response::Done
            }
            Request::Apply { changes } => answer(
                engine
                    .apply_changes(&info, &changes)
                    .map(|gpus| Response::Applied { gpus }),
            ),
            Request::StartSession { session } => answer(
                engine
                    .start_session(&info, &session)
                    .map(Response::SessionStarted),
            ),
            Request::SessionApply { session, changes } => answer(
                engine
                    .session_apply(&info, session, &changes)
                    .map(|gpus| Response::Applied { gpus }),
            ),
            Request::SessionJob { session, pid } => answer(
                engine
                    .set_session_job(&info, session, pid)
                    .map(|()| Response::Done),
            ),
            Request::EndSession { session, keep } => answer(
                engine
                    .end_session(&info, session, keep)
                    .map(|report| Response::SessionEnded { report }),
            ),
            Request::StartTrial { trial } => answer(engine.start_trial(&info, &trial).map(
                |status| Response::Trial {
                    status: Box::new(status),
                },
            )),
            Request::StartGroupTrial { trial } => answer(
                engine
                    .start_group_trial(&info, &trial)
                    .map(|statuses| Response::Trials { statuses }),
            ),
            Request::FinishTrial { gpu_uuid, keep } => answer(
                engine
                    .finish_trial(&info, &gpu_uuid, keep)
                    .map(|status| Response::Trial {
                        status: Box::new(status),
                    }),
            ),
            Request::FollowFanCurve { gpu_uuid, curve } => answer(
                engine
                    .set_fan_curve(&info, &gpu_uuid, curve)
                    .map(|()| Response::Done),
            ),
            Request::SetFanCurve {
                gpu_uuid,
                curve,
                boot_default,
            } => answer(self.set_fan_curve(engine, &info, &gpu_uuid, curve, boot_default)),
            Request::SetTemperatureHold {
                gpu_uuid,
                hold,
                boot_default,
            } => answer(self.set_temperature_hold(engine, &info, &gpu_uuid, hold, boot_default)),
            Request::SetBootDefault { gpu_uuid, default } => {
                answer(self.set_boot_default(engine, &gpu_uuid, default))
            }
            // Answered by `job_records` before they get here.
            Request::Jobs { .. } | Request::Job { .. } => error(
                TuneErrorKind::Refused,
                "A job request is answered from the daemon's job records.",
            ),
            // Answered by `history` before it gets here.
            Request::History { .. } => error(
                TuneErrorKind::Refused,
                "A history request is answered by the daemon's recorder.",
            ),
            Request::BootDefaults => Response::BootDefaults {
                defaults: self.stored_boot_defaults(),
            },
        }
    }

    /// Keeps (or clears) a card's fan curve now and, with `boot_default`, in its boot
    /// default: the boot default is written only once the daemon keeps the curve (or, for a
    /// clear, whatever the curve now), so a curve the card refuses is not stored for the next
    /// start.
    fn set_fan_curve(
        &self,
        engine: &mut Engine,
        info: &ClientInfo,
        gpu_uuid: &str,
        curve: Option<FanCurve>,
        boot_default: bool,
    ) -> Result<Response, TuneError> {
        if boot_default && self.boot_defaults.is_none() {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                NO_DAEMON_FOR_BOOT_DEFAULTS,
            ));
        }
        let kept = engine.keep_fan_curve(info, gpu_uuid, curve.clone());
        match kept {
            Ok(()) => {}
            // Clearing the boot default's curve needs no curve kept now.
            Err(error)
                if curve.is_none() && boot_default && error.kind == TuneErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        match &self.boot_defaults {
            Some(store) if boot_default => store.store_fan_curve(engine, gpu_uuid, curve)?,
            _ => {}
        }
        Ok(Response::Done)
    }

    /// Keeps (or clears) a card's temperature hold now and, with `boot_default`, in its boot
    /// default, as `set_fan_curve` does a curve.
    fn set_temperature_hold(
        &self,
        engine: &mut Engine,
        info: &ClientInfo,
        gpu_uuid: &str,
        hold: Option<TemperatureHold>,
        boot_default: bool,
    ) -> Result<Response, TuneError> {
        if boot_default && self.boot_defaults.is_none() {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                NO_DAEMON_FOR_BOOT_DEFAULTS,
            ));
        }
        match engine.keep_temperature_hold(info, gpu_uuid, hold) {
            Ok(()) => {}
            Err(error)
                if hold.is_none() && boot_default && error.kind == TuneErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let Some(store) = self.boot_defaults.as_ref().filter(|_| boot_default) else {
            return Ok(Response::Done);
        };
        let index = engine.gpu_index(gpu_uuid)?;
        // The hold is already kept (or cleared) now: a store that fails says so, not a bare
        // error that would read as if nothing had changed.
        store
            .store_temperature_hold(engine, gpu_uuid, hold)
            .map(|()| Response::Done)
            .map_err(|error| {
                let message = match hold {
                    Some(hold) => format!(
                        "The daemon holds GPU {index} {} now, but could not store it as the card's boot default ({}), so it ends when the daemon stops: fix that and set it again with --boot-default.",
                        hold.describe(),
                        error.message
                    ),
                    None => format!(
                        "GPU {index}'s temperature hold is cleared now, but it could not be taken out of the card's boot default ({}), so it comes back at the daemon's next start: fix that and clear it again with --boot-default.",
                        error.message
                    ),
                };
                TuneError::new(error.kind, message)
            })
    }

    fn set_boot_default(
        &self,
        engine: &Engine,
        gpu_uuid: &str,
        default: Option<BootDefault>,
    ) -> Result<Response, TuneError> {
        let Some(store) = &self.boot_defaults else {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                NO_DAEMON_FOR_BOOT_DEFAULTS,
            ));
        };
        // A profile carries no temperature hold: the card's stored one stays.
        store.store_profile_part(engine, gpu_uuid, default)?;
        Ok(Response::Done)
    }

    /// `hello`: refused across protocol versions; the client's label kept (printable, at
    /// most `MAX_LABEL_CHARS`), and its welcome.
    fn hello(
        &mut self,
        engine: &Engine,
        client: ClientId,
        info: &ClientInfo,
        protocol: u32,
        label: &str,
    ) -> Response {
        if protocol != PROTOCOL_VERSION {
            return error(
                TuneErrorKind::Refused,
                format!(
                    "This gputune speaks protocol {protocol} and the daemon protocol {PROTOCOL_VERSION} (gputune {}): use the same version for both, e.g. restart the daemon after an update (`sudo systemctl restart gputuned`).",
                    self.welcome.version
                ),
            );
        }
        if let Some(slot) = self.clients.get_mut(&client) {
            let label: String = crate::text::printable(label.trim())
                .chars()
                .take(MAX_LABEL_CHARS)
                .collect();
            if !label.is_empty() {
                slot.info.label = label;
            }
        }
        Response::Welcome(Box::new(self.welcome_for(info, engine)))
    }

    /// The welcome for a client. The news of the service's start (a boot default applied,
    /// settings restored) is told once to each user, by their first client; their later
    /// clients hear only what still stands (a warning, an error). The changes stay in the
    /// history (`gputune history`, the window's graphs).
    fn welcome_for(&mut self, info: &ClientInfo, engine: &Engine) -> Welcome {
        // The daemon's own clients (its metrics) tell no user.
        let own = info.pid == Some(std::process::id()) && self.welcome.daemon;
        let first = !own && self.told_start_news.insert(info.uid);
        Welcome {
            gpus: engine.gpus(),
            notices: self
                .welcome
                .notices
                .iter()
                .filter(|notice| first || !matches!(notice, Notice::Info(_)))
                .cloned()
                .collect(),
            ..self.welcome.clone()
        }
    }

    /// Every card's stored boot default (none without the daemon).
    fn stored_boot_defaults(&self) -> Vec<BootDefault> {
        self.boot_defaults
            .as_ref()
            .map_or_else(Vec::new, |store| store.read_all().0)
    }
}
