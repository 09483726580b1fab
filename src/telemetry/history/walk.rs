//! Reading a range of samples the fast way: whole blocks from their summaries where a block is
//! uniform (all present without a time gap, or all missing), single samples elsewhere.

use std::ops::Range;

use super::column::{
    BLOCK_SAMPLES, MinMax, Quantized, SOME_MISSING, SOME_PRESENT, SummarizedColumn, SummaryKind,
    THROTTLE_BITS, THROTTLE_MISSING, THROTTLE_SOME_PRESENT, ThrottleOr, TimeSteps,
};
use super::quantize::MetricColumn;
use super::{GpuHistory, Metric};

/// A run of consecutive samples of one metric, in time order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Samples `first..end`, all present, no step between them longer than the walk's
    /// `max_step_ms`. `min`/`max` are in stored steps; their indices are first occurrences.
    Present {
        first: usize,
        end: usize,
        min: u32,
        min_index: usize,
        max: u32,
        max_index: usize,
    },
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
    /// Visits samples `indices` of `metric` as `Piece`s, in order.
    pub(crate) fn walk(
        &self,
        metric: Metric,
        indices: Range<usize>,
        max_step_ms: u64,
        visit: &mut impl FnMut(Piece),
    ) {
        let Some(column) = self.metrics.get(metric as usize) else {
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
        let times: &SummarizedColumn<TimeSteps> = &self.times;
        let mut slot = run.start;
        while slot < run.end {
            let index = run.first_index + (slot - run.start);
            // Largest block starting here whose summary answers for it.
            let block = self.usable_block(slot, run.end, |level, block, block_samples| {
                let extremes = column.summary(level, block)?;
                let max_step = times.summary(level, block)?;
                match extremes.presence {
                    SOME_MISSING => Some(Piece::Missing),
                    SOME_PRESENT if u64::from(*max_step) <= max_step_ms => Some(Piece::Present {
                        first: index,
                        end: index + block_samples,
                        min: extremes.min.into(),
                        min_index: index + usize::from(extremes.min_offset),
                        max: extremes.max.into(),
                        max_index: index + usize::from(extremes.max_offset),
                    }),
                    _ => None,
                }
            });
            if let Some((block_samples, piece)) = block {
                visit(piece);
                slot += block_samples;
                continue;
            }
            match column.get(slot).filter(|value| *value != T::MISSING) {
                Some(value) => visit(Piece::Present {
                    first: index,
                    end: index + 1,
                    min: value.into(),
                    min_index: index,
                    max: value.into(),
                    max_index: index,
                }),
                None => visit(Piece::Missing),
            }
            slot += 1;
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
            // The block with the write head inside mixes new and old samples (column.rs).
            let holds_write_head = slot < self.next_slot && self.next_slot < block_end;
            if slot % block_samples != 0 || block_end > end || holds_write_head {
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
