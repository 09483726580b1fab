//! Where time comes from. Real code reads the wall clock ([`wall_clock_ms`], [`WallClock`]);
//! the simulator and the tuning engine take a [`Clock`], so a test can hand them a
//! [`ManualClock`] and run a trial's countdown or an hour of simulated load in microseconds,
//! without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time: the date for what is shown and stored, and a monotonic instant for
/// deadlines (a trial's end must not move when the system clock is set).
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch (a manual clock: since whatever it started at).
    fn now_ms(&self) -> u64;
    /// The monotonic time that deadlines are measured in; never goes backwards.
    fn now(&self) -> Instant;
}

/// Real time: the system's date and `Instant::now()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now_ms(&self) -> u64 {
        wall_clock_ms()
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Milliseconds since the Unix epoch (0 if the system clock is before 1970).
pub fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// A clock that moves only when told to, for tests. Clones share the same time; its instants
/// move with its milliseconds, from the moment it was made.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
    start_ms: u64,
    start: Instant,
}

impl ManualClock {
    pub fn starting_at(now_ms: u64) -> ManualClock {
        ManualClock {
            now_ms: Arc::new(AtomicU64::new(now_ms)),
            start_ms: now_ms,
            start: Instant::now(),
        }
    }

    pub fn advance_ms(&self, elapsed_ms: u64) {
        self.now_ms.fetch_add(elapsed_ms, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::starting_at(0)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    fn now(&self) -> Instant {
        let elapsed_ms = self.now_ms().saturating_sub(self.start_ms);
        self.start + Duration::from_millis(elapsed_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_its_date_and_its_instants_together_and_only_when_told() {
        let clock = ManualClock::starting_at(1_000);
        let shared = clock.clone();
        let (date_ms, instant) = (clock.now_ms(), clock.now());
        assert_eq!(date_ms, 1_000);
        assert_eq!(clock.now(), instant, "it does not move by itself");
        shared.advance_ms(2_500);
        assert_eq!(clock.now_ms(), 3_500);
        assert_eq!(clock.now() - instant, Duration::from_millis(2_500));
    }

    #[test]
    fn the_wall_clock_gives_today_s_date() {
        // 2020-01-01 in ms: any machine running this is past it.
        assert!(WallClock.now_ms() > 1_577_836_800_000);
        assert!(WallClock.now() <= Instant::now());
    }
}
