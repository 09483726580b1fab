//! The loop that drives a box check to its end, for the CLI and the window's link thread.

use std::time::{Duration, Instant};

use super::{BoxCheck, BoxPlan, BoxProgress};
use crate::service::client::TuningClient;
use crate::stability::compute::ComputeDevice;
use gputune_formats::reports::box_check::BoxCheckReport;

/// The loop's tick: well inside the 10 ms gap of the shortest pulses.
pub const TICK: Duration = Duration::from_millis(2);

/// Runs a box check to its end on `client` (subscribed to readings already): the loop the CLI
/// and the window's link thread share. `stop` is asked every tick (true: stop, put back);
/// `on_progress` hears where it stands about once a second.
pub fn run_box_check(
    client: &mut TuningClient,
    plan: &BoxPlan,
    devices: Vec<Box<dyn ComputeDevice>>,
    stop: &mut dyn FnMut() -> Option<String>,
    on_progress: &mut dyn FnMut(&BoxProgress),
) -> Result<BoxCheckReport, String> {
    let mut check = BoxCheck::start(client, plan, devices)?;
    let mut last_progress = Instant::now();
    let mut stopped = false;
    loop {
        match client.next_event(TICK) {
            Ok(Some(event)) => check.take_event(&event),
            Ok(None) => {}
            Err(error) => check.stop(client, &format!("the tuning service went away: {error}")),
        }
        if !stopped && let Some(reason) = stop() {
            stopped = true;
            check.stop(client, &reason);
        }
        if let Some(report) = check.tick(client) {
            return Ok(report.clone());
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            on_progress(&check.progress());
        }
    }
}
