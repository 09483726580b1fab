//! The box check's one schedule, from one clock: every card begins and ends each pulse at the
//! same instants (in phase, the worst case for the power supply), step after step.
//!
//! The steps, and why: a supply's over-current protection reacts within milliseconds, so the
//! first step's pulses are 10 ms long (the cards' current rises together 50 times a second);
//! 50 ms pulses let the cards boost into each burst; 1-second pulses at 20, 50 and 80 % duty walk
//! the voltage/frequency curve as the single-card check does (a card boosts highest at part
//! load); full load ends it (the supply's sustained rating, the cards at their power limits).

use std::time::{Duration, Instant};

use gputune_formats::reports::box_check::BoxStep;

/// The steps of a box check, in order.
pub const BOX_STEPS: [BoxStep; 6] = [
    BoxStep::Pulsed {
        period_ms: 20,
        duty_pct: 50,
    },
    BoxStep::Pulsed {
        period_ms: 100,
        duty_pct: 50,
    },
    BoxStep::Pulsed {
        period_ms: 1000,
        duty_pct: 20,
    },
    BoxStep::Pulsed {
        period_ms: 1000,
        duty_pct: 50,
    },
    BoxStep::Pulsed {
        period_ms: 1000,
        duty_pct: 80,
    },
    BoxStep::Full,
];

/// How long after every card is prepared the first edge comes: time to hand each worker its
/// first burst, which then waits for the edge.
pub const LEAD: Duration = Duration::from_millis(100);

/// A card handed its next piece this close after a pulse's start still begins at that edge
/// (the piece before ended exactly there).
const AT_EDGE_S: f64 = 1e-6;

/// A step with its place in time, seconds after the schedule's origin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimedStep {
    pub step: BoxStep,
    pub start_s: f64,
    pub seconds: f64,
}

impl TimedStep {
    fn end_s(&self) -> f64 {
        self.start_s + self.seconds
    }
}

/// The next piece of load a card should run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    pub step_index: usize,
    /// The pulse edge it begins at (`None`: the card joins a burst already under way).
    pub edge: Option<u64>,
    pub begins: Instant,
    pub ends: Instant,
}

/// The shared schedule; see the module's documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct InPhase {
    origin: Instant,
    steps: Vec<TimedStep>,
}

impl InPhase {
    /// `steps` in order from `origin`, sharing `duration_s` equally.
    pub fn new(origin: Instant, steps: &[BoxStep], duration_s: f64) -> InPhase {
        let each_s = duration_s / steps.len().max(1) as f64;
        let steps = (0..)
            .zip(steps)
            .map(|(index, step)| TimedStep {
                step: *step,
                start_s: f64::from(index) * each_s,
                seconds: each_s,
            })
            .collect();
        InPhase { origin, steps }
    }

    /// `steps` at their own start times and lengths (a recommendation's rerun of one step).
    pub fn of_steps(origin: Instant, steps: Vec<TimedStep>) -> InPhase {
        InPhase { origin, steps }
    }

    pub fn origin(&self) -> Instant {
        self.origin
    }

    pub fn steps(&self) -> &[TimedStep] {
        &self.steps
    }

    pub fn total_s(&self) -> f64 {
        self.steps.last().map_or(0.0, TimedStep::end_s)
    }

    /// Seconds from the origin to `at` (negative before it).
    pub fn seconds_at(&self, at: Instant) -> f64 {
        match at.checked_duration_since(self.origin) {
            Some(after) => after.as_secs_f64(),
            None => -self.origin.duration_since(at).as_secs_f64(),
        }
    }

    /// The step under way at `at`.
    pub fn step_at(&self, at: Instant) -> Option<usize> {
        let seconds = self.seconds_at(at);
        self.steps
            .iter()
            .position(|step| seconds >= step.start_s && seconds < step.end_s())
    }

    fn instant(&self, seconds: f64) -> Instant {
        self.origin + Duration::from_secs_f64(seconds.max(0.0))
    }

    /// The load a card should run next, seen at `now`: the burst under way, else the next
    /// edge; `None` once the schedule is over.
    pub fn next_slot(&self, now: Instant) -> Option<Slot> {
        let now_s = self.seconds_at(now);
        for (step_index, timed) in self.steps.iter().enumerate() {
            if now_s >= timed.end_s() {
                continue;
            }
            let edge_id = |pulse: u64| ((step_index as u64) << 32) | pulse;
            let local_s = now_s - timed.start_s;
            let slot = |edge: Option<u64>, begins_s: f64, ends_s: f64| Slot {
                step_index,
                edge,
                begins: self.instant(begins_s),
                ends: self.instant(ends_s.min(timed.end_s())),
            };
            match timed.step {
                BoxStep::Full if local_s < AT_EDGE_S => {
                    return Some(slot(Some(edge_id(0)), timed.start_s, timed.end_s()));
                }
                BoxStep::Full => return Some(slot(None, now_s, timed.end_s())),
                BoxStep::Pulsed {
                    period_ms,
                    duty_pct,
                } => {
                    let period_s = f64::from(period_ms.max(1)) / 1000.0;
                    let burst_s = period_s * f64::from(duty_pct.min(100)) / 100.0;
                    let pulse = (local_s.max(0.0) / period_s).floor();
                    let burst_start_s = timed.start_s + pulse * period_s;
                    // At (or before) a pulse's start: that edge.
                    if now_s - burst_start_s < AT_EDGE_S {
                        return Some(slot(
                            Some(edge_id(pulse as u64)),
                            burst_start_s,
                            burst_start_s + burst_s,
                        ));
                    }
                    if now_s < burst_start_s + burst_s {
                        return Some(slot(None, now_s, burst_start_s + burst_s));
                    }
                    let next_start_s = burst_start_s + period_s;
                    if next_start_s < timed.end_s() {
                        return Some(slot(
                            Some(edge_id(pulse as u64 + 1)),
                            next_start_s,
                            next_start_s + burst_s,
                        ));
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(schedule: &InPhase, at: Instant) -> f64 {
        (schedule.seconds_at(at) * 1000.0).round()
    }

    #[test]
    fn every_step_gets_an_equal_share_in_order() {
        let schedule = InPhase::new(Instant::now(), &BOX_STEPS, 60.0);
        assert_eq!(schedule.steps().len(), 6);
        assert!((schedule.total_s() - 60.0).abs() < 1e-9);
        assert_eq!(schedule.steps()[5].step, BoxStep::Full);
        assert!((schedule.steps()[1].start_s - 10.0).abs() < 1e-9);
    }

    #[test]
    fn slots_begin_at_the_shared_edges_and_end_with_the_burst() {
        let origin = Instant::now() + Duration::from_secs(1);
        let schedule = InPhase::new(origin, &BOX_STEPS, 6.0);
        // Before the origin: the first edge, at the origin, a 10 ms burst.
        let first = schedule.next_slot(Instant::now()).unwrap();
        assert_eq!(first.edge, Some(0));
        assert_eq!(ms(&schedule, first.begins), 0.0);
        assert_eq!(ms(&schedule, first.ends), 10.0);
        // Inside a burst: join it, no edge.
        let inside = schedule
            .next_slot(origin + Duration::from_millis(45))
            .unwrap();
        assert_eq!((inside.edge, ms(&schedule, inside.ends)), (None, 50.0));
        // Between bursts: the next edge.
        let between = schedule
            .next_slot(origin + Duration::from_millis(55))
            .unwrap();
        assert_eq!(between.edge, Some(3));
        assert_eq!(ms(&schedule, between.begins), 60.0);
        // The last pulse of a step hands over to the next step's first edge.
        let over = schedule
            .next_slot(origin + Duration::from_millis(995))
            .unwrap();
        assert_eq!((over.step_index, over.edge), (1, Some(1 << 32)));
        assert_eq!(ms(&schedule, over.begins), 1000.0);
        // Full load runs to the step's end; then nothing is left.
        let full = schedule
            .next_slot(origin + Duration::from_millis(5500))
            .unwrap();
        assert_eq!((full.step_index, full.edge), (5, None));
        assert_eq!(ms(&schedule, full.ends), 6000.0);
        assert_eq!(schedule.next_slot(origin + Duration::from_secs(6)), None);
        assert_eq!(
            schedule.step_at(origin + Duration::from_millis(2500)),
            Some(2)
        );
    }
}
