//! The window's "Check the whole box": the same [`BoxCheck`] `gputune stability --together`
//! runs (every card at once, in phase; a clock cap found when a step fails), started over the
//! link's connection and driven by box_runs.rs, which ticks it every few milliseconds while it
//! runs (the pulses' shared edges are handed out at its ticks).

use crate::link::box_runs::{BoxEngine, BoxProgress, BoxRunNews, BoxRunView, ProgressUnit};
use crate::service::client::TuningClient;
use crate::stability::together::{BoxCheck, BoxPlan};
use gputune_formats::card::GpuProcess;
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::reports::box_check::BoxCheckReport;

/// A box check the window started.
pub struct BoxCheckRun {
    check: BoxCheck,
}

impl BoxCheckRun {
    /// Refused (a busy card, no device, the session refused) before any load. `processes`:
    /// each card's, by index, as the link's last readings listed them.
    pub fn start(
        client: &mut TuningClient,
        gpu_indices: &[u32],
        processes: &[Option<Vec<GpuProcess>>],
        duration_s: f64,
        clock_cap_mhz: Option<u32>,
    ) -> Result<BoxCheckRun, String> {
        let snapshot = match client.request(Request::Snapshot) {
            Ok(Response::Snapshot(snapshot)) => snapshot,
            Ok(other) => return Err(format!("The service answered {other:?} to a snapshot.")),
            Err(error) => return Err(format!("The tuning service could not be asked: {error}")),
        };
        let plan = BoxPlan::of(
            &snapshot,
            gpu_indices,
            processes,
            false,
            duration_s,
            clock_cap_mhz,
        )?;
        let identities: Vec<_> = plan.gpus.iter().map(|gpu| gpu.identity.clone()).collect();
        let devices = crate::stability::device::open_for_box(&identities).map_err(|error| {
            format!("{error} The box check did not start; nothing was measured.")
        })?;
        let check = BoxCheck::start(client, &plan, devices)?;
        Ok(BoxCheckRun { check })
    }
}

impl BoxEngine for BoxCheckRun {
    type Report = BoxCheckReport;

    fn take_event(&mut self, event: &Event) {
        self.check.take_event(event);
    }

    fn tick(&mut self, client: &mut TuningClient) -> bool {
        self.check.tick(client).is_some()
    }

    fn stop(&mut self, client: &mut TuningClient, reason: &str) {
        self.check.stop(client, reason);
    }

    fn progress(&self) -> BoxProgress {
        let progress = self.check.progress();
        let step = progress.step_index.map_or_else(String::new, |index| {
            format!(" (step {} of {})", index + 1, progress.steps)
        });
        let power = progress
            .box_power_w
            .map_or_else(String::new, |watts| format!(", the box at {watts:.0} W"));
        BoxProgress {
            phase: format!("{}{step}{power}", progress.stage),
            done: progress.elapsed_s,
            of: progress.duration_s,
            unit: ProgressUnit::Seconds,
            left_s: Some((progress.duration_s - progress.elapsed_s).max(0.0)),
            cards: progress
                .cards
                .iter()
                .map(|card| {
                    format!(
                        "GPU {}: {}, {} results checked, {} wrong, {}",
                        card.gpu_index,
                        card.activity,
                        gputune_formats::units::large_count(card.results),
                        card.wrong,
                        card.readings
                    )
                })
                .collect(),
        }
    }

    fn report(&self) -> Option<&BoxCheckReport> {
        self.check.report()
    }

    fn news(view: BoxRunView<BoxCheckReport>) -> BoxRunNews {
        BoxRunNews::BoxCheck(view)
    }
}
