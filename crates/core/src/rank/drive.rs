//! The ranking driven to its end for a caller that may block (the CLI, the window's link
//! thread): the service's events in, a tick every 20 ms, progress through a callback, a stop
//! asked by the caller.

use std::time::{Duration, Instant};

use gputune_formats::protocol::{Request, Response};
use gputune_formats::reports::rank::RankReport;

use super::engine::{OpenDevice, RankProgress, RankTarget, Ranking};
use super::options::RankOptions;
use crate::service::client::TuningClient;

/// The longest wait for the service's next event between two ticks.
const TICK: Duration = Duration::from_millis(20);

/// Starts and drives a ranking of `gpu_indices` to its report. The client must be subscribed
/// to readings (twice a second is enough). `on_progress` is called about once a second;
/// `should_stop` at every tick (true: stop, and report what was measured). Err: the ranking
/// was refused before anything was measured (a busy card, different settings, no such GPU).
pub fn rank_cards(
    client: &mut TuningClient,
    gpu_indices: &[u32],
    options: RankOptions,
    open: OpenDevice<'_>,
    on_progress: &mut dyn FnMut(&RankProgress),
    should_stop: &dyn Fn() -> bool,
) -> Result<RankReport, String> {
    let targets = targets(client, gpu_indices)?;
    let ranking = Ranking::start(client, &targets, options, open)?;
    Ok(drive(client, ranking, on_progress, should_stop))
}

/// The service's state of each card in `gpu_indices`, with the processes its latest readings
/// list.
pub fn targets(client: &mut TuningClient, gpu_indices: &[u32]) -> Result<Vec<RankTarget>, String> {
    let snapshot = match client.request(Request::Snapshot) {
        Ok(Response::Snapshot(snapshot)) => snapshot,
        Ok(other) => return Err(format!("The service answered {other:?} to a snapshot.")),
        Err(error) => return Err(format!("The tuning service could not be asked: {error}")),
    };
    gpu_indices
        .iter()
        .map(|&index| {
            let position = index as usize;
            let (Some(gpu), Some(tuning)) =
                (snapshot.gpus.get(position), snapshot.tunings.get(position))
            else {
                return Err(format!("There is no GPU {index} (see `gputune status`)."));
            };
            let processes = snapshot
                .latest
                .get(position)
                .and_then(|reading| reading.as_ref()?.as_ref().ok()?.processes.clone());
            Ok(RankTarget {
                gpu: gpu.clone(),
                tuning: tuning.clone(),
                processes,
            })
        })
        .collect()
}

/// Drives a started ranking to its report.
pub fn drive(
    client: &mut TuningClient,
    mut ranking: Ranking,
    on_progress: &mut dyn FnMut(&RankProgress),
    should_stop: &dyn Fn() -> bool,
) -> RankReport {
    let mut last_progress = Instant::now();
    loop {
        match client.next_event(TICK) {
            Ok(Some(event)) => ranking.take_event(&event),
            Ok(None) => {}
            Err(error) => ranking.stop(client, &format!("the tuning service went away: {error}")),
        }
        if should_stop() {
            ranking.stop(client, "stopped by Ctrl-C or SIGTERM");
        }
        if let Some(report) = ranking.tick(client) {
            return report.clone();
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            on_progress(&ranking.progress());
        }
    }
}
