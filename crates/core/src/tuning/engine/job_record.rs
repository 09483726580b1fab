//! Energy and cost per job: a job session's cards keep running figures (`job_energy::tally`, no
//! readings kept), and whatever ends the session (its end, its client gone, shutdown, a lost
//! GPU, an Xid: every way goes through `end_session_now`) makes its record, which goes into the
//! session's report and to the service, which files it (`job_energy::store`).

use super::Engine;
use super::state::Session;
use crate::job_energy::cost::Price;
use crate::job_energy::tally::CardTally;
use crate::tuning::in_force::ControlsInForce;
use gputune_formats::card::Telemetry;
use gputune_formats::jobs::{JOB_RECORD_FORMAT, JOULES_PER_KWH, JobRecord};
use gputune_formats::tuning::SessionId;

impl Engine {
    /// Sets the price job records are costed at (`None`: no cost in them).
    pub fn set_job_price(&mut self, price: Option<Price>) {
        self.job_price = price;
    }

    /// The records of the jobs ended since the last call.
    pub fn take_job_records(&mut self) -> Vec<JobRecord> {
        std::mem::take(&mut self.ended_jobs)
    }

    /// Files `reading` in session `id`'s tally on GPU `index` when it is a job's; false for
    /// any other session (which keeps its readings).
    pub(super) fn tally_job(&mut self, id: SessionId, index: u32, reading: &Telemetry) -> bool {
        let Some(session) = self.sessions.get_mut(&id) else {
            return false;
        };
        if session.job.is_none() {
            return false;
        }
        if let Some(part) = session.gpus.get_mut(&index) {
            part.tally
                .get_or_insert_with(|| CardTally::starting_at(part.energy_at_start_mj))
                .observe(reading);
        }
        true
    }

    /// The record of job session `id`, ending now with `message`; `None` for any other
    /// session. Called before the put-back, so the settings it held are still in force.
    pub(super) fn job_record(
        &mut self,
        id: SessionId,
        session: &Session,
        message: &str,
    ) -> Option<JobRecord> {
        let job = session.job.clone()?;
        let gpus: Vec<_> = session
            .gpus
            .iter()
            .map(|(&index, part)| {
                let gpu = self.gpu(index);
                let settings_held = part
                    .restore
                    .keys()
                    .filter_map(|control| gpu.in_force.restoring(*control))
                    .map(|(setting, _)| setting)
                    .collect();
                part.tally
                    .clone()
                    .unwrap_or_else(|| CardTally::starting_at(part.energy_at_start_mj))
                    .to_job_gpu(
                        index,
                        &gpu.info.identity.uuid,
                        &gpu.info.identity.name,
                        settings_held,
                    )
            })
            .collect();
        let energy_j: f64 = gpus.iter().map(|gpu| gpu.energy_j).sum();
        let record = JobRecord {
            format_version: JOB_RECORD_FORMAT,
            job,
            node: crate::metrics::hostname(),
            session: id,
            started_at_ms: session.started_at_ms,
            ended_at_ms: self.clock.now_ms(),
            ended: message.to_string(),
            energy_estimated: gpus.iter().any(|gpu| gpu.energy_estimated),
            energy_kwh: energy_j / JOULES_PER_KWH,
            energy_j,
            gpus,
            cost: self
                .job_price
                .as_ref()
                .map(|price| price.job_cost(energy_j)),
        };
        self.ended_jobs.push(record.clone());
        Some(record)
    }
}
