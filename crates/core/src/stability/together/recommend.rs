//! The clock cap under which the in-phase check passes, when a step failed: proven by running
//! the failing step again at lower caps while the machine is still up (`together.rs` drives
//! those reruns), or worked out from the box power and clocks when it went down.

/// How far each rerun lowers the cap: six boost bins of 15 MHz.
pub const CAP_STEP_MHZ: u32 = 90;
/// The most reruns before giving up on finding a cap.
pub const MOST_RERUNS: u32 = 4;

use gputune_formats::reports::box_check::{BoxRecommendation, LOWEST_CAP_MHZ};

/// A clock rounded down to a 15 MHz boost bin.
pub fn to_bin(clock_mhz: u32) -> u32 {
    clock_mhz / 15 * 15
}

/// The first cap to try after a failure at `clock_max_mhz` (the highest clock any card reached
/// in the failing step): one step below it.
pub fn first_cap(clock_max_mhz: u32, cap_now_mhz: Option<u32>) -> Option<u32> {
    let top = cap_now_mhz.map_or(clock_max_mhz, |cap| cap.min(clock_max_mhz));
    let cap = to_bin(top.saturating_sub(CAP_STEP_MHZ));
    (cap >= LOWEST_CAP_MHZ).then_some(cap)
}

/// The next cap after `cap_mhz` failed too, until the reruns are spent.
pub fn next_cap(cap_mhz: u32, reruns_done: u32) -> Option<u32> {
    let cap = to_bin(cap_mhz.saturating_sub(CAP_STEP_MHZ));
    (reruns_done < MOST_RERUNS && cap >= LOWEST_CAP_MHZ).then_some(cap)
}

/// The cap to try after the machine went down, worked out from the box power and clocks
/// (`BoxRecommendation::after_trip`: the daemon says the same at its next start).
pub fn cap_after_trip(
    clock_max_mhz: Option<u32>,
    box_power_w: Option<f64>,
) -> Option<BoxRecommendation> {
    BoxRecommendation::after_trip(clock_max_mhz, box_power_w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_step_down_in_boost_bins_and_stop() {
        assert_eq!(first_cap(2745, None), Some(2655));
        assert_eq!(first_cap(2745, Some(2610)), Some(2520));
        assert_eq!(next_cap(2655, 1), Some(2565));
        assert_eq!(next_cap(2655, MOST_RERUNS), None);
        assert_eq!(first_cap(1550, None), None);
    }

    #[test]
    fn a_trip_gives_a_cap_about_five_percent_down_and_says_how() {
        let trip = cap_after_trip(Some(2745), Some(1650.4)).unwrap();
        assert_eq!(trip.clock_cap_mhz, 2595);
        assert!(!trip.confirmed);
        assert!(
            trip.how.contains("1,650 W") && trip.how.contains("2745 MHz"),
            "{}",
            trip.how
        );
        assert_eq!(cap_after_trip(None, Some(1650.0)), None);
        assert_eq!(
            gputune_formats::reports::box_check::watts_text(950.2),
            "950 W"
        );
    }
}
