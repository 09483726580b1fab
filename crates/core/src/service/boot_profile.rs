//! `gputune daemon --boot-profile FILE`: one profile made every card's boot default as the
//! daemon starts (a cluster node's profile: on Kubernetes, the ConfigMap file its node's label
//! names). Each card gets what `Profile::for_card` makes of it, as `gputune profile default`
//! hands the daemon one card's, stored by `tuning::boot_defaults`; the boot defaults are then
//! applied as they always are.

use std::path::{Path, PathBuf};

use crate::profiles::profile::ProfileOnCard;
use crate::tuning::boot_defaults::BootDefaultStore;
use crate::tuning::engine::Engine;
use gputune_formats::profile::Profile;
use gputune_formats::protocol::BootDefault;
use gputune_formats::tuning::Notice;

/// The node's profile, read from `--boot-profile FILE` before any card is opened.
#[derive(Debug, Clone)]
pub enum BootProfile {
    /// Every card's boot default becomes this profile's settings for it.
    Profile {
        profile: Box<Profile>,
        file: PathBuf,
    },
    /// An empty FILE: the node has no profile, and no card keeps a profile as its boot default
    /// (one an earlier profile left would otherwise come back at every start); a stored
    /// temperature hold stays.
    None { file: PathBuf },
}

impl BootProfile {
    /// Reads FILE: a profile (as `gputune profile export` writes it), or an empty file for
    /// none. Anything else is one sentence naming the file.
    pub fn read(file: &Path) -> anyhow::Result<BootProfile> {
        let bytes = crate::fsafe::read_limited(file, 64 * 1024, crate::fsafe::Links::Follow)
            .map_err(|error| {
                anyhow::anyhow!(
                    "--boot-profile {}: {error}; name a profile file (or an empty file for none).",
                    crate::text::path(file)
                )
            })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(BootProfile::None {
                file: file.to_path_buf(),
            });
        }
        let profile = crate::profiles::toml_text::parse_profile(&bytes).map_err(|problem| {
            anyhow::anyhow!("--boot-profile: {} No GPU was changed.", problem.at(file))
        })?;
        Ok(BootProfile::Profile {
            profile: Box::new(profile),
            file: file.to_path_buf(),
        })
    }
}

/// Makes `boot` every card's boot default in `store` (or clears them all for none), and says
/// what it did and what `Profile::for_card` changed for each card.
pub(crate) fn make_boot_defaults(
    engine: &Engine,
    store: &BootDefaultStore,
    boot: &BootProfile,
) -> Vec<Notice> {
    let mut notices = Vec::new();
    for gpu in engine.gpus() {
        let index = gpu.identity.index;
        let default = match boot {
            BootProfile::None { .. } => None,
            BootProfile::Profile { profile, .. } => {
                let application = profile.for_card(&gpu.identity, &gpu.constraints);
                for notice in application.notices {
                    notices.push(match notice {
                        Notice::Info(text) => Notice::Info(format!("GPU {index}: {text}")),
                        Notice::Warning(text) => Notice::Warning(format!("GPU {index}: {text}")),
                        Notice::Error(text) => Notice::Error(format!("GPU {index}: {text}")),
                    });
                }
                (!application.settings.is_empty() || application.fan_curve.is_some()).then(|| {
                    BootDefault {
                        gpu_uuid: gpu.identity.uuid.clone(),
                        profile_name: profile.name.clone(),
                        settings: application.settings,
                        fan_curve: application.fan_curve,
                        temperature_hold: None,
                    }
                })
            }
        };
        // The card's stored temperature hold stays, as with `profile default`.
        if let Err(error) = store.store_profile_part(engine, &gpu.identity.uuid, default) {
            notices.push(Notice::Error(format!(
                "GPU {index}'s boot default could not be set from --boot-profile: {error}"
            )));
        }
    }
    notices.push(Notice::Info(match boot {
        BootProfile::Profile { profile, file } => format!(
            "--boot-profile {}: \"{}\" is every GPU's boot default.",
            crate::text::path(file),
            crate::text::printable(&profile.name)
        ),
        BootProfile::None { file } => format!(
            "--boot-profile {} is empty: no GPU keeps a profile as its boot default (a card an earlier profile set keeps its settings until the machine restarts; a temperature hold stored with `hold-temp set --boot-default` stays).",
            crate::text::path(file)
        ),
    }));
    notices
}
