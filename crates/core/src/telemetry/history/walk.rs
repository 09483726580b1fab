//! Reading a range of samples the fast way: whole blocks from their summaries where a block is
//! uniform (all present without a time gap, or all missing), single samples elsewhere, merged
//! into as few pieces as the gaps allow.

use std::ops::Range;

use super::column::{
    BLOCK_SAMPLES, MinMax, Quantized, SOME_MISSING, SOME_PRESENT, SummarizedColumn, SummaryKind,
    THROTTLE_BITS, THROTTLE_MISSING, THROTTLE_SOME_PRESENT, ThrottleOr,
};
use super::quantize::MetricColumn;
use super::{GpuHistory, Metric};

/// Consecutive present samples `first..end` of one metric, with no step between them longer
/// than the walk's `max_step_ms`. `min`/`max` are in stored steps, at their first occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PresentRun {
    pub(crate) first: usize,
    pub(crate) end: usize,
    pub(crate) min: u32,
    pub(crate) min_index: usize,
    pub(crate) max: u32,
    pub(crate) max_index: usize,
}

impl PresentRun {
    fn single(index: usize, value: u32) -> PresentRun {
        PresentRun {
            first: index,
            end: index + 1,
            min: value,
            min_index: index,
            max: value,
            max_index: index,
        }
    }

    /// Extends this run by `later`, which starts where this one ends.
    pub(crate) fn merge(&mut self, later: &PresentRun) {
        self.end = later.end;
        // Strict: on a tie the earlier sample stays, as a scan in time order would keep it.
        if later.min < self.min {
            self.min = later.min;
            self.min_index = later.min_index;
        }
        if later.max > self.max {
            self.max = later.max;
            self.max_index = later.max_index;
        }
    }
}

/// What a walk reports, in time order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    Present(PresentRun),
    /// One or more missing samples.
    Missing,
}

/// Ring slots `start..end` holding the samples from index `first_index` on.
#[derive(Debug, Clone, Copy)]
struct SlotRun {
    start: usize,
    end: usize,
    first_index: usize,
}

impl GpuHistory {
    /// Visits samples `indices` of `metric` as `Piece`s, in order. Present samples are merged
    /// into one piece until a missing sample, a step longer than `max_step_ms`, or the ring's
    /// wrap (so a caller still checks the step before each piece).
    pub(crate) fn walk(
        &self,
        metric: Metric,
        indices: Range<usize>,
        max_step_ms: u64,
        visit: &mut impl FnMut(Piece),
    ) {
        let Some(column) = self.metrics.get(metric.index()) else {
            return;
        };
        for run in self.slot_runs(indices) {
            match column {
                MetricColumn::U8(column) => self.walk_run(column, run, max_step_ms, visit),
                MetricColumn::U16(column) => self.walk_run(column, run, max_step_ms, visit),
                MetricColumn::U32(column) => self.walk_run(column, run, max_step_ms, visit),
            }
        }
    }

    /// The OR of the throttle bits of samples `indices`; `None` when none has a reading.
    pub(crate) fn throttle_or(&self, indices: Range<usize>) -> Option<u64> {
        let mut summary = 0u16;
        for run in self.slot_runs(indices) {
            let mut slot = run.start;
            while slot < run.end {
                let block = self.usable_block(slot, run.end, |level, block, _| {
                    self.throttle.summary(level, block).copied()
                });
                if let Some((block_samples, block_or)) = block {
                    summary |= block_or;
                    slot += block_samples;
                } else {
                    let bits = self.throttle.get(slot).unwrap_or(THROTTLE_MISSING);
                    summary |= ThrottleOr::start(bits);
                    slot += 1;
                }
            }
        }
        (summary & THROTTLE_SOME_PRESENT != 0).then_some(u64::from(summary & THROTTLE_BITS))
    }

    fn walk_run<T: Quantized>(
        &self,
        column: &SummarizedColumn<MinMax<T>>,
        run: SlotRun,
        max_step_ms: u64,
        visit: &mut impl FnMut(Piece),
    ) {
        let mut pending: Option<PresentRun> = None;
        let mut slot = run.start;
        while slot < run.end {
            let index = run.first_index + (slot - run.start);
            // The largest block starting here whose summary answers for it, else one sample.
            let block = self.usable_block(slot, run.end, |level, block, block_samples| {
                let extremes = column.summary(level, block)?;
                let max_step_ms_inside = self.times.summary(level, block)?;
                match extremes.presence {
                    SOME_MISSING => Some(None),
                    SOME_PRESENT if u64::from(*max_step_ms_inside) <= max_step_ms => {
                        Some(Some(PresentRun {
                            first: index,
                            end: index + block_samples,
                            min: extremes.min.into(),
                            min_index: index + usize::from(extremes.min_offset),
                            max: extremes.max.into(),
                            max_index: index + usize::from(extremes.max_offset),
                        }))
                    }
                    _ => None,
                }
            });
            let (samples, present) = block.unwrap_or_else(|| {
                let value = column.get(slot).filter(|value| *value != T::MISSING);
                (
                    1,
                    value.map(|value| PresentRun::single(index, value.into())),
                )
            });
            let element_slot = slot;
            slot += samples;
            let Some(present) = present else {
                if let Some(done) = pending.take() {
                    visit(Piece::Present(done));
                }
                visit(Piece::Missing);
                continue;
            };
            match &mut pending {
                Some(growing) if self.step_into_slot_ms(element_slot) <= max_step_ms => {
                    growing.merge(&present)
                }
                _ => {
                    if let Some(done) = pending.replace(present) {
                        visit(Piece::Present(done));
                    }
                }
            }
        }
        if let Some(done) = pending {
            visit(Piece::Present(done));
        }
    }

    /// Milliseconds from the sample in the slot before `slot` to the one in `slot`; only asked
    /// within one `SlotRun`, where the previous slot holds the previous sample.
    fn step_into_slot_ms(&self, slot: usize) -> u64 {
        let time = |slot| self.times.get(slot).unwrap_or(0);
        match slot.checked_sub(1) {
            Some(previous) => u64::from(time(slot).saturating_sub(time(previous))),
            None => 0,
        }
    }

    /// The largest block starting at `slot`, ending by `end`, that holds no write head and for
    /// which `answer(level, block, block_samples)` has an answer, with its length in samples.
    fn usable_block<A>(
        &self,
        slot: usize,
        end: usize,
        answer: impl Fn(usize, usize, usize) -> Option<A>,
    ) -> Option<(usize, A)> {
        for (level, &block_samples) in BLOCK_SAMPLES.iter().enumerate().rev() {
            let block_end = slot + block_samples;
            // The block with the write head inside mixes new and old samples (column.rs);
            // `slot_runs` never spans it whole, and this keeps it so.
            let holds_write_head = slot < self.next_slot && self.next_slot < block_end;
            if !slot.is_multiple_of(block_samples) || block_end > end || holds_write_head {
                continue;
            }
            if let Some(found) = answer(level, slot / block_samples, block_samples) {
                return Some((block_samples, found));
            }
        }
        None
    }

    /// Ring slots of `indices` (clamped to the kept samples): one run, or two when it wraps.
    fn slot_runs(&self, indices: Range<usize>) -> impl Iterator<Item = SlotRun> {
        let end_index = indices.end.min(self.len);
        let start_index = indices.start.min(end_index);
        let first_slot = self.slot(start_index).unwrap_or(0);
        let count = end_index - start_index;
        let before_wrap = count.min(self.capacity - first_slot);
        let first = SlotRun {
            start: first_slot,
            end: first_slot + before_wrap,
            first_index: start_index,
        };
        let second = SlotRun {
            start: 0,
            end: count - before_wrap,
            first_index: start_index + before_wrap,
        };
        [first, second]
            .into_iter()
            .filter(|run| run.start < run.end)
    }
}
