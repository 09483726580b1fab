//! One column of a `GpuHistory`: its samples in ring slots, and summaries of fixed blocks of
//! slots at two sizes, updated on every write, so a query over many samples reads a few
//! summaries instead of every sample.
//!
//! A block's summary is restarted when the write head enters the block, so it describes
//! exactly the slots written since; a block the write head is inside of therefore mixes new
//! samples (summarized) with old ones (not), and readers must not use its summary
//! (`history::walk` reads such a block sample by sample).

/// Samples per block, smallest level first. 16 and 256 keep the raw edges of a pixel column
/// short (a 24 h plot 1000 px wide has 864 samples per column) at about 6 bytes per sample;
/// offsets inside a block are stored as `u8`, so no block may exceed 256 samples.
pub(crate) const BLOCK_SAMPLES: [usize; 2] = [16, 256];

const _: () = assert!(BLOCK_SAMPLES[0] <= 256 && BLOCK_SAMPLES[1] <= 256);

/// How a column summarizes a block of its samples.
pub(crate) trait SummaryKind {
    /// One stored sample.
    type Value: Copy;
    /// What a block keeps about its samples.
    type Summary: Copy;
    /// The summary of a block whose first sample is `value`.
    fn start(value: Self::Value) -> Self::Summary;
    /// Adds the sample at `offset` in the block; `previous` is the sample just before it.
    fn fold(summary: &mut Self::Summary, offset: u8, value: Self::Value, previous: Self::Value);
}

/// A ring column: `values[slot]` plus a summary per block at each level in `BLOCK_SAMPLES`.
#[derive(Clone)]
pub(crate) struct SummarizedColumn<K: SummaryKind> {
    values: Vec<K::Value>,
    levels: [Vec<K::Summary>; 2],
}

impl<K: SummaryKind> SummarizedColumn<K> {
    /// An empty column; it grows to at most `capacity` slots as they are written.
    pub(crate) fn new() -> Self {
        SummarizedColumn {
            values: Vec::new(),
            levels: [Vec::new(), Vec::new()],
        }
    }

    /// Stores `value` in `slot` and updates the blocks holding it. Slots are written in order
    /// (0, 1, ... capacity-1, 0, ...), so a new slot is always the next one.
    pub(crate) fn write(&mut self, slot: usize, value: K::Value, capacity: usize) {
        if slot == self.values.len() {
            reserve_toward(&mut self.values, capacity);
            self.values.push(value);
        } else if let Some(stored) = self.values.get_mut(slot) {
            *stored = value;
        } else {
            return;
        }
        let previous = slot
            .checked_sub(1)
            .and_then(|before| self.values.get(before))
            .copied();
        for (level, &block_samples) in self.levels.iter_mut().zip(&BLOCK_SAMPLES) {
            let block = slot / block_samples;
            let offset = slot % block_samples;
            match previous {
                Some(previous) if offset != 0 => {
                    if let Some(summary) = level.get_mut(block) {
                        K::fold(summary, offset as u8, value, previous);
                    }
                }
                _ => {
                    let summary = K::start(value);
                    if block == level.len() {
                        reserve_toward(level, capacity.div_ceil(block_samples));
                        level.push(summary);
                    } else if let Some(stored) = level.get_mut(block) {
                        *stored = summary;
                    }
                }
            }
        }
    }

    /// The sample in `slot`, if that slot was ever written.
    pub(crate) fn get(&self, slot: usize) -> Option<K::Value> {
        self.values.get(slot).copied()
    }

    /// The summary of block `block` at level `level` (an index into `BLOCK_SAMPLES`).
    pub(crate) fn summary(&self, level: usize, block: usize) -> Option<&K::Summary> {
        self.levels.get(level).and_then(|blocks| blocks.get(block))
    }

    /// Rewrites every stored sample (summaries stay as they are: callers only shift values in
    /// ways that keep them valid or conservative).
    pub(crate) fn map_values(&mut self, mut change: impl FnMut(K::Value) -> K::Value) {
        for value in &mut self.values {
            *value = change(*value);
        }
    }

    /// Bytes this column has allocated.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.values.capacity() * size_of::<K::Value>()
            + self
                .levels
                .iter()
                .map(|level| level.capacity() * size_of::<K::Summary>())
                .sum::<usize>()
    }
}

/// Grows `vec` geometrically but never past `limit` elements, so a full history allocates
/// exactly its capacity (plain doubling would overshoot 864,000 samples by 21 %).
fn reserve_toward<T>(vec: &mut Vec<T>, limit: usize) {
    if vec.len() < vec.capacity() {
        return;
    }
    let additional = vec
        .len()
        .max(1024)
        .min(limit.saturating_sub(vec.len()))
        .max(1);
    vec.reserve_exact(additional);
}

/// An integer type a metric is stored in, with its largest value meaning "missing".
pub(crate) trait Quantized: Copy + Ord + Into<u32> {
    /// The "missing" sentinel.
    const MISSING: Self;
    /// `value`, clamped below the sentinel.
    fn saturating_from(value: u32) -> Self;
}

impl Quantized for u8 {
    const MISSING: u8 = u8::MAX;
    fn saturating_from(value: u32) -> u8 {
        value.min(u32::from(u8::MAX - 1)) as u8
    }
}

impl Quantized for u16 {
    const MISSING: u16 = u16::MAX;
    fn saturating_from(value: u32) -> u16 {
        value.min(u32::from(u16::MAX - 1)) as u16
    }
}

impl Quantized for u32 {
    const MISSING: u32 = u32::MAX;
    fn saturating_from(value: u32) -> u32 {
        value.min(u32::MAX - 1)
    }
}

/// `Extremes::presence` bit: the block has at least one present sample.
pub(crate) const SOME_PRESENT: u8 = 1;
/// `Extremes::presence` bit: the block has at least one missing sample.
pub(crate) const SOME_MISSING: u8 = 2;

/// Smallest and largest present sample of a block, where each first occurs, and whether
/// samples are missing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extremes<T> {
    pub(crate) min: T,
    pub(crate) max: T,
    pub(crate) min_offset: u8,
    pub(crate) max_offset: u8,
    /// `SOME_PRESENT` | `SOME_MISSING`.
    pub(crate) presence: u8,
}

/// Summary kind of a metric column: min/max per block.
#[derive(Clone)]
pub(crate) struct MinMax<T>(std::marker::PhantomData<T>);

impl<T: Quantized> SummaryKind for MinMax<T> {
    type Value = T;
    type Summary = Extremes<T>;

    fn start(value: T) -> Extremes<T> {
        Extremes {
            min: value,
            max: value,
            min_offset: 0,
            max_offset: 0,
            presence: if value == T::MISSING {
                SOME_MISSING
            } else {
                SOME_PRESENT
            },
        }
    }

    fn fold(summary: &mut Extremes<T>, offset: u8, value: T, _previous: T) {
        if value == T::MISSING {
            summary.presence |= SOME_MISSING;
        } else if summary.presence & SOME_PRESENT == 0 {
            *summary = Extremes {
                min: value,
                max: value,
                min_offset: offset,
                max_offset: offset,
                presence: summary.presence | SOME_PRESENT,
            };
        } else {
            // Strict comparisons keep the first occurrence, as a scan in time order would.
            if value < summary.min {
                summary.min = value;
                summary.min_offset = offset;
            }
            if value > summary.max {
                summary.max = value;
                summary.max_offset = offset;
            }
        }
    }
}

/// Summary kind of the time column (ms after the history's base): the largest step between
/// consecutive samples inside a block, so a query can tell whether the block holds a time gap.
#[derive(Clone)]
pub(crate) struct TimeSteps;

impl SummaryKind for TimeSteps {
    type Value = u32;
    type Summary = u32;

    fn start(_time_offset_ms: u32) -> u32 {
        0
    }

    fn fold(max_step_ms: &mut u32, _offset: u8, time_offset_ms: u32, previous_ms: u32) {
        *max_step_ms = (*max_step_ms).max(time_offset_ms.saturating_sub(previous_ms));
    }
}

/// Stored throttle bits meaning "no reading".
pub(crate) const THROTTLE_MISSING: u16 = u16::MAX;
/// Bit of a throttle summary saying at least one sample had a reading. NVML's reasons use
/// bits 0..=8, and `ThrottleReasons` keeps only those.
pub(crate) const THROTTLE_SOME_PRESENT: u16 = 0x8000;
/// The bits a throttle sample can carry.
pub(crate) const THROTTLE_BITS: u16 = 0x7FFF;

/// Summary kind of the throttle column: the OR of a block's bits.
#[derive(Clone)]
pub(crate) struct ThrottleOr;

impl SummaryKind for ThrottleOr {
    type Value = u16;
    type Summary = u16;

    fn start(bits: u16) -> u16 {
        if bits == THROTTLE_MISSING {
            0
        } else {
            bits | THROTTLE_SOME_PRESENT
        }
    }

    fn fold(summary: &mut u16, _offset: u8, bits: u16, _previous: u16) {
        *summary |= ThrottleOr::start(bits);
    }
}
