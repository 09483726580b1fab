//! What each step of a box check drew: the box's power (the checked cards' readings summed at
//! each reading), each card's power, clocks and temperature, and how well the cards' pulse
//! edges lined up.

use std::collections::BTreeMap;
use std::time::Instant;

use super::schedule::TimedStep;
use crate::stability::run::in_phase::EdgeBegun;
use gputune_formats::card::Telemetry;
use gputune_formats::reports::box_check::{CardAtStep, StepReport};

/// A mean and a peak of one figure.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct MeanPeak {
    sum: f64,
    count: u32,
    peak: Option<f64>,
}

impl MeanPeak {
    fn take(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
        self.peak = Some(self.peak.map_or(value, |peak| peak.max(value)));
    }

    fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / f64::from(self.count))
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct CardTally {
    power_w: MeanPeak,
    clock_min_mhz: Option<u32>,
    clock_max_mhz: Option<u32>,
    temperature_peak_c: Option<u32>,
}

/// One step's tallies.
#[derive(Debug, Clone)]
pub struct StepTally {
    timed: TimedStep,
    box_power_w: MeanPeak,
    cards: Vec<CardTally>,
}

impl StepTally {
    pub fn new(timed: TimedStep, cards: usize) -> StepTally {
        StepTally {
            timed,
            box_power_w: MeanPeak::default(),
            cards: vec![CardTally::default(); cards],
        }
    }

    /// One reading of every checked card (in the box's order); the box's power counts only
    /// when every card gave its own.
    pub fn take(&mut self, readings: &[Option<&Telemetry>]) {
        let mut box_w = Some(0.0);
        for (tally, reading) in self.cards.iter_mut().zip(readings) {
            let power_w = reading
                .and_then(|reading| reading.power_draw_mw)
                .map(|mw| f64::from(mw) / 1000.0);
            box_w = box_w.zip(power_w).map(|(sum, card)| sum + card);
            let Some(reading) = reading else { continue };
            if let Some(power_w) = power_w {
                tally.power_w.take(power_w);
            }
            if let Some(clock) = reading.sm_clock_mhz.or(reading.gpu_clock_mhz) {
                tally.clock_min_mhz = Some(tally.clock_min_mhz.map_or(clock, |low| low.min(clock)));
                tally.clock_max_mhz =
                    Some(tally.clock_max_mhz.map_or(clock, |high| high.max(clock)));
            }
            if let Some(temperature) = reading.temperature_c {
                tally.temperature_peak_c = Some(
                    tally
                        .temperature_peak_c
                        .map_or(temperature, |peak| peak.max(temperature)),
                );
            }
        }
        if let Some(box_w) = box_w.filter(|_| !readings.is_empty()) {
            self.box_power_w.take(box_w);
        }
    }

    /// The highest clock any card reached in this step.
    pub fn clock_max_mhz(&self) -> Option<u32> {
        self.cards
            .iter()
            .filter_map(|card| card.clock_max_mhz)
            .max()
    }

    pub fn box_power_peak_w(&self) -> Option<f64> {
        self.box_power_w.peak
    }

    /// The step's report; `gpu_indices` name the cards, `edges` are each card's.
    pub fn report(
        &self,
        step_index: usize,
        gpu_indices: &[u32],
        edges: &[&[EdgeBegun]],
    ) -> StepReport {
        let (count, spread_ms) = edge_spread(step_index, edges);
        StepReport {
            step: self.timed.step,
            started_s: self.timed.start_s,
            seconds: self.timed.seconds,
            box_power_mean_w: self.box_power_w.mean(),
            box_power_peak_w: self.box_power_w.peak,
            cards: gpu_indices
                .iter()
                .zip(&self.cards)
                .map(|(gpu_index, card)| CardAtStep {
                    gpu_index: *gpu_index,
                    power_mean_w: card.power_w.mean(),
                    power_peak_w: card.power_w.peak,
                    clock_min_mhz: card.clock_min_mhz,
                    clock_max_mhz: card.clock_max_mhz,
                    temperature_peak_c: card.temperature_peak_c,
                })
                .collect(),
            edges: count,
            edge_spread_max_ms: spread_ms,
        }
    }
}

/// Of the edges of step `step_index` that every card began, how many, and the widest spread
/// of one edge's start across the cards (ms).
pub fn edge_spread(step_index: usize, edges: &[&[EdgeBegun]]) -> (u32, Option<f64>) {
    let mut by_edge: BTreeMap<u64, (Instant, Instant, usize)> = BTreeMap::new();
    for card in edges {
        for begun in card
            .iter()
            .filter(|begun| (begun.edge >> 32) == step_index as u64)
        {
            let entry = by_edge
                .entry(begun.edge)
                .or_insert((begun.began, begun.began, 0));
            entry.0 = entry.0.min(begun.began);
            entry.1 = entry.1.max(begun.began);
            entry.2 += 1;
        }
    }
    let everyone: Vec<f64> = by_edge
        .values()
        .filter(|(_, _, cards)| *cards == edges.len() && *cards > 1)
        .map(|(first, last, _)| last.duration_since(*first).as_secs_f64() * 1000.0)
        .collect();
    let widest = everyone.iter().copied().reduce(f64::max);
    (everyone.len() as u32, widest)
}
