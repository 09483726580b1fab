//! Per-GPU history: bounded, columnar ring buffers, one compact integer column per metric.
//!
//! A day at 10 Hz is 864,000 samples. Each sample costs 29 bytes of columns (time as u32 ms
//! after a base, power in 0.1 W as u16, clocks u16, memory MiB u32, the rest u8, throttle bits
//! u16) plus about 6.4 bytes of block summaries for `decimate`: 31.0 MB per GPU-day.
//! A missing reading is the column type's largest value.

mod column;
mod quantize;
mod row;
mod walk;

use std::ops::Range;

use column::{SummarizedColumn, THROTTLE_MISSING, ThrottleOr, TimeSteps};
use gputune_formats::card::Telemetry;
use quantize::{MetricColumn, steps_per_display_unit};

use gputune_formats::history::HistoryRow;
pub use quantize::stored_bytes;
pub use row::MetricRow;

pub(crate) use walk::{Piece, PresentRun};

/// Samples in a day at 10 Hz: the capacity that keeps 24 h of 100 ms samples.
pub const DAY_AT_10_HZ: usize = 864_000;

/// How far below the newest sample the time base goes when it must move although the oldest
/// sample is too old to keep its exact time (a history spanning more than ~37 days): the
/// remaining quarter of the u32 range is headroom, so rebasing stays rare.
const MAX_SPAN_AFTER_REBASE_MS: u64 = u32::MAX as u64 / 4 * 3;

/// A reading kept in the history. Values come back in display units; precision: power 0.1 W,
/// memory used 1 MiB, fan speed the mean of the card's fans rounded to 1 %, others exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    PowerDrawW,
    PowerLimitW,
    TemperatureC,
    FanSpeedPct,
    GpuClockMhz,
    SmClockMhz,
    MemoryClockMhz,
    UtilizationGpuPct,
    UtilizationMemoryPct,
    MemoryUsedGib,
    PcieLinkGen,
    PcieLinkWidth,
    PcieLinkGenMax,
    PcieLinkWidthMax,
    PerformanceState,
}

impl Metric {
    /// Every metric, in declaration order.
    pub const ALL: [Metric; 15] = [
        Metric::PowerDrawW,
        Metric::PowerLimitW,
        Metric::TemperatureC,
        Metric::FanSpeedPct,
        Metric::GpuClockMhz,
        Metric::SmClockMhz,
        Metric::MemoryClockMhz,
        Metric::UtilizationGpuPct,
        Metric::UtilizationMemoryPct,
        Metric::MemoryUsedGib,
        Metric::PcieLinkGen,
        Metric::PcieLinkWidth,
        Metric::PcieLinkGenMax,
        Metric::PcieLinkWidthMax,
        Metric::PerformanceState,
    ];

    /// Name for people ("Power draw").
    pub fn label(self) -> &'static str {
        match self {
            Metric::PowerDrawW => "Power draw",
            Metric::PowerLimitW => "Power limit",
            Metric::TemperatureC => "Temperature",
            Metric::FanSpeedPct => "Fan speed",
            Metric::GpuClockMhz => "GPU clock",
            Metric::SmClockMhz => "SM clock",
            Metric::MemoryClockMhz => "Memory clock",
            Metric::UtilizationGpuPct => "GPU utilization",
            Metric::UtilizationMemoryPct => "Memory utilization",
            Metric::MemoryUsedGib => "Memory used",
            Metric::PcieLinkGen => "PCIe generation",
            Metric::PcieLinkWidth => "PCIe width",
            Metric::PcieLinkGenMax => "PCIe generation (max)",
            Metric::PcieLinkWidthMax => "PCIe width (max)",
            Metric::PerformanceState => "Performance state",
        }
    }

    /// Unit of `GpuHistory::value` ("W", "°C", "%", "MHz", "GiB"; "" for counts and states).
    pub fn unit(self) -> &'static str {
        match self {
            Metric::PowerDrawW | Metric::PowerLimitW => "W",
            Metric::TemperatureC => "°C",
            Metric::FanSpeedPct | Metric::UtilizationGpuPct | Metric::UtilizationMemoryPct => "%",
            Metric::GpuClockMhz | Metric::SmClockMhz | Metric::MemoryClockMhz => "MHz",
            Metric::MemoryUsedGib => "GiB",
            Metric::PcieLinkGen
            | Metric::PcieLinkWidth
            | Metric::PcieLinkGenMax
            | Metric::PcieLinkWidthMax
            | Metric::PerformanceState => "",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One GPU's readings over time, oldest dropped when full. Times never decrease: a clock that
/// steps back is clamped to the previous sample's time.
#[derive(Clone)]
pub struct GpuHistory {
    capacity: usize,
    len: usize,
    /// Ring slot the next sample goes to; when full, also the slot of the oldest sample.
    next_slot: usize,
    /// Unix ms that stored times count from.
    base_ms: u64,
    times: SummarizedColumn<TimeSteps>,
    metrics: [MetricColumn; 15],
    throttle: SummarizedColumn<ThrottleOr>,
}

impl std::fmt::Debug for GpuHistory {
    /// A summary: the samples themselves would be hundreds of thousands of lines.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("GpuHistory")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .field("first_time_ms", &self.first_time_ms())
            .field("last_time_ms", &self.last_time_ms())
            .finish_non_exhaustive()
    }
}

impl GpuHistory {
    /// An empty history keeping the newest `capacity` samples (at least 1). Memory grows with
    /// the samples, up to the full capacity.
    pub fn with_capacity(capacity: usize) -> GpuHistory {
        GpuHistory {
            capacity: capacity.max(1),
            len: 0,
            next_slot: 0,
            base_ms: 0,
            times: SummarizedColumn::new(),
            metrics: Metric::ALL.map(MetricColumn::for_metric),
            throttle: SummarizedColumn::new(),
        }
    }

    /// Appends a sample taken at `time_ms` (Unix ms). `None` is a failed read: a gap in every
    /// column; a `None` field is a gap in its column.
    pub fn push(&mut self, time_ms: u64, reading: Option<&Telemetry>) {
        self.push_row(&HistoryRow::from_reading(time_ms, reading));
    }

    /// Appends a sample already in stored steps (one read back from the daemon's history).
    pub fn push_row(&mut self, row: &HistoryRow) {
        let time_ms = match self.last_time_ms() {
            Some(last_ms) => row.time_ms.max(last_ms),
            None => {
                self.base_ms = row.time_ms;
                row.time_ms
            }
        };
        let time_offset_ms = self.time_offset(time_ms);
        let slot = self.next_slot;
        let capacity = self.capacity;
        self.times.write(slot, time_offset_ms, capacity);
        for (value, column) in row.values.iter().zip(&mut self.metrics) {
            column.write(slot, *value, capacity);
        }
        self.throttle.write(slot, row.stored_throttle(), capacity);
        self.next_slot = if slot + 1 >= capacity { 0 } else { slot + 1 };
        self.len = (self.len + 1).min(capacity);
    }

    /// Sample `index` (0 = oldest kept) in stored steps.
    pub fn row(&self, index: usize) -> Option<HistoryRow> {
        let time_ms = self.time_ms(index)?;
        let slot = self.slot(index)?;
        let throttle = self.throttle.get(slot)?;
        Some(HistoryRow {
            time_ms,
            values: Metric::ALL.map(|metric| self.quantized(metric, index)),
            throttle_bits: (throttle != THROTTLE_MISSING).then_some(throttle),
        })
    }

    /// This history with `earlier` (sorted by time, e.g. the daemon's record of the hours
    /// before the window opened) in front of its own samples: rows at or after this
    /// history's first sample are left out, so nothing is counted twice. Capacity stays.
    pub fn with_earlier(&self, earlier: &[HistoryRow]) -> GpuHistory {
        let first_own_ms = self.first_time_ms().unwrap_or(u64::MAX);
        let mut merged = GpuHistory::with_capacity(self.capacity);
        for row in earlier.iter().filter(|row| row.time_ms < first_own_ms) {
            merged.push_row(row);
        }
        for index in 0..self.len {
            if let Some(row) = self.row(index) {
                merged.push_row(&row);
            }
        }
        merged
    }

    /// This history with `missed` (sorted by time: what the daemon kept while the window was
    /// not connected) merged in by time; a row at the time of one of its own is left out.
    /// Capacity stays (the oldest give way).
    pub fn with_inserted(&self, missed: &[HistoryRow]) -> GpuHistory {
        let mut merged = GpuHistory::with_capacity(self.capacity);
        let mut missed = missed.iter().peekable();
        for index in 0..self.len {
            let Some(own) = self.row(index) else {
                continue;
            };
            while let Some(row) = missed.next_if(|row| row.time_ms <= own.time_ms) {
                if row.time_ms < own.time_ms {
                    merged.push_row(row);
                }
            }
            merged.push_row(&own);
        }
        for row in missed {
            merged.push_row(row);
        }
        merged
    }

    /// Samples kept.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no sample was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most samples kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Time of the oldest sample kept, Unix ms.
    pub fn first_time_ms(&self) -> Option<u64> {
        self.time_ms(0)
    }

    /// Time of the newest sample, Unix ms.
    pub fn last_time_ms(&self) -> Option<u64> {
        self.len.checked_sub(1).and_then(|last| self.time_ms(last))
    }

    /// Time of sample `index` (0 = oldest kept), Unix ms.
    pub fn time_ms(&self, index: usize) -> Option<u64> {
        let offset_ms = self.times.get(self.slot(index)?)?;
        Some(self.base_ms.saturating_add(u64::from(offset_ms)))
    }

    /// `metric` of sample `index` in display units (W, °C, %, MHz, GiB, ...); `None` is a gap.
    pub fn value(&self, metric: Metric, index: usize) -> Option<f64> {
        let quantized = self.quantized(metric, index)?;
        Some(f64::from(quantized) / steps_per_display_unit(metric))
    }

    /// Throttle reasons of sample `index` as NVML's bitmask (`ThrottleReasons::bits`).
    pub fn throttle_bits(&self, index: usize) -> Option<u64> {
        let bits = self.throttle.get(self.slot(index)?)?;
        (bits != THROTTLE_MISSING).then_some(u64::from(bits))
    }

    /// Indices of the samples with `from_ms <= time <= to_ms` (binary search).
    pub fn range(&self, from_ms: u64, to_ms: u64) -> Range<usize> {
        let start = self.partition_point(0, self.len, |time_ms| time_ms < from_ms);
        if to_ms < from_ms {
            return start..start;
        }
        let end = self.partition_point(start, self.len, |time_ms| time_ms <= to_ms);
        start..end
    }

    /// The sample nearest `at_ms` among those with `from_ms <= time <= to_ms` (a graph's
    /// hovered pixel column), the earlier one on a tie; `None` when that span has none.
    pub fn nearest(&self, at_ms: u64, from_ms: u64, to_ms: u64) -> Option<usize> {
        let indices = self.range(from_ms, to_ms);
        if indices.is_empty() {
            return None;
        }
        // The first sample at or after `at_ms`, and the one before it.
        let after = self.partition_point(indices.start, indices.end, |time_ms| time_ms < at_ms);
        let distance = |index: usize| self.time_ms(index).map(|time_ms| time_ms.abs_diff(at_ms));
        let before = after.checked_sub(1).filter(|index| *index >= indices.start);
        let after = Some(after).filter(|index| *index < indices.end);
        match (before, after) {
            (Some(before), Some(after)) if distance(after) < distance(before) => Some(after),
            (Some(before), _) => Some(before),
            (None, after) => after,
        }
    }

    /// The sample a graph's hover reads at `at_ms`. Where the pointer is between two samples
    /// the graph's line joins (at most `gap_after_ms` apart), the nearer of the two, however
    /// many pixel columns lie between them; in a gap or past either end, the nearest within
    /// `reach_ms` (half the hovered pixel column), else `None`: never a sample across a gap.
    pub fn nearest_on_line(&self, at_ms: u64, reach_ms: u64, gap_after_ms: u64) -> Option<usize> {
        let after = self.partition_point(0, self.len, |time_ms| time_ms < at_ms);
        if let Some(before) = after.checked_sub(1)
            && after < self.len
            && let (Some(before_ms), Some(after_ms)) = (self.time_ms(before), self.time_ms(after))
            && after_ms.saturating_sub(before_ms) <= gap_after_ms
        {
            // The earlier one on a tie, as `nearest`.
            let nearer_after = after_ms.saturating_sub(at_ms) < at_ms.saturating_sub(before_ms);
            return Some(if nearer_after { after } else { before });
        }
        self.nearest(
            at_ms,
            at_ms.saturating_sub(reach_ms),
            at_ms.saturating_add(reach_ms),
        )
    }

    /// Bytes the buffers have allocated.
    pub fn memory_bytes(&self) -> usize {
        size_of::<GpuHistory>()
            + self.times.memory_bytes()
            + self.throttle.memory_bytes()
            + self
                .metrics
                .iter()
                .map(MetricColumn::memory_bytes)
                .sum::<usize>()
    }

    /// The first index in `lo..hi` whose time fails `before` (times are sorted), or `hi`.
    pub(crate) fn partition_point(
        &self,
        mut lo: usize,
        mut hi: usize,
        before: impl Fn(u64) -> bool,
    ) -> usize {
        hi = hi.min(self.len);
        while lo < hi {
            let middle = lo + (hi - lo) / 2;
            if self.time_ms(middle).is_some_and(&before) {
                lo = middle + 1;
            } else {
                hi = middle;
            }
        }
        lo
    }

    /// Milliseconds from sample `index - 1` to sample `index` (0 for the oldest).
    pub(crate) fn step_before_ms(&self, index: usize) -> u64 {
        let Some(previous) = index.checked_sub(1) else {
            return 0;
        };
        match (self.time_ms(previous), self.time_ms(index)) {
            (Some(previous_ms), Some(time_ms)) => time_ms.saturating_sub(previous_ms),
            _ => 0,
        }
    }

    /// `metric` of sample `index` in stored steps.
    pub(crate) fn quantized(&self, metric: Metric, index: usize) -> Option<u32> {
        self.metrics.get(metric.index())?.get(self.slot(index)?)
    }

    /// Ring slot of sample `index`.
    fn slot(&self, index: usize) -> Option<usize> {
        if index >= self.len {
            return None;
        }
        let oldest_slot = if self.len == self.capacity {
            self.next_slot
        } else {
            0
        };
        let slot = oldest_slot + index;
        Some(if slot >= self.capacity {
            slot - self.capacity
        } else {
            slot
        })
    }

    /// `time_ms` as stored (ms after the base), moving the base first when it does not fit.
    fn time_offset(&mut self, time_ms: u64) -> u32 {
        if let Ok(offset_ms) = u32::try_from(time_ms.saturating_sub(self.base_ms)) {
            return offset_ms;
        }
        self.rebase(time_ms);
        u32::try_from(time_ms.saturating_sub(self.base_ms)).unwrap_or(u32::MAX)
    }

    /// Moves the base to the oldest sample that survives the next push, or, when that one is
    /// too old, to `MAX_SPAN_AFTER_REBASE_MS` before `newest_ms` (older samples then read as
    /// that time). Step summaries stay valid: steps only shrink.
    fn rebase(&mut self, newest_ms: u64) {
        let survivor = if self.len == self.capacity { 1 } else { 0 };
        let oldest_kept_ms = self.time_ms(survivor).unwrap_or(newest_ms);
        let new_base_ms = oldest_kept_ms
            .max(newest_ms.saturating_sub(MAX_SPAN_AFTER_REBASE_MS))
            .max(self.base_ms);
        let shift_ms = new_base_ms - self.base_ms;
        self.times.map_values(|offset_ms| {
            u32::try_from(u64::from(offset_ms).saturating_sub(shift_ms)).unwrap_or(0)
        });
        self.base_ms = new_base_ms;
    }
}
