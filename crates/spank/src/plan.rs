//! What the daemon is asked to hold on each of a job's cards: the profile turned into each
//! card's settings by `Profile::for_card` (the one rule every front end uses: the power limit
//! as a share of each card's default, each card's own checked clock offset or none), the
//! power limit asked for on top, every power limit inside the site's floor and ceiling. A
//! card with nothing to set is still named, so the job's energy is recorded and its metrics
//! labelled.

use std::path::Path;

use gputune_core::profiles::profile::ProfileOnCard;
use gputune_core::profiles::store::ProfileStore;
use gputune_core::tuning::request::TuneRequest;
use gputune_formats::card::Setting;
use gputune_formats::tuning::{
    GpuChange, GpuFanCurve, GpuInfo, JobInfo, SessionPurpose, SessionRequest,
};
use gputune_formats::units::{power_limit_with_share, watts};

use crate::ask::Wanted;
use crate::policy::Policy;

/// The request for the job's session and what to tell the job about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub request: SessionRequest,
    /// One line per card ("GPU 1 (/dev/nvidia0): power limit 360 W"), then every notice the
    /// profile gave (a card never checked with its undervolt, a clamped value).
    pub lines: Vec<String>,
}

/// The plan for `cards` (each with its device number), or the one sentence that refuses it.
pub fn plan(
    policy: &Policy,
    wanted: &Wanted,
    job: JobInfo,
    cards: &[&GpuInfo],
) -> Result<Plan, String> {
    let profile = match &wanted.profile {
        Some(name) => Some(load_profile(&policy.profiles_dir, name)?),
        None => None,
    };
    let mut changes = Vec::new();
    let mut fan_curves = Vec::new();
    let mut lines = Vec::new();
    let mut notices = Vec::new();
    for card in cards {
        let mut settings = Vec::new();
        if let Some(profile) = &profile {
            let application = profile.for_card(&card.identity, &card.constraints);
            settings = application.settings;
            for notice in application.notices {
                let text = format!("GPU {}: {}", card.identity.index, notice.text());
                if !notices.contains(&text) {
                    notices.push(text);
                }
            }
            if let Some(curve) = application.fan_curve {
                fan_curves.push(GpuFanCurve {
                    gpu_uuid: card.identity.uuid.clone(),
                    curve,
                });
            }
        }
        if let Some(power) = wanted.power_limit {
            let power_limit_mw = TuneRequest::power_limit_mw(power, &card.constraints)
                .map_err(|error| format!("gputune: GPU {}: {error}", card.identity.index))?;
            settings.retain(|setting| !matches!(setting, Setting::PowerLimit { .. }));
            settings.insert(0, Setting::PowerLimit { power_limit_mw });
        }
        check_bounds(policy, card, &settings)?;
        lines.push(card_line(
            card,
            &settings,
            fan_curves.iter().any(|c| c.gpu_uuid == card.identity.uuid),
        ));
        changes.push(GpuChange {
            gpu_uuid: card.identity.uuid.clone(),
            settings,
        });
    }
    lines.extend(notices);
    Ok(Plan {
        request: SessionRequest {
            purpose: SessionPurpose::Job,
            changes,
            fan_curves,
            job_pid: None,
            job: Some(job),
        },
        lines,
    })
}

/// A site profile: from a folder only root may change (else a user could write the settings
/// every job gets), by name.
fn load_profile(folder: &Path, name: &str) -> Result<gputune_formats::profile::Profile, String> {
    // A link to the folder is followed (an admin may keep it elsewhere); the folder itself is
    // checked.
    let real = std::fs::canonicalize(folder).map_err(|error| {
        format!(
            "gputune: the site's profiles folder {} cannot be read ({error}): ask the cluster's admin.",
            folder.display()
        )
    })?;
    match gputune_core::fsafe::check_private_folder(&real) {
        Ok(()) => {}
        Err(gputune_core::fsafe::FileError::Read { detail, .. }) => {
            return Err(format!(
                "gputune: the site's profiles folder {} cannot be read ({detail}): ask the cluster's admin.",
                folder.display()
            ));
        }
        // The plugin runs as root: "this user's" is root's.
        Err(error) => {
            return Err(format!(
                "gputune: the site's profiles folder {} must be a folder of root's that only root may change ({error}); no profile is read from it.",
                folder.display()
            ));
        }
    }
    ProfileStore::at(folder.to_path_buf())
        .load(name)
        .map(|stored| stored.profile)
        .map_err(|error| format!("gputune: profile \"{name}\": {error}"))
}

fn check_bounds(policy: &Policy, card: &GpuInfo, settings: &[Setting]) -> Result<(), String> {
    let Some(power_limit_mw) = settings.iter().find_map(|setting| match setting {
        Setting::PowerLimit { power_limit_mw } => Some(*power_limit_mw),
        _ => None,
    }) else {
        return Ok(());
    };
    let default_mw = card.constraints.power_limit_default_mw;
    let name = format!("GPU {} ({})", card.identity.index, card.identity.name);
    if let Some(floor) = policy.power_floor
        && let Some(floor_mw) = floor.on_card_mw(default_mw)
        && f64::from(power_limit_mw) < floor_mw.round()
    {
        return Err(format!(
            "gputune: a power limit of {} on {name} is below this cluster's floor of {} ({}): ask for more.",
            watts(power_limit_mw),
            floor.describe(),
            watts(floor_mw.round() as u32)
        ));
    }
    if let Some(ceiling) = policy.power_ceiling
        && let Some(ceiling_mw) = ceiling.on_card_mw(default_mw)
        && f64::from(power_limit_mw) > ceiling_mw.round()
    {
        return Err(format!(
            "gputune: a power limit of {} on {name} is above this cluster's ceiling of {} ({}): ask for less.",
            watts(power_limit_mw),
            ceiling.describe(),
            watts(ceiling_mw.round() as u32)
        ));
    }
    Ok(())
}

fn card_line(card: &GpuInfo, settings: &[Setting], curve: bool) -> String {
    let device = card
        .identity
        .minor_number
        .map_or_else(String::new, |minor| format!(" (/dev/nvidia{minor})"));
    let mut parts: Vec<String> = settings
        .iter()
        .map(|setting| match setting {
            Setting::PowerLimit { power_limit_mw } => format!(
                "power limit {}",
                power_limit_with_share(*power_limit_mw, card.constraints.power_limit_default_mw)
            ),
            other => other.describe(),
        })
        .collect();
    if curve {
        parts.push("fan curve".to_string());
    }
    if parts.is_empty() {
        parts.push("as it is (recorded only)".to_string());
    }
    format!("GPU {}{device}: {}", card.identity.index, parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_profiles_folder_others_may_change_is_not_read() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let folder = dir.path().join("profiles");
        std::fs::create_dir(&folder).unwrap_or_else(|error| panic!("{error}"));
        std::fs::write(
            folder.join("quiet.toml"),
            "schema_version = 1\nname = \"quiet\"\n\n[card]\nuuid = \"GPU-1\"\nname = \"x\"\npci_bus_id = \"\"\n",
        )
        .unwrap_or_else(|error| panic!("{error}"));
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777))
            .unwrap_or_else(|error| panic!("{error}"));
        let said = load_profile(&folder, "quiet").err().unwrap_or_default();
        assert!(said.contains("that only root may change"), "{said}");
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|error| panic!("{error}"));
        if nix::unistd::geteuid().is_root() {
            assert!(load_profile(&folder, "quiet").is_ok());
        }
        let said = load_profile(&dir.path().join("missing"), "quiet")
            .err()
            .unwrap_or_default();
        assert!(said.contains("cannot be read"), "{said}");
    }
}
