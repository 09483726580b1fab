//! `apply --try`: the engine runs one trial per GPU (several GPUs: one session for all), counts
//! down and puts the cards back; this starts the trials, says the countdown, asks for the
//! revert on Ctrl-C, and prints each GPU's before / during table.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use anyhow::bail;

use crate::cli::connect::{refusal, unexpected};
use crate::service::client::TuningClient;
use crate::tuning::stats::{comparison_table, settling_note};
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::tuning::{
    EngineEvent, GpuChange, GpuInfo, GroupTrialRequest, TrialPhase, TrialRequest, TrialStatus,
};

/// Tries `changes` for `try_s` seconds after a `baseline_s` baseline; `stop` (Ctrl-C, SIGTERM)
/// puts the cards back early. An error when a trial could not start or end cleanly.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_trial(
    client: &mut TuningClient,
    gpus: &[GpuInfo],
    changes: &[GpuChange],
    try_s: u64,
    baseline_s: u64,
    stop: &Receiver<()>,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    // Every client's news (a crash on a tried card) reaches subscribers only; at the default
    // pace, so no other client's sampling changes.
    if let Err(error) = client.request(Request::Subscribe {
        interval_ms: crate::service::DEFAULT_INTERVAL_MS,
    }) {
        tracing::info!("the trial hears no notices: {error}");
    }
    let running = start_trials(client, changes, try_s, baseline_s)?;
    let ended = wait_for_ends(client, gpus, &running, baseline_s, stop, messages)?;
    let mut failed = false;
    for (index, status) in &ended {
        failed |= status.failed;
        say_result(*index, &gpus[*index as usize], status, out, messages)?;
    }
    if failed {
        bail!("The trial did not end cleanly: see the messages above.");
    }
    Ok(())
}

/// Starts the trials: one card's, or one group trial over several (tried and kept or put back
/// together). Each tried GPU's first status, by index.
fn start_trials(
    client: &mut TuningClient,
    changes: &[GpuChange],
    try_s: u64,
    baseline_s: u64,
) -> anyhow::Result<BTreeMap<u32, TrialStatus>> {
    let started = match changes {
        [change] => client.request(Request::StartTrial {
            trial: TrialRequest {
                gpu_uuid: change.gpu_uuid.clone(),
                settings: change.settings.clone(),
                duration_s: try_s,
                baseline_s,
            },
        }),
        _ => client.request(Request::StartGroupTrial {
            trial: GroupTrialRequest {
                changes: changes.to_vec(),
                duration_s: try_s,
                baseline_s,
            },
        }),
    };
    let mut running = BTreeMap::new();
    match started {
        Ok(Response::Trial { status }) => {
            running.insert(status.gpu_index, *status);
        }
        Ok(Response::Trials { statuses }) => {
            for status in statuses {
                running.insert(status.gpu_index, status);
            }
        }
        Ok(other) => return Err(unexpected(&other)),
        Err(error) => return Err(refusal(error)),
    }
    Ok(running)
}

/// Follows the trials to their ends, saying each phase once and the news about a tried card;
/// a stop asks the engine to put back every trial still running. Each GPU's last status.
fn wait_for_ends(
    client: &mut TuningClient,
    gpus: &[GpuInfo],
    running: &BTreeMap<u32, TrialStatus>,
    baseline_s: u64,
    stop: &Receiver<()>,
    messages: &mut dyn Write,
) -> anyhow::Result<BTreeMap<u32, TrialStatus>> {
    let mut ended: BTreeMap<u32, TrialStatus> = running
        .iter()
        .filter(|(_, status)| status.phase == TrialPhase::Ended)
        .map(|(index, status)| (*index, status.clone()))
        .collect();
    let mut last_said: Option<TrialPhase> = None;
    let mut stopped = false;
    while ended.len() < running.len() {
        if !stopped && stop.try_recv().is_ok() {
            stopped = true;
            let _ = writeln!(messages, "Trial stopped early.");
            put_back_now(client, gpus, running, &mut ended);
            continue;
        }
        let event = client
            .next_event(Duration::from_millis(200))
            .map_err(refusal)?;
        let Some(Event::Engine { event }) = event else {
            continue;
        };
        let status = match *event {
            EngineEvent::Trial { status, .. } => status,
            // News about a tried card (a crash put back what another session held, the fan
            // safety net): said as it arrives.
            EngineEvent::Notice {
                gpu_index: Some(gpu),
                notice,
            } if running.contains_key(&gpu) && !ended.contains_key(&gpu) => {
                let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
                continue;
            }
            _ => continue,
        };
        if !running.contains_key(&status.gpu_index) {
            continue;
        }
        match status.phase {
            TrialPhase::Ended => {
                ended.insert(status.gpu_index, status);
            }
            phase if Some(phase) != last_said => {
                say_phase(phase, baseline_s, messages);
                last_said = Some(phase);
            }
            _ => {}
        }
    }
    Ok(ended)
}

/// Asks the engine to put back every trial that has not ended.
fn put_back_now(
    client: &mut TuningClient,
    gpus: &[GpuInfo],
    running: &BTreeMap<u32, TrialStatus>,
    ended: &mut BTreeMap<u32, TrialStatus>,
) {
    let pending: Vec<u32> = running
        .keys()
        .filter(|index| !ended.contains_key(index))
        .copied()
        .collect();
    for index in pending {
        match client.request(Request::FinishTrial {
            gpu_uuid: gpus[index as usize].identity.uuid.clone(),
            keep: false,
        }) {
            Ok(Response::Trial { status }) => {
                ended.insert(index, *status);
            }
            Ok(_) => {}
            // Ended by its clock meanwhile: its status arrives as an event.
            Err(error) => tracing::info!("{error}"),
        }
    }
}

/// One GPU's end: its message, what was tried, the before / during table and its notes.
fn say_result(
    index: u32,
    gpu: &GpuInfo,
    status: &TrialStatus,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    if let Some(message) = &status.message {
        let _ = writeln!(messages, "GPU {index}: {message}");
    }
    writeln!(out, "GPU {index} ({}): {}", gpu.identity.name, status.what)?;
    if status.during.samples > 0 || status.baseline.samples > 0 {
        write!(
            out,
            "{}",
            comparison_table(&status.baseline, &status.during)
        )?;
    }
    if let Some(warning) = &status.baseline_warning {
        writeln!(out, "{warning}")?;
    }
    if status.during.samples > 0
        && let Some(note) = settling_note(&status.during)
    {
        writeln!(out, "{note}")?;
    }
    Ok(())
}

/// One line per change of the countdown.
fn say_phase(phase: TrialPhase, baseline_s: u64, messages: &mut dyn Write) {
    let _ = match phase {
        TrialPhase::Measuring { left_s } => writeln!(
            messages,
            "Measuring a {baseline_s} s baseline before changing anything ({left_s} s left); Ctrl-C to cancel."
        ),
        TrialPhase::Running { left_s } => writeln!(
            messages,
            "Trying the new settings: {left_s} s left (Ctrl-C puts the card back now)."
        ),
        TrialPhase::Ended => Ok(()),
    };
}
