//! `gputune profile default NAME`: the profile made the default of the cards it covers is
//! handed to the daemon as their boot default (`profiles::defaults` says which wins).

use std::io::Write;

use crate::cli::connect::{TuningOptions, refusal, snapshot, unexpected};
use crate::profiles::profile::ProfileOnCard;
use crate::profiles::store::ProfileStore;
use crate::service::client::{ConnectError, TuningClient};
use gputune_formats::profile::Profile;
use gputune_formats::protocol::{BootDefault, Request, Response};
use gputune_formats::tuning::GpuInfo;

/// Gives a card's new default to the daemon, which keeps it in its own folder and applies it
/// at boot, and to each card in `released` (an overlapping box profile that is no longer a
/// default covered it) its default now; without a daemon, says how to get one.
pub(super) fn hand_default_to_daemon(
    store: &ProfileStore,
    profile: &Profile,
    released: &[String],
    options: &TuningOptions,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let without_daemon = "The gputune daemon applies each card's default at boot; it is not running here: install it with `sudo gputune daemon install` and set the default again, or run `gputune profile apply-defaults` yourself.";
    let connected = crate::service::client::connect(&crate::service::client::ConnectOptions {
        backend: options.backend.clone(),
        socket: options.socket.clone(),
        folders: options.folders.clone(),
        label: crate::cli::connect::command_label(),
    });
    let mut client = match connected {
        Ok(client) if client.is_daemon() => client,
        Ok(_) | Err(ConnectError::NoDaemon { .. }) => {
            writeln!(out, "{without_daemon}")?;
            return Ok(());
        }
        Err(error) => return Err(error.into()),
    };
    let gpus = snapshot(&mut client)?.gpus;
    // A box profile is the default of every card it covers.
    let covered: Vec<&GpuInfo> = gpus
        .iter()
        .filter(|gpu| profile.covers(&gpu.identity.uuid))
        .collect();
    if covered.is_empty() {
        writeln!(
            out,
            "The card {} is not in this machine, so the daemon was not told; set the default again where the card is.",
            profile.card.uuid
        )?;
        return Ok(());
    }
    for gpu in covered {
        let application = profile.for_card(&gpu.identity, &gpu.constraints);
        for notice in &application.notices {
            let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
        }
        let has_curve = application.fan_curve.is_some();
        let request = Request::SetBootDefault {
            gpu_uuid: gpu.identity.uuid.clone(),
            default: Some(BootDefault {
                gpu_uuid: gpu.identity.uuid.clone(),
                profile_name: profile.name.clone(),
                settings: application.settings,
                fan_curve: application.fan_curve,
                // A profile carries no hold: the daemon keeps the card's stored one.
                temperature_hold: None,
            }),
        };
        match client.request(request).map_err(refusal)? {
            Response::Done => writeln!(
                out,
                "The gputune daemon applies it to GPU {} at every boot{}.",
                gpu.identity.index,
                if has_curve {
                    " and keeps its fan curve from then on"
                } else {
                    ""
                }
            )?,
            other => return Err(unexpected(&other)),
        }
    }
    tell_released(&mut client, store, &gpus, released, out, messages)
}

/// Each card in `released` gets its default now as its boot default (its own profile, or
/// none: the daemon keeps only the card's temperature hold), so the daemon agrees with
/// `profile apply-defaults`.
fn tell_released(
    client: &mut TuningClient,
    store: &ProfileStore,
    gpus: &[GpuInfo],
    released: &[String],
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    for gpu in gpus.iter().filter(|gpu| {
        released
            .iter()
            .any(|uuid| gpu.identity.uuid.eq_ignore_ascii_case(uuid))
    }) {
        let uuid = &gpu.identity.uuid;
        let now = store.default_for(uuid);
        let default = now.as_ref().map(|stored| {
            let application = stored.profile.for_card(&gpu.identity, &gpu.constraints);
            for notice in &application.notices {
                let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
            }
            BootDefault {
                gpu_uuid: uuid.clone(),
                profile_name: stored.profile.name.clone(),
                settings: application.settings,
                fan_curve: application.fan_curve,
                temperature_hold: None,
            }
        });
        let request = Request::SetBootDefault {
            gpu_uuid: uuid.clone(),
            default,
        };
        match client.request(request).map_err(refusal)? {
            Response::Done => match &now {
                Some(stored) => writeln!(
                    out,
                    "GPU {} is no longer in a default box profile: its own default \"{}\" is its boot default again.",
                    gpu.identity.index, stored.profile.name
                )?,
                None => writeln!(
                    out,
                    "GPU {} is no longer in a default box profile and has no default of its own: the daemon applies nothing to it at boot.",
                    gpu.identity.index
                )?,
            },
            other => return Err(unexpected(&other)),
        }
    }
    Ok(())
}
