//! `gputune profile ...`: list, show, save, apply, delete, export, import profiles and choose
//! each card's default (handed to the daemon, which applies it at boot).
//!
//! Applying goes through `Profile::for_card` (values converted and clamped for the card, with
//! notices) and then the tuning engine, which checks every setting with `device::gate` before
//! the first write, all or nothing. Profiles stay in the user's folder and travel as values.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::profiles::profile::ProfileOnCard;
mod boot_default;
mod listing;

use boot_default::hand_default_to_daemon;
use listing::report_problems;
pub use listing::{list, show};

use crate::cli::connect::{
    TuningOptions, choose_gpu, connect_for_changes, refusal, snapshot, unexpected,
};
use crate::profiles::store::{ProfileStore, StoreError, StoredProfile};
use crate::service::client::TuningClient;
use gputune_formats::profile::Profile;
use gputune_formats::protocol::{Request, Response};
use gputune_formats::tuning::GpuChange;

/// The longest `apply-defaults --retry-s`: an hour.
const LONGEST_RETRY_S: u64 = 3_600;
/// Time between tries while the driver does not answer.
const RETRY_INTERVAL: Duration = Duration::from_secs(2);

/// `gputune profile`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    pub command: ProfileCommand,
}

/// What `gputune profile` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ProfileCommand {
    /// List the saved profiles (files that cannot be read are reported on stderr).
    List {
        /// Print JSON: {"profiles": [...], "problems": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Show one profile's settings and file.
    Show { name: String },
    /// Save a card's current power limit and clock offsets as a profile.
    Save {
        name: String,
        /// The GPU to read: an index or a UUID. Needed when there are several GPUs.
        #[arg(long, value_name = "UUID|INDEX")]
        gpu: Option<String>,
        /// Free text kept with the profile.
        #[arg(long, value_name = "TEXT")]
        notes: Option<String>,
        /// Replace a profile of the same name.
        #[arg(long)]
        replace: bool,
    },
    /// Apply a profile to a card (its own card when present, else --gpu or the only GPU).
    Apply {
        name: String,
        /// The GPU to change: an index or a UUID.
        #[arg(long, value_name = "UUID|INDEX")]
        gpu: Option<String>,
    },
    /// Apply every card's default profile now (the daemon applies them at boot by itself).
    ApplyDefaults {
        /// Keep trying for this many seconds while the driver does not answer yet.
        #[arg(long, value_name = "N", default_value_t = 0)]
        retry_s: u64,
    },
    /// Delete a profile's file.
    Delete { name: String },
    /// Write a copy of a profile to FILE.
    Export { name: String, file: PathBuf },
    /// Add a profile file to the saved profiles.
    Import { file: PathBuf },
    /// Make a profile its card's default, applied at boot by the gputune daemon.
    Default { name: String },
}

/// Runs `gputune profile ...`.
pub fn run_command(args: &ProfileArgs, options: &TuningOptions) -> anyhow::Result<()> {
    let store = ProfileStore::open(&options.folders)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut messages = std::io::stderr();
    match &args.command {
        ProfileCommand::List { json } => list(&store, *json, &mut out, &mut messages),
        ProfileCommand::Show { name } => show(&store, name, &mut out),
        ProfileCommand::Save {
            name,
            gpu,
            notes,
            replace,
        } => {
            let mut client = connect_for_changes(options, &mut messages)?;
            save(
                &store,
                &mut client,
                name,
                gpu.as_deref(),
                notes.as_deref(),
                *replace,
                &mut out,
            )
        }
        ProfileCommand::Apply { name, gpu } => {
            let stored = store.load(name)?;
            let mut client = connect_for_changes(options, &mut messages)?;
            apply_profile(
                &mut client,
                &stored,
                gpu.as_deref(),
                &mut out,
                &mut messages,
            )
        }
        ProfileCommand::ApplyDefaults { retry_s } => {
            if *retry_s > LONGEST_RETRY_S {
                bail!("--retry-s {retry_s} is too long: give at most {LONGEST_RETRY_S} seconds.");
            }
            apply_defaults(&store, options, *retry_s, &mut out, &mut messages)
        }
        ProfileCommand::Delete { name } => {
            let stored = store.load(name)?;
            store.delete(&stored.profile.name)?;
            writeln!(
                out,
                "Deleted the profile \"{}\" ({}).",
                stored.profile.name,
                crate::text::path(&stored.path)
            )?;
            Ok(())
        }
        ProfileCommand::Export { name, file } => {
            let stored = store.load(name)?;
            store.export(&stored.profile.name, file)?;
            writeln!(
                out,
                "Exported the profile \"{}\" to {}.",
                stored.profile.name,
                crate::text::path(file)
            )?;
            Ok(())
        }
        ProfileCommand::Import { file } => {
            let stored = store.import(file)?;
            writeln!(
                out,
                "Imported the profile \"{}\" for {} ({}) as {}.",
                stored.profile.name,
                stored.profile.card.name,
                stored.profile.card.uuid,
                crate::text::path(&stored.path)
            )?;
            Ok(())
        }
        ProfileCommand::Default { name } => {
            let stored = store.load(name)?;
            let released = store.set_default(&stored.profile.name)?;
            if stored.profile.box_cards.is_empty() {
                writeln!(
                    out,
                    "\"{}\" is now the default profile of {} ({}).",
                    stored.profile.name, stored.profile.card.name, stored.profile.card.uuid
                )?;
            } else {
                writeln!(
                    out,
                    "\"{}\" is now the default profile of the {} cards it covers.",
                    stored.profile.name,
                    stored.profile.box_cards.len()
                )?;
            }
            hand_default_to_daemon(
                &store,
                &stored.profile,
                &released,
                options,
                &mut out,
                &mut messages,
            )
        }
    }
}

/// `profile save NAME`: what the card runs now, as the engine knows it, under a name.
pub fn save(
    store: &ProfileStore,
    client: &mut TuningClient,
    name: &str,
    gpu: Option<&str>,
    notes: Option<&str>,
    replace: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let kept = match store.load(name) {
        Ok(existing) if existing.profile.name == name => Some(existing),
        Err(error @ StoreError::Ambiguous { .. }) => return Err(error.into()),
        // Another name, none, or an unreadable file (which the store never overwrites).
        Ok(_) | Err(_) => None,
    };
    if let Some(existing) = &kept
        && !replace
    {
        bail!(
            "A profile named \"{name}\" already exists ({}); add --replace to overwrite it, or choose another name.",
            crate::text::path(&existing.path)
        );
    }
    let snapshot = snapshot(client)?;
    let index = choose_gpu(&snapshot.gpus, gpu, None)?;
    let info = &snapshot.gpus[index as usize];
    let Some(tuning) = snapshot.tunings.get(index as usize) else {
        bail!("The tuning engine did not say what GPU {index} runs.");
    };
    let mut profile = Profile::from_in_force(
        name,
        &info.identity,
        &info.constraints,
        &tuning.in_force,
        tuning.fan_curve.as_ref(),
        kept.as_ref().map(|stored| &stored.profile),
    );
    if let Some(notes) = notes {
        profile.notes = notes.to_string();
    }
    let path = store.save(&profile)?;
    writeln!(
        out,
        "Saved GPU {} ({}) as the profile \"{}\" in {}: {}.",
        index,
        info.identity.name,
        profile.name,
        crate::text::path(&path),
        profile.summary()
    )?;
    Ok(())
}

/// The notice for a fan curve that a one-shot command cannot follow.
pub const FAN_CURVE_ONE_SHOT_NOTICE: &str = "This profile has a fan curve, which a one-shot command cannot follow without the gputune daemon: the fans were left as they are. Install the daemon (`sudo gputune daemon install`) to keep it, or let the window (`gputune`) or `gputune run --profile NAME -- COMMAND` follow it.";

/// Applies `profile` to GPU `index` through the engine; the lines to print.
fn apply_to_gpu(
    client: &mut TuningClient,
    gpus: &[gputune_formats::tuning::GpuInfo],
    index: u32,
    profile: &Profile,
    messages: &mut dyn Write,
) -> anyhow::Result<Vec<String>> {
    let gpu = &gpus[index as usize];
    let application = profile.for_card(&gpu.identity, &gpu.constraints);
    for notice in &application.notices {
        let _ = writeln!(
            messages,
            "gputune: {}: GPU {index}: {notice}",
            notice.level_word()
        );
    }
    // Through the daemon the curve is kept (it outlives this command); a one-shot command
    // without the daemon cannot follow it.
    let keep_curve = application.fan_curve.clone().filter(|_| client.is_daemon());
    if application.fan_curve.is_some() && keep_curve.is_none() {
        let _ = writeln!(messages, "gputune: notice: {FAN_CURVE_ONE_SHOT_NOTICE}");
    }
    let mut lines = Vec::new();
    // The settings first: a refused apply keeps no curve either.
    if !application.settings.is_empty() {
        let request = Request::Apply {
            changes: vec![GpuChange {
                gpu_uuid: gpu.identity.uuid.clone(),
                settings: application.settings.clone(),
            }],
        };
        match client.request(request).map_err(refusal)? {
            Response::Applied { .. } => {
                lines.extend(application.settings.iter().map(|setting| {
                    super::apply::read_back::applied_line(setting, &gpu.constraints)
                }))
            }
            other => return Err(unexpected(&other)),
        }
    }
    if let Some(curve) = keep_curve {
        let request = Request::SetFanCurve {
            gpu_uuid: gpu.identity.uuid.clone(),
            curve: Some(curve),
            boot_default: false,
        };
        match client.request(request).map_err(refusal)? {
            Response::Done => lines.push(format!(
                "the daemon keeps the profile's fan curve (`gputune fan curve clear --gpu {index}` hands the fans back)."
            )),
            other => return Err(unexpected(&other)),
        }
    }
    if lines.is_empty() {
        lines.push(format!(
            "the profile \"{}\" has nothing this card can apply; nothing was changed.",
            profile.name
        ));
    }
    Ok(lines)
}

/// `profile apply NAME`: notices on `messages`, what was written on `out`.
pub fn apply_profile(
    client: &mut TuningClient,
    stored: &StoredProfile,
    gpu: Option<&str>,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let gpus = snapshot(client)?.gpus;
    let index = choose_gpu(&gpus, gpu, Some(&stored.profile.card.uuid))?;
    for line in apply_to_gpu(client, &gpus, index, &stored.profile, messages)? {
        writeln!(out, "GPU {index}: {line}")?;
    }
    Ok(())
}

/// `profile apply-defaults`: every GPU's default profile, trying for `retry_s` seconds while
/// the driver does not answer.
pub fn apply_defaults(
    store: &ProfileStore,
    options: &TuningOptions,
    retry_s: u64,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let (profiles, problems) = store.list();
    report_problems(&problems, messages);
    if !profiles
        .iter()
        .any(|stored| stored.profile.default_for_card)
    {
        writeln!(
            out,
            "No card has a default profile in {}: choose one with `gputune profile default NAME`.",
            crate::text::path(store.folder())
        )?;
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(retry_s);
    let mut said_waiting = false;
    let mut client = loop {
        let mut quiet = Vec::new();
        match connect_for_changes(options, &mut quiet) {
            Ok(client) => {
                let _ = messages.write_all(&quiet);
                break client;
            }
            Err(error) if Instant::now() + RETRY_INTERVAL <= deadline => {
                if !said_waiting {
                    let _ = writeln!(
                        messages,
                        "gputune: the NVIDIA driver does not answer yet ({error}); trying again for up to {retry_s} s."
                    );
                    said_waiting = true;
                }
                std::thread::sleep(RETRY_INTERVAL);
            }
            Err(error) => bail!("{error} No default profile was applied."),
        }
    };
    let gpus = snapshot(&mut client)?.gpus;
    let mut failures = Vec::new();
    for (index, gpu) in gpus.iter().enumerate() {
        let index = index as u32;
        let uuid = &gpu.identity.uuid;
        let Some(stored) = store.default_for(uuid) else {
            writeln!(out, "GPU {index} ({uuid}): no default profile.")?;
            continue;
        };
        writeln!(
            out,
            "GPU {index} ({uuid}): applying \"{}\".",
            stored.profile.name
        )?;
        match apply_to_gpu(&mut client, &gpus, index, &stored.profile, messages) {
            Ok(lines) => {
                for line in lines {
                    writeln!(out, "GPU {index}: {line}")?;
                }
            }
            Err(error) => failures.push(format!("GPU {index}: {error}")),
        }
    }
    match failures.as_slice() {
        [] => Ok(()),
        [one] => bail!("{one}"),
        several => bail!("{}", several.join(" ")),
    }
}
