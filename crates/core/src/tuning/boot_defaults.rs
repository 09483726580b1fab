//! The daemon's boot defaults: per card, `boot-<uuid>.json` in its `defaults` folder (its
//! settings, an optional kept fan curve and an optional temperature hold), checked against the
//! card before it is stored and applied through the engine when the daemon starts. Like the
//! engine's journals and records (`state_folder.rs`) every file is read through `fsafe` (no
//! symbolic link, no FIFO, no huge file) and written atomically into a private folder; a
//! damaged one is left as it is with a notice. The file's format is
//! `gputune_formats::protocol::BootDefault`. The service answers the requests
//! (`service::routing`) and makes them from `--boot-profile` (`service::boot_profile`).

use std::path::{Path, PathBuf};

use crate::fsafe::{self, Links};
use crate::tuning::engine::{ClientInfo, Engine};
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::protocol::BootDefault;
use gputune_formats::temperature_hold::TemperatureHold;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{GpuChange, TuneError, TuneErrorKind};

/// A boot default is a handful of settings.
const MAX_BOOT_SETTINGS: usize = 64;
/// The longest profile name kept in a boot default, in characters (as a client's label).
const MAX_PROFILE_NAME_CHARS: usize = 200;
/// The largest boot-default file read: a real one is a few kilobytes.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// The daemon's folder of boot defaults.
#[derive(Debug, Clone)]
pub struct BootDefaultStore {
    dir: PathBuf,
}

impl BootDefaultStore {
    /// The boot defaults kept in `dir` (created, private, at the first one stored).
    pub fn new(dir: PathBuf) -> BootDefaultStore {
        BootDefaultStore { dir }
    }

    fn path(&self, uuid: &str) -> PathBuf {
        self.dir.join(format!(
            "boot-{}.json",
            crate::tuning::state_folder::file_safe(uuid)
        ))
    }

    /// Every stored boot default, and a notice for each file that could not be read.
    pub fn read_all(&self) -> (Vec<BootDefault>, Vec<Notice>) {
        let mut defaults = Vec::new();
        let mut notices = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return (defaults, notices);
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| name.starts_with("boot-") && name.ends_with(".json"))
            })
            .collect();
        paths.sort();
        for path in paths {
            match read_one(&path) {
                Ok(default) => defaults.push(default),
                Err(message) => notices.push(Notice::Warning(format!(
                    "A boot default could not be read: {message}; it was left as it is."
                ))),
            }
        }
        (defaults, notices)
    }

    /// Keeps `default` as the boot default of the card `gpu_uuid` (checked against the card
    /// first), or removes the card's boot default for `None`.
    pub fn store(
        &self,
        engine: &Engine,
        gpu_uuid: &str,
        default: Option<BootDefault>,
    ) -> Result<(), TuneError> {
        let index = engine.gpu_index(gpu_uuid)?;
        let uuid = engine.gpus()[index as usize].identity.uuid.clone();
        let path = self.path(&uuid);
        let Some(default) = default else {
            return match std::fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(TuneError::new(
                    TuneErrorKind::State,
                    format!("{} could not be removed: {error}", path.display()),
                )),
            };
        };
        if default.settings.len() > MAX_BOOT_SETTINGS {
            return Err(TuneError::new(
                TuneErrorKind::Refused,
                format!("A boot default holds at most {MAX_BOOT_SETTINGS} settings."),
            ));
        }
        engine.check_settings(index, &default.settings)?;
        if default.fan_curve.is_some() {
            engine.check_fan_curve(index)?;
        }
        if let Some(hold) = &default.temperature_hold {
            engine.check_temperature_hold(index, hold)?;
        }
        let default = BootDefault {
            gpu_uuid: uuid,
            profile_name: crate::text::printable(&default.profile_name)
                .chars()
                .take(MAX_PROFILE_NAME_CHARS)
                .collect(),
            settings: default.settings,
            fan_curve: default.fan_curve,
            temperature_hold: default.temperature_hold,
        };
        let text = default
            .to_file_bytes()
            .map_err(|error| TuneError::new(TuneErrorKind::State, error.to_string()))?;
        fsafe::ensure_private_folder(&self.dir, 0o700)
            .and_then(|()| fsafe::write_atomically(&path, &text, 0o600))
            .map_err(|error| TuneError::new(TuneErrorKind::State, error.to_string()))
    }

    /// Puts `curve` into (or, for `None`, takes the curve out of) the card's boot default,
    /// keeping its settings; a boot default left with nothing is removed.
    pub fn store_fan_curve(
        &self,
        engine: &Engine,
        gpu_uuid: &str,
        curve: Option<FanCurve>,
    ) -> Result<(), TuneError> {
        let clears = curve.is_none();
        self.change_part(engine, gpu_uuid, "fan curve", clears, |default| {
            default.fan_curve = curve;
        })
    }

    /// Puts `hold` into (or, for `None`, takes the hold out of) the card's boot default,
    /// keeping the rest; a boot default left with nothing is removed.
    pub fn store_temperature_hold(
        &self,
        engine: &Engine,
        gpu_uuid: &str,
        hold: Option<TemperatureHold>,
    ) -> Result<(), TuneError> {
        let clears = hold.is_none();
        self.change_part(engine, gpu_uuid, "temperature hold", clears, |default| {
            default.temperature_hold = hold;
        })
    }

    /// Changes one part of the card's boot default by `set`, keeping the rest: a card without
    /// one gets one named `name` (nothing, when the change only `clears`); one left holding
    /// nothing is removed.
    fn change_part(
        &self,
        engine: &Engine,
        gpu_uuid: &str,
        name: &str,
        clears: bool,
        set: impl FnOnce(&mut BootDefault),
    ) -> Result<(), TuneError> {
        let index = engine.gpu_index(gpu_uuid)?;
        let uuid = engine.gpus()[index as usize].identity.uuid.clone();
        let mut default = match self.stored(&uuid) {
            Some(stored) => stored,
            None if clears => return Ok(()),
            None => BootDefault {
                gpu_uuid: uuid.clone(),
                profile_name: name.to_string(),
                settings: Vec::new(),
                fan_curve: None,
                temperature_hold: None,
            },
        };
        set(&mut default);
        self.store(engine, &uuid, default.holds_something().then_some(default))
    }

    /// `default` with the card's stored temperature hold when it has none of its own (a
    /// profile made a boot default carries no hold).
    pub fn keeping_hold(
        &self,
        engine: &Engine,
        gpu_uuid: &str,
        default: BootDefault,
    ) -> Result<BootDefault, TuneError> {
        let index = engine.gpu_index(gpu_uuid)?;
        let uuid = &engine.gpus()[index as usize].identity.uuid;
        let stored_hold = self.stored(uuid).and_then(|stored| stored.temperature_hold);
        Ok(BootDefault {
            temperature_hold: default.temperature_hold.or(stored_hold),
            ..default
        })
    }

    /// Makes `default` the profile part of the card's boot default (its settings and fan
    /// curve; `None` clears them), keeping the card's stored temperature hold: a hold is stored
    /// and cleared by `hold-temp --boot-default` alone (`profile default`, `--boot-profile`).
    pub fn store_profile_part(
        &self,
        engine: &Engine,
        gpu_uuid: &str,
        default: Option<BootDefault>,
    ) -> Result<(), TuneError> {
        let index = engine.gpu_index(gpu_uuid)?;
        let uuid = engine.gpus()[index as usize].identity.uuid.clone();
        let default = match default {
            Some(default) => Some(self.keeping_hold(engine, &uuid, default)?),
            None => self
                .stored(&uuid)
                .and_then(|stored| stored.temperature_hold)
                .map(|hold| BootDefault {
                    gpu_uuid: uuid.clone(),
                    profile_name: "temperature hold".to_string(),
                    settings: Vec::new(),
                    fan_curve: None,
                    temperature_hold: Some(hold),
                }),
        };
        self.store(engine, &uuid, default)
    }

    /// The card's stored boot default, if it has one that reads.
    fn stored(&self, uuid: &str) -> Option<BootDefault> {
        self.read_all()
            .0
            .into_iter()
            .find(|default| default.gpu_uuid == uuid)
    }

    /// Applies every card's stored boot default (the daemon does this when it starts): its
    /// settings, then its fan curve kept, as `profile apply` does.
    pub fn apply_all(&self, engine: &mut Engine) -> Vec<Notice> {
        let (defaults, mut notices) = self.read_all();
        let daemon = ClientInfo {
            id: 0,
            pid: Some(std::process::id()),
            uid: None,
            user: None,
            label: "the gputune daemon (boot default)".to_string(),
            may_write: true,
        };
        for default in defaults {
            let name = crate::text::printable(&default.profile_name);
            if !default.settings.is_empty() {
                let change = GpuChange {
                    gpu_uuid: default.gpu_uuid.clone(),
                    settings: default.settings.clone(),
                };
                notices.push(match engine.apply_changes(&daemon, &[change]) {
                    Ok(applied) => Notice::Info(format!(
                        "Applied the boot default \"{name}\" to GPU {} ({}).",
                        applied.first().map_or(0, |gpu| gpu.gpu_index),
                        crate::tuning::describe_all(&default.settings)
                    )),
                    Err(error) => Notice::Error(format!(
                        "The boot default \"{name}\" could not be applied: {error}"
                    )),
                });
            }
            if let Some(curve) = default.fan_curve.clone() {
                notices.push(
                    match engine
                        .keep_fan_curve(&daemon, &default.gpu_uuid, Some(curve))
                        .and_then(|()| engine.gpu_index(&default.gpu_uuid))
                    {
                        Ok(index) => Notice::Info(format!(
                            "The daemon keeps the fan curve of the boot default \"{name}\" on GPU {index}."
                        )),
                        Err(error) => Notice::Error(format!(
                            "The fan curve of the boot default \"{name}\" could not be kept: {error}"
                        )),
                    },
                );
            }
            if let Some(hold) = default.temperature_hold {
                notices.push(
                    match engine
                        .keep_temperature_hold(&daemon, &default.gpu_uuid, Some(hold))
                        .and_then(|()| engine.gpu_index(&default.gpu_uuid))
                    {
                        Ok(index) => Notice::Info(format!(
                            "The daemon holds GPU {index} {} (boot default \"{name}\").",
                            hold.describe()
                        )),
                        Err(error) => Notice::Error(format!(
                            "The temperature hold of the boot default \"{name}\" could not be kept: {error}"
                        )),
                    },
                );
            }
        }
        notices
    }
}

/// One boot-default file, or one sentence saying why not.
fn read_one(path: &Path) -> Result<BootDefault, String> {
    let bytes = fsafe::read_limited(path, MAX_FILE_BYTES, Links::Refuse)
        .map_err(|error| error.to_string())?;
    BootDefault::from_file_bytes(&bytes)
        .map_err(|error| format!("{} is damaged ({error})", path.display()))
}
