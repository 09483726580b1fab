//! A box check's ending: the report of the main check, the reruns that find a clock cap, the
//! session ended (the cards put back) and the verdict's sentence.

use super::recommend::{cap_after_trip, first_cap, next_cap};
use super::schedule::TimedStep;
use super::{BoxCard, BoxCheck, Rerun, SHORTEST_RERUN_S, hold};
use crate::service::client::TuningClient;
use crate::stability::report::check_report;
use crate::stability::run::{CheckRun, SettingsSeen};
use gputune_formats::profile::Verdict;
use gputune_formats::reports::box_check::{
    BOX_CHECK_REPORT_FORMAT, BoxCheckReport, BoxFailure, BoxRecommendation, watts_text,
};
use gputune_formats::reports::stability::{CheckReport, Ending};

impl BoxCheck {
    /// Every card's run has ended: the main check's report, or a rerun's outcome.
    pub(super) fn conclude(&mut self, client: &mut TuningClient) {
        match self.rerun.take() {
            None => self.conclude_check(client),
            Some(rerun) => self.conclude_rerun(client, rerun),
        }
    }

    fn conclude_check(&mut self, client: &mut TuningClient) {
        let failure = self.first_failure();
        let failing_step = self.failing_step();
        let failing_clock = self.failing_clock_mhz();
        let cards: Vec<CheckReport> = self
            .cards
            .iter()
            .filter_map(|card| {
                let result = card.run.result()?.clone();
                Some(check_report(
                    &card.gpu,
                    card.settings_text.clone(),
                    &self.options,
                    result,
                    (Vec::new(), true),
                ))
            })
            .collect();
        let verdict = if failure.is_some() {
            Verdict::Unstable
        } else if cards.iter().any(|card| card.verdict == Verdict::NotRun) {
            Verdict::NotRun
        } else if cards.iter().any(|card| card.verdict == Verdict::Stopped) {
            Verdict::Stopped
        } else {
            Verdict::Stable
        };
        let box_peak = self
            .tallies
            .iter()
            .filter_map(|tally| tally.box_power_peak_w())
            .reduce(f64::max);
        let recommendation = failure
            .as_ref()
            .filter(|failure| failure.all_cards_lost)
            .and_then(|_| cap_after_trip(failing_clock, box_peak.or(self.box_power_w)));
        let steps = self.step_reports();
        self.report = Some(BoxCheckReport {
            format_version: BOX_CHECK_REPORT_FORMAT,
            verdict,
            sentence: String::new(),
            clock_cap_mhz: self.clock_cap_mhz,
            steps,
            cards,
            first_failure: failure.clone(),
            recommendation,
            put_back: Vec::new(),
            put_back_complete: true,
            journaled: self.journaled,
            ended_at_ms: crate::clock::wall_clock_ms(),
            gputune_version: env!("CARGO_PKG_VERSION").to_string(),
        });
        if let (Some(failure), Some(step), Some(clock)) = (failure, failing_step, failing_clock)
            && !failure.all_cards_lost
            && self.find_cap
            && let Some(cap) = first_cap(clock, self.clock_cap_mhz)
        {
            let rerun = Rerun {
                step,
                cap_mhz: cap,
                done: 0,
                tried: Vec::new(),
            };
            if self.begin_rerun(client, rerun) {
                return;
            }
        }
        self.finish(client);
    }

    fn conclude_rerun(&mut self, client: &mut TuningClient, mut rerun: Rerun) {
        rerun.done += 1;
        let failure = self.first_failure();
        let completed = self.cards.iter().all(|card| {
            card.run
                .result()
                .is_some_and(|result| result.ending == Ending::Completed)
        });
        let step_text = rerun.step.step.describe();
        match failure {
            None if completed => {
                let tried = if rerun.tried.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", rerun.tried.join("; "))
                };
                self.set_recommendation(BoxRecommendation {
                    clock_cap_mhz: rerun.cap_mhz,
                    confirmed: true,
                    how: format!(
                        "the failing step ({step_text}) ran again on every card at lower clock caps, {} MHz lower each time{tried}: at {} MHz every card passed it.",
                        super::recommend::CAP_STEP_MHZ,
                        rerun.cap_mhz
                    ),
                });
            }
            Some(failure) => {
                rerun.tried.push(format!(
                    "at {} MHz GPU {} failed: {}",
                    rerun.cap_mhz, failure.gpu_index, failure.finding
                ));
                if !failure.all_cards_lost
                    && let Some(cap) = next_cap(rerun.cap_mhz, rerun.done)
                {
                    rerun.cap_mhz = cap;
                    if self.begin_rerun(client, rerun) {
                        return;
                    }
                } else {
                    self.say_no_cap(&step_text, &rerun);
                }
            }
            None => {}
        }
        self.finish(client);
    }

    fn say_no_cap(&mut self, step_text: &str, rerun: &Rerun) {
        if let Some(report) = &mut self.report {
            report.sentence = format!(
                "No clock cap was found: the failing step ({step_text}) failed again {}.",
                rerun.tried.join("; ")
            );
        }
    }

    fn set_recommendation(&mut self, recommendation: BoxRecommendation) {
        if let Some(report) = &mut self.report {
            report.recommendation = Some(recommendation);
        }
    }

    /// Runs `rerun.step` again on every card at `rerun.cap_mhz`; false when it cannot (a
    /// worker hung, the cap refused), and the check ends.
    fn begin_rerun(&mut self, client: &mut TuningClient, rerun: Rerun) -> bool {
        let cards = std::mem::take(&mut self.cards);
        let gpus: Vec<_> = cards.iter().map(|card| card.gpu.clone()).collect();
        let seconds = rerun.step.seconds.max(SHORTEST_RERUN_S);
        let options = super::box_options(seconds);
        let mut next = Vec::new();
        for card in cards {
            let (gpu, settings_text) = (card.gpu, card.settings_text);
            let Some((worker, prepared)) = card.run.into_worker() else {
                return false;
            };
            let mut run = CheckRun::start_in_phase(worker, options, prepared);
            run.take_settings(SettingsSeen {
                locked_max_mhz: Some(rerun.cap_mhz),
                ..SettingsSeen::default()
            });
            next.push(BoxCard {
                gpu,
                settings_text,
                run,
            });
        }
        if let Err(message) = hold(client, &mut self.held, &gpus, Some(rerun.cap_mhz)) {
            if let Some(report) = &mut self.report {
                report.sentence = format!("No clock cap was tried: {message}");
            }
            return false;
        }
        self.cards = next;
        self.rerun = Some(Rerun {
            step: TimedStep {
                start_s: 0.0,
                seconds,
                ..rerun.step
            },
            ..rerun
        });
        self.schedule = None;
        self.failure = None;
        self.session_ended = None;
        self.tallies.clear();
        true
    }

    /// Ends the session (the cards put back) and words the verdict.
    fn finish(&mut self, client: &mut TuningClient) {
        self.held.end(client);
        let (put_back, complete) = self.held.take_put_back();
        if let Some(report) = &mut self.report {
            report.put_back = put_back;
            report.put_back_complete = complete;
            let said = std::mem::take(&mut report.sentence);
            report.sentence = sentence(report);
            if !said.is_empty() {
                report.sentence = format!("{} {said}", report.sentence);
            }
        }
        self.done = true;
    }

    fn failing_step(&self) -> Option<TimedStep> {
        let failure = self.failure.as_ref()?;
        Some(*self.schedule.as_ref()?.steps().get(failure.step_index?)?)
    }

    /// The highest clock any card reached in the failing step (else in the whole check).
    fn failing_clock_mhz(&self) -> Option<u32> {
        let step = self.failure.as_ref().and_then(|failure| failure.step_index);
        step.and_then(|index| self.tallies.get(index)?.clock_max_mhz())
            .or_else(|| {
                self.tallies
                    .iter()
                    .filter_map(|tally| tally.clock_max_mhz())
                    .max()
            })
            .or_else(|| {
                self.cards
                    .iter()
                    .filter_map(|card| card.run.watched().clock_max_mhz)
                    .max()
            })
    }

    fn step_reports(&self) -> Vec<gputune_formats::reports::box_check::StepReport> {
        let indices: Vec<u32> = self
            .cards
            .iter()
            .map(|card| card.gpu.identity.index)
            .collect();
        let edges = self.edges();
        self.tallies
            .iter()
            .enumerate()
            .map(|(index, tally)| tally.report(index, &indices, &edges))
            .collect()
    }
}

/// "The box passed in phase: …" or "GPU 3 failed first, …".
pub fn sentence(report: &BoxCheckReport) -> String {
    let cards = report.cards.len();
    let peak = report
        .steps
        .iter()
        .filter_map(|step| step.box_power_peak_w)
        .reduce(f64::max)
        .map(|watts| format!(", {} peak box power", watts_text(watts)))
        .unwrap_or_default();
    let spread = report
        .steps
        .iter()
        .filter_map(|step| step.edge_spread_max_ms)
        .reduce(f64::max)
        .map(|ms| format!(", pulse edges within {ms:.1} ms across the cards"))
        .unwrap_or_default();
    let cap = report
        .clock_cap_mhz
        .map(|cap| format!(" at a {cap} MHz clock cap"))
        .unwrap_or_default();
    let out_of_phase = report.out_of_phase();
    let mut text = match (&report.first_failure, report.verdict) {
        (Some(failure), _) => failure_sentence(failure, &cap),
        (None, Verdict::Stable) if out_of_phase.is_empty() => format!(
            "The box is stable in phase{cap}: {cards} cards, {} steps{peak}{spread}.",
            report.steps.len()
        ),
        (None, Verdict::Stable) => format!(
            "Every card computed right{cap} ({cards} cards, {} steps{peak}), but the pulses were not in phase: {}. This machine could not line the cards' bursts up (its CPUs busy with other work?), so the supply's worst case was not tested: run it again with nothing else running.",
            report.steps.len(),
            out_of_phase.join("; ")
        ),
        (None, Verdict::Stopped) => format!(
            "The box check was stopped before its end{cap}; what ran was clean, but it is not a verdict{peak}."
        ),
        (None, _) => {
            "The box check could not run on every card: nothing was concluded.".to_string()
        }
    };
    if let Some(recommendation) = &report.recommendation {
        text.push_str(&format!(
            " Try a clock cap of {} MHz on every card ({}).",
            recommendation.clock_cap_mhz, recommendation.how
        ));
    }
    if !report.journaled {
        text.push_str(" (No engine session held the cards, so a machine going down would not be said at the next start.)");
    }
    text
}

fn failure_sentence(failure: &BoxFailure, cap: &str) -> String {
    let step = failure
        .step
        .map(|step| format!(" during {}", step.describe()))
        .unwrap_or_else(|| " before the load began".to_string());
    let at = gputune_formats::units::duration_s(failure.at_s);
    if failure.all_cards_lost {
        format!(
            "Every card failed at once {at} into the box check{step}{cap} (GPU {} first: {}): the machine or its power supply most likely gave out.",
            failure.gpu_index, failure.finding
        )
    } else {
        format!(
            "GPU {} failed first, {at} into the box check{step}{cap}: {}.",
            failure.gpu_index, failure.finding
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The golden report made stable: its 10 ms pulses' edges `spread_ms` apart at worst.
    fn stable_with_spread(spread_ms: f64) -> BoxCheckReport {
        let golden = include_str!("../../../../../tests/data/formats/reports/box-check.json");
        let mut report: BoxCheckReport = match serde_json::from_str(golden) {
            Ok(report) => report,
            Err(error) => panic!("the golden box check reads: {error}"),
        };
        report.verdict = Verdict::Stable;
        report.first_failure = None;
        report.recommendation = None;
        report.steps[0].edge_spread_max_ms = Some(spread_ms);
        report
    }

    #[test]
    fn stable_in_phase_only_when_the_edges_lined_up_within_a_quarter_burst() {
        let lined_up = sentence(&stable_with_spread(2.1));
        assert!(
            lined_up.starts_with("The box is stable in phase: "),
            "{lined_up}"
        );
        let apart = sentence(&stable_with_spread(41.6));
        assert!(!apart.contains("stable in phase"), "{apart}");
        assert!(
            apart.contains("the pulses were not in phase: 10 ms pulses every 20 ms (50 % duty): edges up to 41.6 ms apart")
                && apart.contains("the supply's worst case was not tested"),
            "{apart}"
        );
        let mut never = stable_with_spread(0.0);
        never.steps[0].edges = 0;
        assert!(
            sentence(&never).contains("no edge began on every card at once"),
            "{}",
            sentence(&never)
        );
    }
}
