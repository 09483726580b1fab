//! `gputune profile ...`: list, show, save, apply, delete, export, import profiles and choose
//! each card's default; `apply-defaults` is what the boot service runs.
//!
//! Applying goes through `Profile::for_card` (values converted and clamped for the card, with
//! notices) and then `device::gate` for every setting before the first write, all or nothing.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde::Serialize;

use crate::cli::apply::{GpuChanges, apply_changes};
use crate::device::gate::{ValidatedSetting, validate};
use crate::device::{
    Backend, BackendOptions, Constraints, DeviceError, GpuIdentity, Setting, open_backend,
    resolve_gpu,
};
use crate::profiles::profile::{Profile, ProfileApplication};
use crate::profiles::store::{LoadProblem, ProfileStore, StoreError, StoredProfile};
use crate::units::watts_exact;

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
    /// Apply every card's default profile (what the boot service runs).
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
    /// Make a profile its card's default, applied at boot by `gputune boot-service`.
    Default { name: String },
}

/// Runs `gputune profile ...`.
pub fn run_command(args: &ProfileArgs, options: &BackendOptions) -> anyhow::Result<()> {
    let store = ProfileStore::open_default()?;
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
            let mut opened = open_backend(options)?;
            refuse_fallback(opened.fallback_reason.as_deref(), "read")?;
            save(
                &store,
                opened.backend.as_mut(),
                name,
                gpu.as_deref(),
                notes.as_deref(),
                *replace,
                &mut out,
            )
        }
        ProfileCommand::Apply { name, gpu } => {
            let stored = store.load(name)?;
            let mut opened = open_backend(options)?;
            refuse_fallback(opened.fallback_reason.as_deref(), "change")?;
            apply(
                opened.backend.as_mut(),
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
                stored.path.display()
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
                file.display()
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
                stored.path.display()
            )?;
            Ok(())
        }
        ProfileCommand::Default { name } => {
            let stored = store.load(name)?;
            store.set_default(&stored.profile.name)?;
            writeln!(
                out,
                "\"{}\" is now the default profile of {} ({}); `gputune boot-service` applies it at boot.",
                stored.profile.name, stored.profile.card.name, stored.profile.card.uuid
            )?;
            Ok(())
        }
    }
}

/// `auto` fell back to the simulator: there is no real card to read or change.
fn refuse_fallback(fallback_reason: Option<&str>, verb: &str) -> anyhow::Result<()> {
    match fallback_reason {
        Some(reason) => bail!(
            "There is no NVIDIA GPU to {verb} ({reason}); add --backend sim to use the simulated GPU."
        ),
        None => Ok(()),
    }
}

/// One profile as `profile list --json` prints it.
#[derive(Debug, Serialize)]
struct ListedProfile<'a> {
    path: String,
    #[serde(flatten)]
    profile: &'a Profile,
}

#[derive(Debug, Serialize)]
struct ListedProblem {
    path: String,
    message: String,
}

#[derive(Debug, Serialize)]
struct ProfileList<'a> {
    folder: String,
    profiles: Vec<ListedProfile<'a>>,
    problems: Vec<ListedProblem>,
}

/// `profile list`: a line per profile on `out`, each unreadable file on `messages`.
pub fn list(
    store: &ProfileStore,
    json: bool,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let (profiles, problems) = store.list();
    if json {
        let report = ProfileList {
            folder: store.folder().display().to_string(),
            profiles: profiles
                .iter()
                .map(|stored| ListedProfile {
                    path: stored.path.display().to_string(),
                    profile: &stored.profile,
                })
                .collect(),
            problems: problems
                .iter()
                .map(|problem| ListedProblem {
                    path: problem.path.display().to_string(),
                    message: problem.message.clone(),
                })
                .collect(),
        };
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else if profiles.is_empty() {
        writeln!(
            out,
            "No profiles in {} yet: `gputune profile save NAME` saves a card's current settings.",
            store.folder().display()
        )?;
    } else {
        let rows: Vec<[String; 4]> = profiles
            .iter()
            .map(|stored| {
                let profile = &stored.profile;
                [
                    profile.name.clone(),
                    format!("{} ({})", profile.card.name, short_uuid(&profile.card.uuid)),
                    if profile.default_for_card {
                        "default".to_string()
                    } else {
                        String::new()
                    },
                    summary(profile),
                ]
            })
            .collect();
        let header = [
            "NAME".to_string(),
            "CARD".to_string(),
            "BOOT".to_string(),
            "SETTINGS".to_string(),
        ];
        let widths: Vec<usize> = (0..4)
            .map(|column| {
                std::iter::once(&header)
                    .chain(&rows)
                    .map(|row| row[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in std::iter::once(&header).chain(&rows) {
            let mut line = String::new();
            for (column, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if column < 3 {
                    let padding = widths[column] - cell.chars().count();
                    line.push_str(&" ".repeat(padding + 2));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    report_problems(&problems, messages);
    Ok(())
}

fn report_problems(problems: &[LoadProblem], messages: &mut dyn Write) {
    for problem in problems {
        let _ = writeln!(messages, "gputune: skipped: {}", problem.message);
    }
}

/// "GPU-4090..." → the first 12 characters, enough to tell cards apart in a table.
fn short_uuid(uuid: &str) -> String {
    let short: String = uuid.chars().take(12).collect();
    if short.len() < uuid.len() {
        format!("{short}…")
    } else {
        short
    }
}

/// "315 W (70 %), GPU +150 MHz, fan curve": what a profile sets, in a few words.
pub fn summary(profile: &Profile) -> String {
    let mut parts = Vec::new();
    if let Some(power) = profile.power_limit {
        parts.push(format!(
            "{} W ({} %)",
            trim_number(power.watts),
            trim_number(power.percent_of_default)
        ));
    }
    if let Some(lock) = profile.gpu_clock_lock {
        parts.push(format!("GPU {}-{} MHz", lock.min_mhz, lock.max_mhz));
    }
    if let Some(lock) = profile.memory_clock_lock {
        parts.push(format!("memory {}-{} MHz", lock.min_mhz, lock.max_mhz));
    }
    if let Some(offset) = profile.gpu_clock_offset_mhz {
        parts.push(format!("GPU {offset:+} MHz"));
    }
    if let Some(offset) = profile.memory_clock_offset_mhz {
        parts.push(format!("memory {offset:+} MHz"));
    }
    if profile.fan_curve.is_some() {
        parts.push("fan curve".to_string());
    }
    if parts.is_empty() {
        "nothing".to_string()
    } else {
        parts.join(", ")
    }
}

/// 315 → "315", 66.67 → "66.67".
fn trim_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

/// `profile show NAME`.
pub fn show(store: &ProfileStore, name: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    let stored = store.load(name)?;
    let profile = &stored.profile;
    writeln!(out, "Profile:        {}", profile.name)?;
    writeln!(out, "File:           {}", stored.path.display())?;
    writeln!(
        out,
        "Card:           {} ({}, PCI {})",
        profile.card.name, profile.card.uuid, profile.card.pci_bus_id
    )?;
    writeln!(
        out,
        "Boot default:   {}",
        if profile.default_for_card {
            "yes"
        } else {
            "no"
        }
    )?;
    let unchanged = "left as it is";
    match profile.power_limit {
        Some(power) => writeln!(
            out,
            "Power limit:    {} W on this card, {} % of the default on another",
            trim_number(power.watts),
            trim_number(power.percent_of_default)
        )?,
        None => writeln!(out, "Power limit:    {unchanged}")?,
    }
    for (label, lock) in [
        ("GPU clocks:    ", profile.gpu_clock_lock),
        ("Memory clocks: ", profile.memory_clock_lock),
    ] {
        match lock {
            Some(lock) => writeln!(
                out,
                "{label} locked to {}-{} MHz",
                lock.min_mhz, lock.max_mhz
            )?,
            None => writeln!(out, "{label} {unchanged}")?,
        }
    }
    for (label, offset) in [
        ("GPU offset:    ", profile.gpu_clock_offset_mhz),
        ("Memory offset: ", profile.memory_clock_offset_mhz),
    ] {
        match offset {
            Some(offset) => writeln!(out, "{label} {offset:+} MHz")?,
            None => writeln!(out, "{label} {unchanged}")?,
        }
    }
    match &profile.fan_curve {
        Some(points) => {
            let points: Vec<String> = points
                .iter()
                .map(|point| {
                    format!(
                        "{} °C → {} %",
                        trim_number(point.temperature_c),
                        trim_number(point.speed_pct)
                    )
                })
                .collect();
            writeln!(
                out,
                "Fan curve:      {} (followed by the window and `gputune run`)",
                points.join(", ")
            )?;
        }
        None => writeln!(out, "Fan curve:      none (the driver's own)")?,
    }
    if !profile.notes.is_empty() {
        writeln!(out, "Notes:")?;
        for line in profile.notes.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

/// Picks the GPU for a command: `--gpu`, else `preferred_uuid` when present, else the only GPU.
pub fn choose_gpu(
    backend: &mut dyn Backend,
    query: Option<&str>,
    preferred_uuid: Option<&str>,
) -> anyhow::Result<u32> {
    if let Some(query) = query {
        return Ok(resolve_gpu(backend, query)?);
    }
    let count = backend.gpu_count()?;
    if let Some(uuid) = preferred_uuid {
        for index in 0..count {
            if backend
                .identity(index)?
                .uuid
                .eq_ignore_ascii_case(uuid.trim())
            {
                return Ok(index);
            }
        }
    }
    match count {
        0 => Err(DeviceError::NoGpus.into()),
        1 => Ok(0),
        _ => bail!(
            "This machine has {count} GPUs: choose one with --gpu INDEX or --gpu UUID (see `gputune status`)."
        ),
    }
}

/// `profile save NAME`: the card's current settings under a name.
pub fn save(
    store: &ProfileStore,
    backend: &mut dyn Backend,
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
            existing.path.display()
        );
    }
    let index = choose_gpu(backend, gpu, None)?;
    let identity = backend.identity(index)?;
    let constraints = backend.constraints(index)?;
    let current = backend.current_settings(index)?;
    let mut profile = Profile::from_current(name, &identity, &constraints, &current);
    if let Some(notes) = notes {
        profile.notes = notes.to_string();
    }
    if let Some(existing) = kept
        && existing.profile.is_for(&identity.uuid)
    {
        // Replacing a profile of the same card keeps what cannot be read back from it.
        profile.gpu_clock_lock = existing.profile.gpu_clock_lock;
        profile.memory_clock_lock = existing.profile.memory_clock_lock;
        profile.fan_curve = existing.profile.fan_curve;
        profile.default_for_card = existing.profile.default_for_card;
        if notes.is_none() {
            profile.notes = existing.profile.notes;
        }
    }
    let path = store.save(&profile)?;
    writeln!(
        out,
        "Saved GPU {} ({}) as the profile \"{}\" in {}: {}.",
        index,
        identity.name,
        profile.name,
        path.display(),
        summary(&profile)
    )?;
    Ok(())
}

/// A profile converted for one GPU and checked by `device::gate`, ready to write.
pub struct PreparedProfile {
    pub identity: GpuIdentity,
    pub constraints: Constraints,
    pub application: ProfileApplication,
    pub validated: Vec<ValidatedSetting>,
}

/// Converts `profile` for GPU `index` and validates every setting; nothing is written.
pub fn prepare(
    backend: &mut dyn Backend,
    index: u32,
    profile: &Profile,
) -> anyhow::Result<PreparedProfile> {
    let identity = backend.identity(index)?;
    let constraints = backend.constraints(index)?;
    let application = profile.for_card(&identity, &constraints);
    let validated = application
        .settings
        .iter()
        .map(|setting| validate(&constraints, *setting))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| anyhow!("{error} Nothing was changed."))?;
    Ok(PreparedProfile {
        identity,
        constraints,
        application,
        validated,
    })
}

/// Writes a prepared profile; the lines to print for what was written.
pub fn write_prepared(
    backend: &mut dyn Backend,
    prepared: &PreparedProfile,
) -> anyhow::Result<Vec<String>> {
    let changes = [GpuChanges {
        identity: prepared.identity.clone(),
        constraints: prepared.constraints.clone(),
        settings: prepared.validated.clone(),
    }];
    if let Err(failure) = apply_changes(backend, &changes) {
        bail!("{}", failure.message());
    }
    Ok(prepared
        .application
        .settings
        .iter()
        .map(|setting| applied_line(setting, &prepared.constraints))
        .collect())
}

/// "Power limit set to 315 W (70 % of 450 W)."
fn applied_line(setting: &Setting, constraints: &Constraints) -> String {
    match *setting {
        Setting::PowerLimit { power_limit_mw } => {
            let share = constraints
                .power_limit_default_mw
                .filter(|default_mw| *default_mw > 0)
                .map(|default_mw| {
                    let percent = f64::from(power_limit_mw) / f64::from(default_mw) * 100.0;
                    format!(
                        " ({} % of {})",
                        trim_number((percent * 10.0).round() / 10.0),
                        watts_exact(default_mw)
                    )
                })
                .unwrap_or_default();
            format!("Power limit set to {}{share}.", watts_exact(power_limit_mw))
        }
        other => {
            let described = other.describe();
            let mut characters = described.chars();
            let capitalized: String = match characters.next() {
                Some(first) => first.to_uppercase().chain(characters).collect(),
                None => String::new(),
            };
            format!("{capitalized} applied.")
        }
    }
}

/// The notice for a fan curve that a one-shot command cannot follow.
pub const FAN_CURVE_ONE_SHOT_NOTICE: &str = "This profile has a fan curve, which a one-shot command cannot follow: the fans were left as they are. The window (`gputune`) or `gputune run --profile NAME -- COMMAND` follows fan curves.";

/// `profile apply NAME`: notices on `messages`, what was written on `out`.
pub fn apply(
    backend: &mut dyn Backend,
    stored: &StoredProfile,
    gpu: Option<&str>,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let profile = &stored.profile;
    let index = choose_gpu(backend, gpu, Some(&profile.card.uuid))?;
    let prepared = prepare(backend, index, profile)?;
    for notice in &prepared.application.notices {
        let _ = writeln!(messages, "gputune: notice: {notice}");
    }
    if prepared.application.fan_curve.is_some() {
        let _ = writeln!(messages, "gputune: notice: {FAN_CURVE_ONE_SHOT_NOTICE}");
    }
    if prepared.validated.is_empty() {
        writeln!(
            out,
            "GPU {index}: the profile \"{}\" has nothing this card can apply; nothing was changed.",
            profile.name
        )?;
        return Ok(());
    }
    let lines = write_prepared(backend, &prepared)?;
    for line in lines {
        writeln!(out, "GPU {index}: {line}")?;
    }
    Ok(())
}

/// `profile apply-defaults`: every GPU's default profile, trying for `retry_s` seconds while
/// the driver does not answer (at boot it may come up after us).
pub fn apply_defaults(
    store: &ProfileStore,
    options: &BackendOptions,
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
            store.folder().display()
        )?;
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(retry_s);
    let mut said_waiting = false;
    let (mut backend, count) = loop {
        let attempt = open_backend(options).and_then(|opened| {
            if let Some(reason) = opened.fallback_reason {
                return Err(DeviceError::Other {
                    what: "Finding the NVIDIA GPUs".to_string(),
                    detail: reason,
                });
            }
            let mut backend = opened.backend;
            let count = backend.gpu_count()?;
            if count == 0 {
                return Err(DeviceError::NoGpus);
            }
            Ok((backend, count))
        });
        match attempt {
            Ok(found) => break found,
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
    let mut failures = Vec::new();
    for index in 0..count {
        let identity = match backend.identity(index) {
            Ok(identity) => identity,
            Err(error) => {
                failures.push(format!("GPU {index}: {error}"));
                continue;
            }
        };
        let Some(stored) = store.default_for(&identity.uuid) else {
            writeln!(out, "GPU {index} ({}): no default profile.", identity.uuid)?;
            continue;
        };
        writeln!(
            out,
            "GPU {index} ({}): applying \"{}\".",
            identity.uuid, stored.profile.name
        )?;
        let result = prepare(backend.as_mut(), index, &stored.profile).and_then(|prepared| {
            for notice in &prepared.application.notices {
                let _ = writeln!(messages, "gputune: notice: GPU {index}: {notice}");
            }
            if prepared.application.fan_curve.is_some() {
                let _ = writeln!(
                    messages,
                    "gputune: notice: GPU {index}: {FAN_CURVE_ONE_SHOT_NOTICE}"
                );
            }
            write_prepared(backend.as_mut(), &prepared)
        });
        match result {
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
