//! How a CLI command reaches the tuning engine: the daemon when one answers, else an engine in
//! this process, and the GPU the user named. Commands only parse and print; every change goes
//! through the engine.

use std::io::Write;

use anyhow::{anyhow, bail};

use crate::device::resolve_among;
pub use crate::service::client::TuningOptions;
use crate::service::client::{ClientError, ConnectOptions, TuningClient, connect};
use gputune_formats::card::DeviceError;
use gputune_formats::protocol::{BootDefault, Request, Response, Snapshot};
use gputune_formats::tuning::GpuInfo;

/// This command as the engine names it in messages ("gputune apply --try 60").
pub fn command_label() -> String {
    let words: Vec<String> = std::env::args()
        .enumerate()
        .map(|(position, word)| {
            if position == 0 {
                "gputune".to_string()
            } else {
                word
            }
        })
        .collect();
    let label = crate::text::printable(&words.join(" "));
    label.chars().take(120).collect()
}

/// Connects for a command that changes settings: a stand-in simulator is refused (there is no
/// real card to change), and what the engine restored at its start is said on `messages`.
pub fn connect_for_changes(
    options: &TuningOptions,
    messages: &mut dyn Write,
) -> anyhow::Result<TuningClient> {
    connect_for(options, "change", messages)
}

/// Connects for a command that works on real cards (`what` it does to them: "change",
/// "check"), as [`connect_for_changes`] does.
pub fn connect_for(
    options: &TuningOptions,
    what: &str,
    messages: &mut dyn Write,
) -> anyhow::Result<TuningClient> {
    let client = connect(&ConnectOptions {
        backend: options.backend.clone(),
        socket: options.socket.clone(),
        folders: options.folders.clone(),
        label: command_label(),
    })?;
    if let Some(reason) = &client.welcome().simulated_because {
        bail!(
            "There is no NVIDIA GPU to {what} ({reason}); add --backend sim to use the simulated GPU."
        );
    }
    for notice in &client.welcome().notices {
        let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
    }
    Ok(client)
}

/// The daemon, or `needs_daemon` (why a command cannot do without it) when none answers: a
/// kept fan curve, a temperature hold.
pub fn connect_daemon_or(
    options: &TuningOptions,
    needs_daemon: &str,
) -> anyhow::Result<TuningClient> {
    match connect(&ConnectOptions {
        backend: options.backend.clone(),
        socket: options.socket.clone(),
        folders: options.folders.clone(),
        label: command_label(),
    }) {
        Ok(client) if client.is_daemon() => Ok(client),
        Ok(_) | Err(crate::service::client::ConnectError::NoDaemon { .. }) => {
            bail!("{needs_daemon}")
        }
        Err(error) => Err(error.into()),
    }
}

/// Every GPU, its tuning state and latest reading.
pub fn snapshot(client: &mut TuningClient) -> anyhow::Result<Snapshot> {
    match client.request(Request::Snapshot).map_err(refusal)? {
        Response::Snapshot(snapshot) => Ok(*snapshot),
        other => Err(unexpected(&other)),
    }
}

/// The GPU a command works on: `--gpu` (index or UUID), else `preferred_uuid` when present,
/// else the only GPU.
pub fn choose_gpu(
    gpus: &[GpuInfo],
    query: Option<&str>,
    preferred_uuid: Option<&str>,
) -> anyhow::Result<u32> {
    let uuids: Vec<String> = gpus.iter().map(|gpu| gpu.identity.uuid.clone()).collect();
    if let Some(query) = query {
        return Ok(resolve_among(&uuids, query)?);
    }
    if let Some(wanted) = preferred_uuid
        && let Some(index) = uuids
            .iter()
            .position(|uuid| uuid.eq_ignore_ascii_case(wanted.trim()))
    {
        return Ok(index as u32);
    }
    match uuids.len() {
        0 => Err(DeviceError::NoGpus.into()),
        1 => Ok(0),
        count => bail!(
            "This machine has {count} GPUs: choose one with --gpu INDEX or --gpu UUID (see `gputune status`)."
        ),
    }
}

/// A client error as the one sentence to print.
pub fn refusal(error: ClientError) -> anyhow::Error {
    match error {
        ClientError::Refused(error) => anyhow!("{}", error.message),
        other => anyhow!("{other}"),
    }
}

/// The engine answered something this command did not ask for.
pub fn unexpected(response: &Response) -> anyhow::Error {
    anyhow!(
        "The tuning engine gave an unexpected answer ({response:?}); use the same gputune for the daemon and the command line."
    )
}

/// Every card's boot default, as the daemon keeps them; none without a daemon (only a daemon
/// keeps boot defaults).
pub fn boot_defaults(client: &mut TuningClient) -> anyhow::Result<Vec<BootDefault>> {
    if !client.is_daemon() {
        return Ok(Vec::new());
    }
    match client.request(Request::BootDefaults).map_err(refusal)? {
        Response::BootDefaults { defaults } => Ok(defaults),
        other => Err(unexpected(&other)),
    }
}

/// The GPUs `--gpu` names: one, a comma-separated list, or `all`; without it the profile's
/// card, else the only GPU. The one reading of a `--gpu` list, for every command that takes one.
pub fn choose_gpus(
    snapshot: &Snapshot,
    query: Option<&str>,
    preferred_uuid: Option<&str>,
) -> anyhow::Result<Vec<u32>> {
    match query {
        Some(query) => {
            let uuids: Vec<String> = snapshot
                .gpus
                .iter()
                .map(|gpu| gpu.identity.uuid.clone())
                .collect();
            choose_listed_gpus(&uuids, query)
        }
        None => Ok(vec![choose_gpu(&snapshot.gpus, None, preferred_uuid)?]),
    }
}

/// The GPUs a `--gpu` list names among `uuids` (in index order): one, several separated by
/// commas, or `all`; [`choose_gpus`] for a command that reads the cards without the engine.
pub fn choose_listed_gpus(uuids: &[String], query: &str) -> anyhow::Result<Vec<u32>> {
    let list = query.trim();
    if list.eq_ignore_ascii_case("all") {
        if uuids.is_empty() {
            bail!("This machine has no GPU (see `gputune status`).");
        }
        return Ok((0..uuids.len() as u32).collect());
    }
    let mut indices = Vec::new();
    for part in list.split(',').filter(|part| !part.trim().is_empty()) {
        let index = resolve_among(uuids, part.trim())?;
        if !indices.contains(&index) {
            indices.push(index);
        }
    }
    if indices.is_empty() {
        bail!("--gpu {list:?}: name a GPU by index or UUID, several separated by commas, or all.");
    }
    Ok(indices)
}
