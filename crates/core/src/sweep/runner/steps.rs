//! The sweep's steps against the engine: each setting started (the first in a new session,
//! the next applied in it, a refused one skipped), measured at its end, marked unstable after
//! an Xid, and the end: the session ended, the card put back, the outcome and its
//! recommendation.

use super::{State, Sweep, SweepUpdate, seconds_ms};
use crate::device::XidMeaning;
use crate::service::client::{ClientError, TuningClient};
use crate::sweep::advice::card_advice;
use crate::sweep::measure::StepMeasurement;
use crate::sweep::objective::{flag_noisy_steps, recommend_in};
use crate::tuning::engine::report_lines;
use gputune_formats::protocol::{Request, Response};
use gputune_formats::reports::sweep::{SweepEnd, SweepOutcome};
use gputune_formats::reports::sweep_box::SweepCard;
use gputune_formats::reports::sweep_step::{MeasuredBy, StepResult};
use gputune_formats::tuning::{GpuChange, SessionPurpose, SessionReport, SessionRequest};

impl Sweep {
    pub(super) fn start_step(
        &mut self,
        client: &mut TuningClient,
        index: usize,
        new_session: bool,
    ) {
        let Some(step) = self.plan.get(index).cloned() else {
            self.finish(client, SweepEnd::Completed);
            return;
        };
        // Every card its own step's settings, in one request: one session holds them all.
        let changes: Vec<GpuChange> = self
            .cards
            .iter()
            .filter_map(|card| {
                Some(GpuChange {
                    gpu_uuid: card.gpu.identity.uuid.clone(),
                    settings: card.plan.get(index)?.settings.clone(),
                })
            })
            .collect();
        let request = match self.session {
            Some(session) if !new_session => Request::SessionApply { session, changes },
            _ => Request::StartSession {
                session: SessionRequest {
                    purpose: SessionPurpose::Sweep,
                    changes,
                    fan_curves: Vec::new(),
                    job_pid: self.job_pid,
                    job: None,
                },
            },
        };
        match client.request(request) {
            Ok(Response::SessionStarted(started)) => self.session = Some(started.session),
            Ok(Response::Applied { .. }) => {}
            Ok(other) => {
                let reason = format!("The service answered {other:?} to a sweep step.");
                self.finish(client, SweepEnd::Failed { reason });
                return;
            }
            Err(ClientError::Refused(error)) if self.session.is_some() || index > 0 => {
                // This setting cannot be run; the next may.
                let result = StepResult::unmeasured(&step, format!("refused: {}", error.message));
                self.updates.push(SweepUpdate::Note(format!(
                    "{} was refused ({}); going on with the next setting.",
                    step.label, error.message
                )));
                self.results.push(result);
                self.start_step(client, index + 1, self.session.is_none());
                return;
            }
            Err(error) => {
                let reason = format!("The sweep could not start: {error}");
                self.finish(client, SweepEnd::Failed { reason });
                return;
            }
        }
        let now_ms = self.clock.now_ms();
        self.measurement =
            StepMeasurement::new(now_ms + seconds_ms(self.timing.warmup_s), self.cards.len());
        self.state = State::Step {
            index,
            started_ms: now_ms,
        };
        self.updates.push(SweepUpdate::StepStarted {
            index,
            count: self.plan.len(),
            label: step.label,
        });
    }

    /// The progress unit the first step's readings show, if any.
    pub(super) fn progress_by(&self) -> Option<MeasuredBy> {
        self.measurement
            .dominant_unit()
            .map(|(source, unit)| MeasuredBy::Progress { source, unit })
    }

    pub(super) fn end_step(&mut self, index: usize, now_ms: u64) {
        if self.measured_by.is_none() {
            let by = self.progress_by().unwrap_or(MeasuredBy::Proxy);
            if by == MeasuredBy::Proxy {
                self.updates.push(SweepUpdate::Note(format!(
                    "No progress could be read from the job during the first setting, so the sweep measures {}.",
                    by.describe()
                )));
            }
            self.measured_by = Some(by);
        }
        let by = self.measured_by.clone().unwrap_or(MeasuredBy::Proxy);
        let result = self
            .measurement
            .result(&self.plan[index], now_ms, &by, &self.gpu_indices());
        if result.throughput.is_none() {
            self.updates.push(SweepUpdate::Note(format!(
                "No throughput was measured at {}: the job printed no {} progress in its {:.0} measured seconds (use a longer --step-s).",
                result.step.label,
                by.unit_name(),
                result.measured_s
            )));
        }
        self.updates
            .push(SweepUpdate::StepMeasured(Box::new(result.clone())));
        self.results.push(result);
    }

    pub(super) fn ended_by_engine(&mut self, report: &SessionReport) {
        let State::Step { index, .. } = self.state else {
            return;
        };
        match report.critical_event {
            Some(event) => {
                let now_ms = self.clock.now_ms();
                let by = self.measured_by.clone().unwrap_or(MeasuredBy::Proxy);
                let mut result =
                    self.measurement
                        .result(&self.plan[index], now_ms, &by, &self.gpu_indices());
                let why = format!("Xid {} ({})", event.xid, event.meaning());
                result.unstable = Some(why.clone());
                let put_back = if self.cards.len() > 1 {
                    "every card was put back"
                } else {
                    "the card was put back"
                };
                self.updates.push(SweepUpdate::Note(format!(
                    "GPU {} reported {why} at {}: {put_back} at once and the setting is marked unstable.",
                    event.gpu_index, result.step.label
                )));
                self.updates
                    .push(SweepUpdate::StepMeasured(Box::new(result.clone())));
                self.results.push(result);
                self.state = State::AfterCriticalError { next: index + 1 };
            }
            None => {
                let restored = report_lines(report);
                self.finish_with(
                    SweepEnd::Failed {
                        reason: format!("The tuning engine ended the sweep: {}", report.message),
                    },
                    restored,
                    report.is_complete(),
                );
            }
        }
    }

    pub(super) fn finish(&mut self, client: &mut TuningClient, ended: SweepEnd) {
        let (restored, complete) = match self.session.take() {
            Some(session) => match client.request(Request::EndSession {
                session,
                keep: false,
            }) {
                Ok(Response::SessionEnded { report }) => {
                    (report_lines(&report), report.is_complete())
                }
                Ok(_) => (Vec::new(), true),
                Err(error) => (
                    vec![format!(
                        "The session could not be ended ({error}); the daemon puts the card back when the connection closes."
                    )],
                    true,
                ),
            },
            None => (Vec::new(), true),
        };
        self.finish_with(ended, restored, complete);
    }

    pub(super) fn finish_with(
        &mut self,
        ended: SweepEnd,
        restored: Vec<String>,
        restore_complete: bool,
    ) {
        self.state = State::Finished;
        flag_noisy_steps(&mut self.results);
        let unit = self
            .measured_by
            .as_ref()
            .map_or_else(|| "unit of work".to_string(), MeasuredBy::unit_name);
        let recommendation = recommend_in(&self.results, self.objective, &unit);
        let card_advice = recommendation
            .as_ref()
            .map(|chosen| card_advice(&self.results, chosen.step_index))
            .unwrap_or_default();
        let first = &self.cards[0];
        let cards = if self.cards.len() > 1 {
            self.cards
                .iter()
                .map(|card| SweepCard {
                    gpu_index: card.index,
                    gpu_name: card.gpu.identity.name.clone(),
                    gpu_uuid: card.gpu.identity.uuid.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let outcome = SweepOutcome {
            gpu_index: first.index,
            gpu_name: first.gpu.identity.name.clone(),
            gpu_uuid: first.gpu.identity.uuid.clone(),
            objective: self.objective,
            measured_by: self.measured_by.clone(),
            results: self.results.clone(),
            recommendation,
            ended,
            restored,
            restore_complete,
            duration_s: self.clock.now_ms() as f64 / 1000.0,
            cards,
            card_advice,
        };
        self.updates
            .push(SweepUpdate::Finished(Box::new(outcome.clone())));
        self.outcome = Some(outcome);
    }
}
