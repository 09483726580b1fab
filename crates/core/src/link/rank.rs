//! The window's "Rank the cards": the same [`Ranking`] `gputune rank` runs, started over the
//! link's connection and driven by box_runs.rs.

use crate::link::box_runs::{BoxEngine, BoxProgress, BoxRunNews, BoxRunView, ProgressUnit};
use crate::rank::{RankOptions, Ranking};
use crate::service::client::TuningClient;
use gputune_formats::protocol::Event;
use gputune_formats::reports::rank::RankReport;

/// A ranking the window started.
pub struct RankRun {
    ranking: Ranking,
}

impl RankRun {
    /// Refused (busy cards, different settings, no device) before anything is measured.
    pub fn start(
        client: &mut TuningClient,
        gpu_indices: &[u32],
        together_s: f64,
    ) -> Result<RankRun, String> {
        let options = RankOptions::new(together_s, false)?;
        let targets = crate::rank::drive::targets(client, gpu_indices)?;
        let open = |identity: &gputune_formats::card::GpuIdentity| {
            crate::stability::device::open_for(identity)
        };
        let ranking = Ranking::start(client, &targets, options, &open)?;
        Ok(RankRun { ranking })
    }
}

impl BoxEngine for RankRun {
    type Report = RankReport;

    fn take_event(&mut self, event: &Event) {
        self.ranking.take_event(event);
    }

    fn tick(&mut self, client: &mut TuningClient) -> bool {
        self.ranking.tick(client).is_some()
    }

    fn stop(&mut self, client: &mut TuningClient, reason: &str) {
        self.ranking.stop(client, reason);
    }

    fn progress(&self) -> BoxProgress {
        let progress = self.ranking.progress();
        BoxProgress {
            phase: progress.phase,
            done: progress.phase_elapsed_s,
            of: progress.phase_s,
            unit: ProgressUnit::Seconds,
            left_s: Some(progress.left_s),
            cards: progress.cards,
        }
    }

    fn report(&self) -> Option<&RankReport> {
        self.ranking.report()
    }

    fn news(view: BoxRunView<RankReport>) -> BoxRunNews {
        BoxRunNews::Rank(view)
    }
}
