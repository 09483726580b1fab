//! What the Profiles tab's actions do: file dialogs (rfd, on the UI thread) and the profile
//! store (`profiles::store` owns the files). Applying becomes tuning commands for the engine,
//! like every other change. The app calls these with what they need and takes the outcome.

use crate::ui::model::GpuModel;
use crate::ui::profiles::ProfileAction;
use gputune_core::folders::Folders;
use gputune_core::link::TuneCommand;
use gputune_core::profiles::profile::ProfileOnCard;
use gputune_core::profiles::store::{LoadProblem, ProfileStore, StoredProfile};
use gputune_formats::tuning::Notice;

/// What running an action came to.
pub struct ProfileOutcome {
    /// What to tell the user, if anything.
    pub message: Option<Notice>,
    /// Changes for the engine.
    pub commands: Vec<TuneCommand>,
    /// The store's profiles and bad files, read again.
    pub profiles: Vec<StoredProfile>,
    pub problems: Vec<LoadProblem>,
}

/// Runs one Profiles-tab action on `gpu` (the Tune and Profiles tabs' GPU); a trial lasts
/// `trial_duration_s`; the profiles are in `folders`' config folder.
pub fn run_profile_action(
    folders: &Folders,
    action: ProfileAction,
    gpu: Option<&GpuModel>,
    gpus: &[GpuModel],
    trial_duration_s: u64,
) -> ProfileOutcome {
    let store = match ProfileStore::open(folders) {
        Ok(store) => store,
        Err(error) => {
            return ProfileOutcome {
                message: Some(Notice::Error(error.to_string())),
                commands: Vec::new(),
                profiles: Vec::new(),
                problems: Vec::new(),
            };
        }
    };
    let mut commands = Vec::new();
    let outcome: Result<String, String> = match action {
        ProfileAction::Refresh => Ok(String::new()),
        ProfileAction::Save(profile) => store
            .save(&profile)
            .map(|path| format!("Saved {} to {}.", profile.name, path.display()))
            .map_err(|error| error.to_string()),
        ProfileAction::Apply { name, try_first } => match gpu {
            Some(gpu) => {
                let to = ApplyTo {
                    try_first,
                    trial_duration_s,
                };
                apply_profile(&store, &name, gpu, gpus, &to, &mut commands)
            }
            None => Err("No GPU to apply the profile to.".to_string()),
        },
        ProfileAction::Rename { old, new } => store
            .rename(&old, &new)
            .map(|()| format!("Renamed {old} to {new}."))
            .map_err(|error| error.to_string()),
        ProfileAction::Delete { name } => store
            .delete(&name)
            .map(|()| format!("Deleted {name}."))
            .map_err(|error| error.to_string()),
        ProfileAction::SetDefault { name } => store
            .set_default(&name)
            .map(|_released| {
                format!(
                    "{name} is now this card's default profile; the gputune daemon applies it at boot once you run `gputune profile default {name}` where it runs."
                )
            })
            .map_err(|error| error.to_string()),
        ProfileAction::Import => match rfd::FileDialog::new()
            .add_filter("gputune profile", &["toml"])
            .pick_file()
        {
            None => Ok(String::new()),
            Some(path) => store
                .import(&path)
                .map(|stored| format!("Imported {}.", stored.profile.name))
                .map_err(|error| error.to_string()),
        },
        ProfileAction::Export { name } => {
            match rfd::FileDialog::new()
                .set_file_name(format!("{name}.toml"))
                .save_file()
            {
                None => Ok(String::new()),
                Some(path) => store
                    .export(&name, &path)
                    .map(|()| format!("Exported {name} to {}.", path.display()))
                    .map_err(|error| error.to_string()),
            }
        }
    };
    let (profiles, problems) = store.list();
    ProfileOutcome {
        message: match outcome {
            Ok(message) if message.is_empty() => None,
            Ok(message) => Some(Notice::Info(message)),
            Err(message) => Some(Notice::Error(message)),
        },
        commands,
        profiles,
        problems,
    }
}

/// How a profile is applied: for good, or tried first for a while.
struct ApplyTo {
    try_first: bool,
    trial_duration_s: u64,
}

/// Applies (or tries) a stored profile on `gpu`: the engine gets the converted settings and
/// the fan curve to follow. A box profile (`box_cards`) goes to every card of its box here
/// (`gpus`) as one request: applied all or nothing, or tried as one session.
fn apply_profile(
    store: &ProfileStore,
    name: &str,
    gpu: &GpuModel,
    gpus: &[GpuModel],
    to: &ApplyTo,
    commands: &mut Vec<TuneCommand>,
) -> Result<String, String> {
    let (try_first, trial_duration_s) = (to.try_first, to.trial_duration_s);
    let stored = store.load(name).map_err(|error| error.to_string())?;
    let box_gpus: Vec<&GpuModel> = gpus
        .iter()
        .filter(|other| stored.profile.box_card(&other.info.identity.uuid).is_some())
        .collect();
    if box_gpus.len() > 1 {
        return Ok(apply_to_box(&stored.profile, &box_gpus, to, commands));
    }
    let application = stored
        .profile
        .for_card(&gpu.info.identity, &gpu.info.constraints);
    let gpu_index = gpu.info.identity.index;
    if !application.settings.is_empty() {
        commands.push(if try_first {
            TuneCommand::StartTrial {
                gpu_index,
                settings: application.settings.clone(),
                duration_s: trial_duration_s,
            }
        } else {
            TuneCommand::Apply {
                gpu_index,
                settings: application.settings.clone(),
            }
        });
    }
    if let Some(curve) = application.fan_curve {
        commands.push(TuneCommand::SetFanCurve {
            gpu_index,
            curve: Some(curve),
        });
    }
    let verb = if try_first { "Trying" } else { "Applying" };
    let mut message = format!("{verb} {name} on GPU {gpu_index}.");
    for notice in application.notices {
        message.push(' ');
        message.push_str(notice.text());
    }
    Ok(message)
}

/// A box profile on each of its cards at once.
fn apply_to_box(
    profile: &gputune_formats::profile::Profile,
    box_gpus: &[&GpuModel],
    to: &ApplyTo,
    commands: &mut Vec<TuneCommand>,
) -> String {
    let mut changes = Vec::new();
    let mut notices = Vec::new();
    for gpu in box_gpus {
        let application = profile.for_card(&gpu.info.identity, &gpu.info.constraints);
        let gpu_index = gpu.info.identity.index;
        if !application.settings.is_empty() {
            changes.push((gpu_index, application.settings));
        }
        if let Some(curve) = application.fan_curve {
            commands.push(TuneCommand::SetFanCurve {
                gpu_index,
                curve: Some(curve),
            });
        }
        notices.extend(
            application
                .notices
                .iter()
                .map(|notice| format!("GPU {gpu_index}: {}", notice.text())),
        );
    }
    if !changes.is_empty() {
        commands.insert(
            0,
            if to.try_first {
                TuneCommand::StartTrialAll {
                    changes,
                    duration_s: to.trial_duration_s,
                }
            } else {
                TuneCommand::ApplyAll { changes }
            },
        );
    }
    let verb = if to.try_first { "Trying" } else { "Applying" };
    let indices: Vec<String> = box_gpus
        .iter()
        .map(|gpu| gpu.info.identity.index.to_string())
        .collect();
    let mut message = format!(
        "{verb} {} on its box, GPUs {}, as one.",
        profile.name,
        indices.join(", ")
    );
    for notice in notices {
        message.push(' ');
        message.push_str(&notice);
    }
    message
}

/// The commands that apply each card's default profile (when the window opens), and what to
/// say about it.
pub fn default_profile_commands(
    folders: &Folders,
    gpus: &[GpuModel],
) -> (Vec<TuneCommand>, Vec<String>) {
    let mut commands = Vec::new();
    let mut said = Vec::new();
    let Ok(store) = ProfileStore::open(folders) else {
        return (commands, said);
    };
    for gpu in gpus {
        let Some(stored) = store.default_for(&gpu.info.identity.uuid) else {
            continue;
        };
        let application = stored
            .profile
            .for_card(&gpu.info.identity, &gpu.info.constraints);
        let gpu_index = gpu.info.identity.index;
        if !application.settings.is_empty() {
            commands.push(TuneCommand::Apply {
                gpu_index,
                settings: application.settings,
            });
        }
        if let Some(curve) = application.fan_curve {
            commands.push(TuneCommand::SetFanCurve {
                gpu_index,
                curve: Some(curve),
            });
        }
        said.push(format!(
            "Applied the default profile {} to GPU {gpu_index}.",
            stored.profile.name
        ));
    }
    (commands, said)
}

/// Saves the recommendation of the last sweep on `gpu` as the profile `name` (over several
/// cards, a profile for all of them: `gpus` are the machine's).
pub fn save_sweep_profile(
    folders: &Folders,
    gpu: Option<&GpuModel>,
    gpus: &[GpuModel],
    name: &str,
) -> Result<String, String> {
    let gpu = gpu.ok_or("No GPU.")?;
    let outcome = gpu
        .sweep
        .as_ref()
        .and_then(|sweep| sweep.view.outcome.as_ref())
        .ok_or("No sweep has ended on this GPU.")?;
    // The swept cards, the first (this one) first.
    let swept: Vec<gputune_formats::tuning::GpuInfo> = std::iter::once(gpu)
        .chain(gpus.iter().filter(|other| {
            other.info.identity.index != gpu.info.identity.index
                && outcome
                    .cards
                    .iter()
                    .any(|card| card.gpu_uuid == other.info.identity.uuid)
        }))
        .map(|model| model.info.clone())
        .collect();
    let profile = gputune_core::sweep::profile::recommended_box_profile(outcome, name, &swept)?;
    let store = ProfileStore::open(folders).map_err(|error| error.to_string())?;
    let path = store.save(&profile).map_err(|error| error.to_string())?;
    Ok(format!(
        "Saved the profile \"{}\" ({}): apply it from the Profiles tab, or run your job with gputune run --profile \"{}\".",
        profile.name,
        path.display(),
        profile.name
    ))
}

/// Saves the confirmed result of the last undervolt scan on `gpu` as the profile `name`, with
/// its check; what to say in the panel.
pub fn save_scan_profile(
    folders: &Folders,
    gpu: Option<&GpuModel>,
    name: &str,
) -> Result<String, String> {
    let gpu = gpu.ok_or("No GPU.")?;
    let outcome = gpu
        .stability
        .as_ref()
        .and_then(|view| view.scan_outcome.as_ref())
        .ok_or("No undervolt scan has ended on this GPU.")?;
    gputune_core::profiles::profile::check_name(name)?;
    let store = ProfileStore::open(folders).map_err(|error| error.to_string())?;
    // Never over an existing profile: the panel has no way to say "replace".
    let (profile, path) =
        gputune_core::stability::scan::save_scan_profile(outcome, &store, name, &gpu.info, false)
            .map_err(|error| error.to_string())?
            .ok_or("The scan confirmed no offset, so there is nothing to save.")?;
    Ok(format!(
        "Saved the profile \"{}\" ({}; {}) in {}.",
        profile.name,
        profile.summary(),
        profile.check_text(),
        path.display()
    ))
}
