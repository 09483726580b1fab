//! One sample as the history stores it: the time and every metric in its stored integer steps.
//! The daemon keeps these on disk and sends them to the window, so a row read back is exactly
//! the sample that was pushed (no second rounding).

use super::Metric;
use super::column::{THROTTLE_BITS, THROTTLE_MISSING};
use super::quantize::quantize;
use gputune_formats::card::Telemetry;
use gputune_formats::history::{HISTORY_VALUES, HistoryRow};

// The row's array holds one value per metric.
const _: () = assert!(Metric::ALL.len() == HISTORY_VALUES);

/// A history row read and made as metrics: its values in stored steps, its throttle bits as the columns keep them.
pub trait MetricRow {
    /// The row for a reading taken at `time_ms`; `None` is a failed read (a gap everywhere).
    fn from_reading(time_ms: u64, reading: Option<&Telemetry>) -> HistoryRow;

    /// A failed read at `time_ms`.
    fn gap(time_ms: u64) -> HistoryRow;

    /// `metric` in stored steps.
    fn value(&self, metric: Metric) -> Option<u32>;

    /// The throttle bits as the columns store them.
    fn stored_throttle(&self) -> u16;
}

impl MetricRow for HistoryRow {
    fn from_reading(time_ms: u64, reading: Option<&Telemetry>) -> HistoryRow {
        HistoryRow {
            time_ms,
            values: Metric::ALL.map(|metric| reading.and_then(|reading| quantize(metric, reading))),
            throttle_bits: reading
                .and_then(|reading| reading.throttle_reasons)
                .map(|reasons| (reasons.bits() & u64::from(THROTTLE_BITS)) as u16),
        }
    }

    fn gap(time_ms: u64) -> HistoryRow {
        HistoryRow::from_reading(time_ms, None)
    }

    fn value(&self, metric: Metric) -> Option<u32> {
        self.values.get(metric as usize).copied().flatten()
    }

    fn stored_throttle(&self) -> u16 {
        self.throttle_bits
            .map_or(THROTTLE_MISSING, |bits| bits & THROTTLE_BITS)
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
