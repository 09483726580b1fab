//! One sample as the history stores it: the time and every metric in its stored integer steps.
//! The daemon keeps these on disk and sends them to the window, so a row read back is exactly
//! the sample that was pushed (no second rounding).

use serde::{Deserialize, Serialize};

use super::Metric;
use super::column::{THROTTLE_BITS, THROTTLE_MISSING};
use super::quantize::quantize;
use crate::device::Telemetry;

/// A sample in stored steps (power 0.1 W, memory 1 MiB, the rest in display units). On the
/// wire it is a compact array: `[time_ms, [values...], throttle_bits]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WireRow", into = "WireRow")]
pub struct HistoryRow {
    /// Unix ms.
    pub time_ms: u64,
    /// Each metric of [`Metric::ALL`] in its stored steps; `None` where it was not read.
    pub values: [Option<u32>; Metric::ALL.len()],
    /// NVML's throttle reasons bitmask (the bits the history keeps); `None` when not read.
    pub throttle_bits: Option<u16>,
}

impl HistoryRow {
    /// The row for a reading taken at `time_ms`; `None` is a failed read (a gap everywhere).
    pub fn from_reading(time_ms: u64, reading: Option<&Telemetry>) -> HistoryRow {
        HistoryRow {
            time_ms,
            values: Metric::ALL.map(|metric| reading.and_then(|reading| quantize(metric, reading))),
            throttle_bits: reading
                .and_then(|reading| reading.throttle_reasons)
                .map(|reasons| (reasons.bits() & u64::from(THROTTLE_BITS)) as u16),
        }
    }

    /// A failed read at `time_ms`.
    pub fn gap(time_ms: u64) -> HistoryRow {
        HistoryRow::from_reading(time_ms, None)
    }

    /// `metric` in stored steps.
    pub fn value(&self, metric: Metric) -> Option<u32> {
        self.values.get(metric as usize).copied().flatten()
    }

    /// The throttle bits as the columns store them.
    pub(crate) fn stored_throttle(&self) -> u16 {
        self.throttle_bits
            .map_or(THROTTLE_MISSING, |bits| bits & THROTTLE_BITS)
    }
}

/// The wire form: an array, about a third of the bytes of an object with names.
#[derive(Serialize, Deserialize)]
struct WireRow(u64, [Option<u32>; Metric::ALL.len()], Option<u16>);

impl From<WireRow> for HistoryRow {
    fn from(WireRow(time_ms, values, throttle_bits): WireRow) -> HistoryRow {
        HistoryRow {
            time_ms,
            values,
            throttle_bits,
        }
    }
}

impl From<HistoryRow> for WireRow {
    fn from(row: HistoryRow) -> WireRow {
        WireRow(row.time_ms, row.values, row.throttle_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_goes_over_the_wire_as_a_short_array_and_comes_back_the_same() {
        let mut row = HistoryRow::gap(1_700_000_000_123);
        row.values[Metric::PowerDrawW as usize] = Some(2874);
        row.values[Metric::MemoryUsedGib as usize] = Some(20_480);
        row.throttle_bits = Some(4);
        let text = serde_json::to_string(&row).unwrap();
        assert!(text.starts_with("[1700000000123,[2874,null"), "{text}");
        assert_eq!(serde_json::from_str::<HistoryRow>(&text).unwrap(), row);
        assert_eq!(row.value(Metric::PowerDrawW), Some(2874));
    }
}
