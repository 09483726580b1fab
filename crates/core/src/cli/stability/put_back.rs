//! `gputune stability --put-back`, and the hint after an unstable verdict: a card back to the
//! profile last checked stable on it, else to stock clock offsets and locks.

use std::io::Write;

use anyhow::bail;

use super::StabilityArgs;
use crate::cli::connect::choose_gpus;
use crate::cli::connect::{TuningOptions, refusal, snapshot};
use crate::profiles::store::ProfileStore;
use crate::service::client::TuningClient;
use crate::stability::put_back::PutBack;
use gputune_formats::protocol::{Request, Response};
use gputune_formats::{profile::Verdict, reports::stability::CheckReport};

/// `--put-back`: each named card (default: the only one) back to the profile last checked
/// stable on it, else to stock clock offsets and locks, through the engine.
pub(super) fn put_back(args: &StabilityArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    let mut messages = std::io::stderr();
    let mut client = crate::cli::connect::connect_for_changes(options, &mut messages)?;
    let snapshot = snapshot(&mut client)?;
    let profiles = saved_profiles(options, &mut messages);
    let mut stdout = std::io::stdout();
    for index in choose_gpus(&snapshot, args.gpu.as_deref(), None)? {
        let gpu = &snapshot.gpus[index as usize];
        let Some(tuning) = snapshot.tunings.get(index as usize) else {
            bail!("The tuning engine sent no state for GPU {index}.");
        };
        let put_back = PutBack::for_card(gpu, &tuning.in_force, &profiles);
        if !put_back.settings.is_empty() {
            let request = Request::Apply {
                changes: vec![gputune_formats::tuning::GpuChange {
                    gpu_uuid: gpu.identity.uuid.clone(),
                    settings: put_back.settings.clone(),
                }],
            };
            match client.request(request).map_err(refusal)? {
                Response::Applied { .. } => {}
                other => return Err(crate::cli::connect::unexpected(&other)),
            }
        }
        let said = if put_back.settings.is_empty() {
            put_back.describe()
        } else {
            format!("Put {}", put_back.describe())
        };
        writeln!(stdout, "{said}")?;
    }
    Ok(0)
}

/// The saved profiles (a folder that cannot be read: none, said on `messages`).
fn saved_profiles(
    options: &TuningOptions,
    messages: &mut dyn Write,
) -> Vec<crate::profiles::store::StoredProfile> {
    match ProfileStore::open(&options.folders) {
        Ok(store) => store.list().0,
        Err(error) => {
            let _ = writeln!(
                messages,
                "gputune: the profiles could not be read ({error}); stock settings are the way back."
            );
            Vec::new()
        }
    }
}

/// After a card was found unstable at its own settings, which it still runs: how to put it
/// back.
pub(super) fn say_how_to_put_back(
    client: &mut TuningClient,
    options: &TuningOptions,
    reports: &[CheckReport],
    messages: &mut dyn Write,
) {
    if !reports
        .iter()
        .any(|report| report.verdict == Verdict::Unstable)
    {
        return;
    }
    let Ok(now) = snapshot(client) else {
        return;
    };
    let profiles = saved_profiles(options, messages);
    for report in reports
        .iter()
        .filter(|report| report.verdict == Verdict::Unstable)
    {
        let index = report.gpu_index as usize;
        let (Some(gpu), Some(tuning)) = (now.gpus.get(index), now.tunings.get(index)) else {
            continue;
        };
        let put_back = PutBack::for_card(gpu, &tuning.in_force, &profiles);
        if put_back.settings.is_empty() {
            continue;
        }
        let _ = writeln!(
            messages,
            "gputune: GPU {index} still runs {}. Put it back to {} with `gputune stability --put-back --gpu {index}`.",
            crate::stability::report::describe_settings(
                &tuning.in_force,
                gpu.constraints.power_limit_default_mw
            ),
            put_back.target
        );
    }
}
