//! Time on plot axes: x is Unix seconds; labels are the local wall-clock time.

/// The time span the graphs show this frame, and whether to force it onto the axis.
#[derive(Clone, Copy)]
pub(crate) struct TimeSpan {
    pub(crate) from_ms: u64,
    pub(crate) to_ms: u64,
    pub(crate) force: bool,
    pub(crate) gap_after_ms: u64,
}

/// Unix ms as the x axis's Unix seconds.
pub(crate) fn seconds(unix_ms: u64) -> f64 {
    unix_ms as f64 / 1000.0
}

/// The x axis's Unix seconds as Unix ms (0 before the epoch).
pub(crate) fn unix_ms(unix_seconds: f64) -> u64 {
    (unix_seconds.max(0.0) * 1000.0) as u64
}

/// Local wall-clock time of a Unix timestamp in seconds: "14:05:09", or "14:05" when
/// `with_seconds` is false.
/// The plots count time in seconds as `f64`; the text is `units::local_time`'s.
pub fn clock_time(unix_seconds: f64, with_seconds: bool) -> String {
    let format = if with_seconds { "%H:%M:%S" } else { "%H:%M" };
    // Only an empty plot's own bounds reach before 1970: such a grid mark gets no label.
    let at_ms = (unix_seconds * 1000.0).round();
    if !(at_ms >= 0.0 && at_ms < u64::MAX as f64) {
        return String::new();
    }
    gputune_formats::units::local_time(at_ms as u64, format)
}

/// An axis label for a grid mark: seconds shown only when the visible span is short.
pub fn axis_label(unix_seconds: f64, visible_span_seconds: f64) -> String {
    clock_time(unix_seconds, visible_span_seconds <= 15.0 * 60.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_time_has_the_requested_precision() {
        let label = clock_time(1_700_000_000.0, true);
        assert_eq!(label.len(), 8, "{label}");
        assert_eq!(clock_time(1_700_000_000.0, false).len(), 5);
        assert_eq!(axis_label(1_700_000_000.0, 3600.0).len(), 5);
    }
}
