//! How often news from the tuning service may redraw the window. Sampling fast must not mean
//! drawing fast: readings are kept at the sampling rate, but the window draws them at most
//! once per `min_frame_interval`, and once per piece of news (egui draws twice for an
//! immediate request, "to let things settle"; a request with a delay draws once).

use std::time::{Duration, Instant};

/// The shortest time between two frames that news (not the user) asks for: 4 frames a second.
pub const MIN_FRAME_INTERVAL: Duration = Duration::from_millis(250);

/// The delay before the next repaint, given when the last one was asked for.
#[derive(Debug)]
pub struct RepaintPacer {
    min_frame_interval: Duration,
    /// When the last requested repaint is due.
    last_due: Option<Instant>,
}

impl RepaintPacer {
    pub fn new(min_frame_interval: Duration) -> RepaintPacer {
        RepaintPacer {
            min_frame_interval,
            last_due: None,
        }
    }

    /// The delay to ask for when news arrives at `now`: at once (1 ms, which egui draws once)
    /// when the last frame is long enough ago, else when the interval is up. A request that
    /// falls before a repaint already due adds nothing (egui keeps the earliest).
    pub fn delay(&mut self, now: Instant) -> Duration {
        let soonest = Duration::from_millis(1);
        let due = match self.last_due {
            Some(last) if now < last => {
                // A repaint is already due: this news is drawn with it.
                return last.saturating_duration_since(now).max(soonest);
            }
            Some(last) => (last + self.min_frame_interval).max(now + soonest),
            None => now + soonest,
        };
        self.last_due = Some(due);
        due.saturating_duration_since(now).max(soonest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn news_a_second_apart_is_drawn_at_once_and_fast_news_at_most_four_times_a_second() {
        let mut pacer = RepaintPacer::new(MIN_FRAME_INTERVAL);
        let start = Instant::now();
        assert_eq!(pacer.delay(start), Duration::from_millis(1));
        // One sample a second: each drawn at once.
        for second in 1..5 {
            let now = start + Duration::from_secs(second);
            assert_eq!(pacer.delay(now), Duration::from_millis(1));
        }
        // Ten samples a second (and several events each): frames 250 ms apart.
        let fast_start = start + Duration::from_secs(10);
        let mut due_times = Vec::new();
        for tenth in 0..30u64 {
            for event in 0..3u64 {
                let now = fast_start + Duration::from_millis(100 * tenth + event);
                due_times.push(now + pacer.delay(now));
            }
        }
        due_times.sort();
        due_times.dedup();
        // Every event is drawn by a frame no later than 250 ms after it, and the frames that
        // news asks for are at least 250 ms apart.
        for pair in due_times.windows(2) {
            assert!(pair[1] - pair[0] >= MIN_FRAME_INTERVAL, "{pair:?}");
        }
        assert!(
            due_times.len() <= 3 * 4 + 1,
            "{} frames in 3 s",
            due_times.len()
        );
    }
}
