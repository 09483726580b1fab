//! The window's commands as requests to the tuning service, and their answers as events for
//! the window: applies, trials (one card, or every card as one session), fan curves.

use crate::link::{LinkCommand, LinkEvent, TuneCommand, WINDOW_BASELINE_S};
use crate::service::client::{ClientError, TuningClient};
use gputune_formats::card::Setting;
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::protocol::{Request, Response};
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{GpuInfo, TrialRequest};

/// Runs one of the window's commands; an error only when the service is gone.
pub(crate) fn handle(
    client: &mut TuningClient,
    gpus: &[GpuInfo],
    command: LinkCommand,
    send: &dyn Fn(LinkEvent) -> bool,
) -> Result<(), ClientError> {
    let uuid = |gpu_index: u32| {
        gpus.get(gpu_index as usize)
            .map(|gpu| gpu.identity.uuid.clone())
            .unwrap_or_default()
    };
    let (gpu_index, request) = match command {
        // Handled by the loop, which owns the sweeps and checks.
        LinkCommand::StartSweep(_)
        | LinkCommand::StopSweep { .. }
        | LinkCommand::StartStability(_)
        | LinkCommand::StopStability { .. } => return Ok(()),
        LinkCommand::SetInterval { interval_ms } => (None, Request::Subscribe { interval_ms }),
        LinkCommand::Tune(TuneCommand::Apply {
            gpu_index,
            settings,
        }) => (
            Some(gpu_index),
            Request::Apply {
                changes: vec![gputune_formats::tuning::GpuChange {
                    gpu_uuid: uuid(gpu_index),
                    settings,
                }],
            },
        ),
        LinkCommand::Tune(TuneCommand::StartTrial {
            gpu_index,
            settings,
            duration_s,
        }) => (
            Some(gpu_index),
            Request::StartTrial {
                trial: TrialRequest {
                    gpu_uuid: uuid(gpu_index),
                    settings,
                    duration_s,
                    baseline_s: WINDOW_BASELINE_S,
                },
            },
        ),
        LinkCommand::Tune(TuneCommand::ApplyAll { changes }) => {
            let request = Request::Apply {
                changes: gpu_changes(&changes, &uuid),
            };
            return several_gpus(client, request, &changes, send);
        }
        LinkCommand::Tune(TuneCommand::StartTrialAll {
            changes,
            duration_s,
        }) => {
            let request = Request::StartGroupTrial {
                trial: gputune_formats::tuning::GroupTrialRequest {
                    changes: gpu_changes(&changes, &uuid),
                    duration_s,
                    baseline_s: WINDOW_BASELINE_S,
                },
            };
            return several_gpus(client, request, &changes, send);
        }
        LinkCommand::Tune(TuneCommand::KeepTrial { gpu_index }) => (
            Some(gpu_index),
            Request::FinishTrial {
                gpu_uuid: uuid(gpu_index),
                keep: true,
            },
        ),
        LinkCommand::Tune(TuneCommand::RevertTrial { gpu_index }) => (
            Some(gpu_index),
            Request::FinishTrial {
                gpu_uuid: uuid(gpu_index),
                keep: false,
            },
        ),
        LinkCommand::Tune(TuneCommand::SetFanCurve { gpu_index, curve }) => {
            return set_fan_curve(client, gpu_index, uuid(gpu_index), curve, send);
        }
        LinkCommand::Tune(TuneCommand::SetTemperatureHold { gpu_index, hold }) => {
            return set_temperature_hold(client, gpu_index, uuid(gpu_index), hold, send);
        }
    };
    one_gpu(client, request, gpu_index, send)
}

/// Sends a request about one GPU (or none: the pace) and tells the window its answer: what
/// was applied, the trial's status, or the refusal. An error only when the service is gone.
fn one_gpu(
    client: &mut TuningClient,
    request: Request,
    gpu_index: Option<u32>,
    send: &dyn Fn(LinkEvent) -> bool,
) -> Result<(), ClientError> {
    match (client.request(request), gpu_index) {
        (Ok(Response::Applied { gpus }), Some(gpu_index)) => {
            for applied in gpus {
                send(LinkEvent::Applied {
                    gpu_index,
                    result: Ok(applied),
                });
            }
        }
        (Ok(Response::Trial { status }), _) => {
            send(LinkEvent::Trial(status));
        }
        (Ok(_), _) => {}
        (Err(ClientError::Refused(error)), Some(gpu_index)) => {
            send(LinkEvent::Applied {
                gpu_index,
                result: Err(error),
            });
        }
        (Err(ClientError::Refused(error)), None) => {
            send(LinkEvent::Notice {
                gpu_index: None,
                notice: Notice::Error(error.message),
            });
        }
        (Err(error), _) => return Err(error),
    }
    Ok(())
}

/// Follows (or, for `None`, stops) a fan curve on one GPU: through the daemon the curve is a
/// setting it keeps (it outlives the window); without one, this window's engine follows it
/// while the window is open. The window is told which, or the refusal.
fn set_fan_curve(
    client: &mut TuningClient,
    gpu_index: u32,
    gpu_uuid: String,
    curve: Option<FanCurve>,
    send: &dyn Fn(LinkEvent) -> bool,
) -> Result<(), ClientError> {
    let following = curve.is_some();
    let kept = client.is_daemon();
    let request = if kept {
        Request::SetFanCurve {
            gpu_uuid,
            curve,
            boot_default: false,
        }
    } else {
        Request::FollowFanCurve { gpu_uuid, curve }
    };
    let notice = match client.request(request) {
        Ok(_) if following && kept => Notice::Info(format!(
            "The gputune daemon keeps the fan curve on GPU {gpu_index}, also after this window closes: clear it to hand the fans back."
        )),
        Ok(_) if following => Notice::Info(format!(
            "GPU {gpu_index}'s fans follow the curve while this window is open: no gputune daemon keeps it."
        )),
        Ok(_) => Notice::Info("The fans are back to what they were before the curve.".to_string()),
        Err(ClientError::Refused(error)) => Notice::Error(error.message),
        Err(error) => return Err(error),
    };
    send(LinkEvent::Notice {
        gpu_index: Some(gpu_index),
        notice,
    });
    Ok(())
}

/// Has the daemon keep (or, for `None`, clear) a temperature hold on one GPU; without a
/// daemon the engine refuses it and says how to get one. The window is told either way.
fn set_temperature_hold(
    client: &mut TuningClient,
    gpu_index: u32,
    gpu_uuid: String,
    hold: Option<gputune_formats::temperature_hold::TemperatureHold>,
    send: &dyn Fn(LinkEvent) -> bool,
) -> Result<(), ClientError> {
    let request = Request::SetTemperatureHold {
        gpu_uuid,
        hold,
        boot_default: false,
    };
    let notice = match (client.request(request), hold) {
        (Ok(_), Some(hold)) => Notice::Info(format!(
            "The gputune daemon holds GPU {gpu_index} {}, also after this window closes: clear the hold to put the power limit back.",
            hold.describe()
        )),
        (Ok(_), None) => Notice::Info(format!(
            "GPU {gpu_index}'s temperature hold is cleared: its power limit goes back to what it was before."
        )),
        (Err(ClientError::Refused(error)), _) => Notice::Error(error.message),
        (Err(error), _) => return Err(error),
    };
    send(LinkEvent::Notice {
        gpu_index: Some(gpu_index),
        notice,
    });
    Ok(())
}

fn gpu_changes(
    changes: &[(u32, Vec<Setting>)],
    uuid: &dyn Fn(u32) -> String,
) -> Vec<gputune_formats::tuning::GpuChange> {
    changes
        .iter()
        .map(|(gpu_index, settings)| gputune_formats::tuning::GpuChange {
            gpu_uuid: uuid(*gpu_index),
            settings: settings.clone(),
        })
        .collect()
}

/// Sends a request over several GPUs and tells each card's part; a refusal is told on every
/// card named (nothing changed on any). An error only when the service is gone.
fn several_gpus(
    client: &mut TuningClient,
    request: Request,
    changes: &[(u32, Vec<Setting>)],
    send: &dyn Fn(LinkEvent) -> bool,
) -> Result<(), ClientError> {
    match client.request(request) {
        Ok(Response::Applied { gpus }) => {
            for applied in gpus {
                send(LinkEvent::Applied {
                    gpu_index: applied.gpu_index,
                    result: Ok(applied),
                });
            }
        }
        Ok(Response::Trials { statuses }) => {
            for status in statuses {
                send(LinkEvent::Trial(Box::new(status)));
            }
        }
        Ok(_) => {}
        Err(ClientError::Refused(error)) => {
            for (gpu_index, _) in changes {
                send(LinkEvent::Applied {
                    gpu_index: *gpu_index,
                    result: Err(error.clone()),
                });
            }
        }
        Err(error) => return Err(error),
    }
    Ok(())
}
