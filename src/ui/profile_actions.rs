//! What the Profiles tab's actions do: file dialogs (rfd, on the UI thread) and the profile
//! store (`profiles::store` owns the files); applying goes to the device thread as tuning
//! commands, through the same gate as everything else.

use crate::profiles::store::ProfileStore;
use crate::telemetry::sampler::{Sampler, SamplerCommand};
use crate::tuning::control::TuneCommand;
use crate::ui::app::AppState;
use crate::ui::profiles::ProfileAction;

/// Seconds a profile is tried for before it reverts (the Tune tab's setting).
fn trial_seconds(state: &AppState) -> u64 {
    state.tune.trial_duration_s
}

/// Runs one Profiles-tab action.
pub fn run_profile_action(state: &mut AppState, sampler: &Sampler, action: ProfileAction) {
    let store = match ProfileStore::open_default() {
        Ok(store) => store,
        Err(error) => {
            state.profiles.message = Some((error.to_string(), true));
            return;
        }
    };
    let outcome: Result<String, String> = match action {
        ProfileAction::Refresh => Ok(String::new()),
        ProfileAction::Save(profile) => store
            .save(&profile)
            .map(|path| format!("Saved {} to {}.", profile.name, path.display()))
            .map_err(|error| error.to_string()),
        ProfileAction::Apply { name, try_first } => {
            apply_profile(state, sampler, &store, &name, try_first)
        }
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
            .map(|()| format!("{name} is now this card's default profile."))
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
    state.profiles.profiles = profiles;
    state.profiles.problems = problems;
    match outcome {
        Ok(message) if message.is_empty() => {}
        Ok(message) => state.profiles.message = Some((message, false)),
        Err(message) => state.profiles.message = Some((message, true)),
    }
}

/// Applies (or tries) a stored profile on the Tune/Profiles tabs' GPU.
fn apply_profile(
    state: &AppState,
    sampler: &Sampler,
    store: &ProfileStore,
    name: &str,
    try_first: bool,
) -> Result<String, String> {
    let stored = store.load(name).map_err(|error| error.to_string())?;
    let gpu = state
        .model
        .gpus
        .get(state.tune_gpu)
        .ok_or("No GPU to apply the profile to.")?;
    let application = stored
        .profile
        .for_card(&gpu.info.identity, &gpu.info.constraints);
    let gpu_index = gpu.info.identity.index;
    if !application.settings.is_empty() {
        let command = if try_first {
            TuneCommand::StartTrial {
                gpu_index,
                settings: application.settings.clone(),
                duration_s: trial_seconds(state),
            }
        } else {
            TuneCommand::Apply {
                gpu_index,
                settings: application.settings.clone(),
            }
        };
        sampler.send(SamplerCommand::Tune(command));
    }
    if let Some(curve) = application.fan_curve {
        sampler.send(SamplerCommand::Tune(TuneCommand::SetFanCurve {
            gpu_index,
            curve: Some(curve),
        }));
    }
    let verb = if try_first { "Trying" } else { "Applying" };
    let mut message = format!("{verb} {name} on GPU {gpu_index}.");
    for notice in application.notices {
        message.push(' ');
        message.push_str(&notice);
    }
    Ok(message)
}

/// Applies each connected card's default profile, once, when the option is on.
pub fn apply_default_profiles(state: &mut AppState, sampler: &Sampler) {
    if !state.apply_default_profiles_on_start {
        return;
    }
    let Ok(store) = ProfileStore::open_default() else {
        return;
    };
    let mut said = Vec::new();
    for gpu in &state.model.gpus {
        let Some(stored) = store.default_for(&gpu.info.identity.uuid) else {
            continue;
        };
        let application = stored
            .profile
            .for_card(&gpu.info.identity, &gpu.info.constraints);
        let gpu_index = gpu.info.identity.index;
        if !application.settings.is_empty() {
            sampler.send(SamplerCommand::Tune(TuneCommand::Apply {
                gpu_index,
                settings: application.settings,
            }));
        }
        if let Some(curve) = application.fan_curve {
            sampler.send(SamplerCommand::Tune(TuneCommand::SetFanCurve {
                gpu_index,
                curve: Some(curve),
            }));
        }
        said.push(format!(
            "Applied the default profile {} to GPU {gpu_index}.",
            stored.profile.name
        ));
    }
    if !said.is_empty() {
        state.status = Some((said.join(" "), false));
    }
}
