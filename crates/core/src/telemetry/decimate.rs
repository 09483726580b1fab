//! Plot-ready points from a `GpuHistory`: per pixel column only the min and the max (in the
//! order they occurred), so a spike one sample wide still shows, and a frame hands a plot about
//! two points per pixel column instead of every sample.
//!
//! Pixel column `c` of `columns` over `[from_ms, to_ms]` holds the samples with
//! `floor((time - from_ms) * columns / (to_ms - from_ms + 1)) == c`. The history's block
//! summaries answer whole blocks, so a column costs a few dozen reads, not one per sample.

use std::ops::Range;

use crate::telemetry::history::{GpuHistory, Metric, Piece, PresentRun};

/// Min/max points of `metric` in [from_ms, to_ms] for a plot `columns` px wide: per column the
/// min and the max, in the order they occurred, x = Unix seconds (f64). A gap — a missing
/// value, or consecutive samples more than `gap_after_ms` apart — splits the line: the result
/// is a list of segments. A run of at most 2 samples inside a column is returned as it is.
pub fn decimate(
    history: &GpuHistory,
    metric: Metric,
    from_ms: u64,
    to_ms: u64,
    columns: usize,
    gap_after_ms: u64,
) -> Vec<Vec<[f64; 2]>> {
    let Some(layout) = ColumnLayout::new(history, from_ms, to_ms, columns) else {
        return Vec::new();
    };
    let mut lines = LineBuilder {
        history,
        metric,
        gap_after_ms,
        first_index: layout.indices.start,
        lines: Vec::new(),
        line: Vec::new(),
        run: None,
    };
    for (_column, indices) in layout.occupied_columns(history) {
        history.walk(metric, indices, gap_after_ms, &mut |piece| lines.add(piece));
        lines.flush_run();
    }
    lines.finish()
}

/// Every raw point, same segmentation (for small windows and for the benchmark's comparison).
pub fn all_points(
    history: &GpuHistory,
    metric: Metric,
    from_ms: u64,
    to_ms: u64,
    gap_after_ms: u64,
) -> Vec<Vec<[f64; 2]>> {
    let indices = history.range(from_ms, to_ms);
    let mut lines = Vec::new();
    let mut line = Vec::new();
    for index in indices.clone() {
        let point = history.time_ms(index).zip(history.value(metric, index));
        let joins = index == indices.start || history.step_before_ms(index) <= gap_after_ms;
        if (point.is_none() || !joins) && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        if let Some((time_ms, value)) = point {
            line.push([seconds(time_ms), value]);
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Per pixel column, the OR of the throttle bits of the samples in it (None when the column
/// has no sample with a throttle reading).
pub fn throttle_columns(
    history: &GpuHistory,
    from_ms: u64,
    to_ms: u64,
    columns: usize,
) -> Vec<Option<u64>> {
    let Some(layout) = ColumnLayout::new(history, from_ms, to_ms, columns) else {
        return Vec::new();
    };
    let mut bits = vec![None; columns];
    for (column, indices) in layout.occupied_columns(history) {
        if let Some(slot) = bits.get_mut(column) {
            *slot = history.throttle_or(indices);
        }
    }
    bits
}

/// Which samples fall in which pixel column.
struct ColumnLayout {
    from_ms: u64,
    /// `to_ms - from_ms + 1`, so the last millisecond still falls in the last column.
    span_ms: u128,
    columns: u128,
    indices: Range<usize>,
}

impl ColumnLayout {
    fn new(history: &GpuHistory, from_ms: u64, to_ms: u64, columns: usize) -> Option<Self> {
        let indices = history.range(from_ms, to_ms);
        if columns == 0 || indices.is_empty() {
            return None;
        }
        Some(ColumnLayout {
            from_ms,
            span_ms: u128::from(to_ms - from_ms) + 1,
            columns: columns as u128,
            indices,
        })
    }

    fn column_of(&self, time_ms: u64) -> u128 {
        u128::from(time_ms.saturating_sub(self.from_ms)) * self.columns / self.span_ms
    }

    /// The first time in column `column`: the smallest t with `column_of(t) >= column`.
    fn column_start_ms(&self, column: u128) -> u128 {
        u128::from(self.from_ms) + (column * self.span_ms).div_ceil(self.columns)
    }

    /// Each column that holds samples, with their indices, found by searching from one
    /// occupied column to the next (so empty columns cost nothing).
    fn occupied_columns<'a>(
        &'a self,
        history: &'a GpuHistory,
    ) -> impl Iterator<Item = (usize, Range<usize>)> + 'a {
        let mut start = self.indices.start;
        let mut previous_width = 1;
        std::iter::from_fn(move || {
            if start >= self.indices.end {
                return None;
            }
            let column = self.column_of(history.time_ms(start)?);
            let next_start_ms = self.column_start_ms(column + 1);
            let end = first_index_from(
                history,
                start..self.indices.end,
                start + previous_width,
                next_start_ms,
            )
            .max(start + 1);
            let indices = start..end;
            previous_width = end - start;
            start = end;
            Some((usize::try_from(column).unwrap_or(usize::MAX), indices))
        })
    }
}

/// The first index in `within` whose time is at least `limit_ms` (or `within.end`), searched
/// outward from `guess`: with steady sampling the previous column's width lands within a
/// probe or two, where a plain binary search over a day would take 20.
fn first_index_from(
    history: &GpuHistory,
    within: Range<usize>,
    guess: usize,
    limit_ms: u128,
) -> usize {
    let before = |index: usize| {
        history
            .time_ms(index)
            .is_some_and(|time_ms| u128::from(time_ms) < limit_ms)
    };
    let guess = guess.clamp(within.start, within.end);
    // The answer lies in low..=high.
    let (mut low, mut high) = (within.start, within.end);
    let mut step = 1;
    if guess < within.end && before(guess) {
        low = guess + 1;
        while low + step - 1 < within.end {
            let probe = low + step - 1;
            if !before(probe) {
                high = probe;
                break;
            }
            low = probe + 1;
            step *= 2;
        }
    } else {
        high = guess;
        while high >= within.start + step {
            let probe = high - step;
            if before(probe) {
                low = probe + 1;
                break;
            }
            high = probe;
            step *= 2;
        }
    }
    history.partition_point(low, high, |time_ms| u128::from(time_ms) < limit_ms)
}

/// Collects `Piece`s into line segments.
struct LineBuilder<'h> {
    history: &'h GpuHistory,
    metric: Metric,
    gap_after_ms: u64,
    /// First index of the whole request: no gap is looked for before it.
    first_index: usize,
    lines: Vec<Vec<[f64; 2]>>,
    line: Vec<[f64; 2]>,
    /// Present samples of the current column, not yet turned into points.
    run: Option<PresentRun>,
}

impl LineBuilder<'_> {
    fn add(&mut self, piece: Piece) {
        let Piece::Present(present) = piece else {
            self.break_line();
            return;
        };
        let first = present.first;
        if first > self.first_index && self.history.step_before_ms(first) > self.gap_after_ms {
            self.break_line();
        }
        match &mut self.run {
            Some(run) => run.merge(&present),
            None => self.run = Some(present),
        }
    }

    /// Ends the current column's run: its min and max (or its samples, if 2 or fewer).
    fn flush_run(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        if run.end - run.first <= 2 {
            for index in run.first..run.end {
                self.push_point(index);
            }
        } else if run.min_index == run.max_index {
            self.push_point(run.min_index);
        } else {
            self.push_point(run.min_index.min(run.max_index));
            self.push_point(run.min_index.max(run.max_index));
        }
    }

    fn push_point(&mut self, index: usize) {
        if let (Some(time_ms), Some(value)) = (
            self.history.time_ms(index),
            self.history.value(self.metric, index),
        ) {
            self.line.push([seconds(time_ms), value]);
        }
    }

    fn break_line(&mut self) {
        self.flush_run();
        if !self.line.is_empty() {
            self.lines.push(std::mem::take(&mut self.line));
        }
    }

    fn finish(mut self) -> Vec<Vec<[f64; 2]>> {
        self.break_line();
        self.lines
    }
}

fn seconds(time_ms: u64) -> f64 {
    time_ms as f64 / 1000.0
}
