//! The box check's hold on its cards: one engine session of purpose `box_check` (which the
//! engine journals), a clock cap on every card when one is being proven, and the runs' setup.

use super::Held;
use crate::service::client::TuningClient;
use crate::stability::rounds::CheckOptions;
use gputune_formats::card::Setting;
use gputune_formats::protocol::{Request, Response};
use gputune_formats::reports::stability::LoadShape;
use gputune_formats::tuning::{GpuChange, GpuInfo, SessionPurpose, SessionRequest, TuneErrorKind};

/// Holds the cards in one engine session of purpose `box_check` (a clock cap on each when
/// `cap_mhz` names one); true when the engine holds (and so journals) it. A user who may not
/// change settings still checks the cards as they are, without a session or a journal.
pub(super) fn hold(
    client: &mut TuningClient,
    held: &mut Held,
    gpus: &[GpuInfo],
    cap_mhz: Option<u32>,
) -> Result<bool, String> {
    let changes: Vec<GpuChange> = gpus
        .iter()
        .map(|gpu| GpuChange {
            gpu_uuid: gpu.identity.uuid.clone(),
            settings: cap_mhz
                .map(|cap| cap_setting(gpu, cap))
                .into_iter()
                .collect(),
        })
        .collect();
    let request = match held.session() {
        Some(session) => Request::SessionApply { session, changes },
        None => Request::StartSession {
            session: SessionRequest {
                purpose: SessionPurpose::BoxCheck,
                changes,
                fan_curves: Vec::new(),
                job_pid: None,
                job: None,
            },
        },
    };
    match client.request(request) {
        Ok(Response::SessionStarted(started)) => {
            held.started(started.session);
            Ok(true)
        }
        Ok(Response::Applied { .. }) => Ok(true),
        Ok(other) => Err(format!(
            "The service answered {other:?} to the box check's session."
        )),
        Err(error)
            if cap_mhz.is_none()
                && error
                    .refusal()
                    .is_some_and(|refusal| refusal.kind == TuneErrorKind::NotAllowed) =>
        {
            Ok(false)
        }
        Err(error) => Err(format!(
            "The box check could not hold the cards ({error}); it did not start, nothing was measured."
        )),
    }
}

/// A box check's runs: the GEMM only (the load the supply feels; the FMA chains and the VRAM
/// patterns are the single-card check's), so its device sets up little else.
pub(super) fn box_options(duration_s: f64) -> CheckOptions {
    let mut options = CheckOptions::clamped(duration_s, LoadShape::Full);
    options.setup.fma_threads = 1 << 16;
    options.setup.fma_steps = 1;
    options.setup.fma_seeds = 64;
    options.setup.vram_max_bytes = Some(64 << 20);
    options
}

/// A clock lock from the card's lowest clock to `cap_mhz`: the card still idles low.
fn cap_setting(gpu: &GpuInfo, cap_mhz: u32) -> Setting {
    let lowest = gpu
        .constraints
        .gpu_clock_range
        .map_or(210, |range| range.min_mhz)
        .min(cap_mhz);
    Setting::LockGpuClocks {
        min_mhz: lowest,
        max_mhz: cap_mhz,
    }
}
