//! Whether a card bears out a clock-lock record. NVML cannot read a lock back, so a record is
//! only what a gputune wrote: a clock the card runs above the recorded maximum shows that lock
//! is not in force (the driver was reloaded, another tool reset it, or the record is another
//! card's under the same UUID, such as a test's fake card), and the record is then not believed:
//! the lock is "unknown", never restored or reported as fact.

use gputune_formats::card::Telemetry;
use gputune_formats::tuning::{ClockLockInForce, LockRecord};

/// How far above a lock's maximum a reading may be and still be that lock: clocks move in bins
/// of about 15 MHz, and a reading may be a step behind a change.
pub const CLOCK_SLACK_MHZ: u32 = 50;

/// `record` as the card's reading `now` leaves it: each lock the reading contradicts becomes
/// [`ClockLockInForce::Unknown`]; a lock the reading cannot judge (an idle card below its maximum, a
/// clock the card does not report) stays as recorded.
pub fn borne_out(record: LockRecord, now: &Telemetry) -> LockRecord {
    LockRecord {
        gpu_clock_lock: unless_above(record.gpu_clock_lock, now.gpu_clock_mhz),
        memory_clock_lock: unless_above(record.memory_clock_lock, now.memory_clock_mhz),
    }
}

fn unless_above(lock: ClockLockInForce, clock_mhz: Option<u32>) -> ClockLockInForce {
    match (lock, clock_mhz) {
        (ClockLockInForce::Locked { max_mhz, .. }, Some(clock_mhz))
            if clock_mhz > max_mhz.saturating_add(CLOCK_SLACK_MHZ) =>
        {
            tracing::info!(
                "A clock lock of at most {max_mhz} MHz is on record, but the card runs at {clock_mhz} MHz: the record is not believed (the lock is unknown)."
            );
            ClockLockInForce::Unknown
        }
        _ => lock,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(gpu: ClockLockInForce, memory: ClockLockInForce) -> LockRecord {
        LockRecord {
            gpu_clock_lock: gpu,
            memory_clock_lock: memory,
        }
    }

    fn reading(gpu_clock_mhz: Option<u32>, memory_clock_mhz: Option<u32>) -> Telemetry {
        Telemetry {
            gpu_clock_mhz,
            memory_clock_mhz,
            ..Telemetry::default()
        }
    }

    const LOCKED: ClockLockInForce = ClockLockInForce::Locked {
        min_mhz: 500,
        max_mhz: 1500,
    };

    #[test]
    fn a_clock_above_the_recorded_maximum_makes_that_lock_unknown() {
        let now = reading(Some(2520), Some(1400));
        assert_eq!(
            borne_out(record(LOCKED, LOCKED), &now),
            record(ClockLockInForce::Unknown, LOCKED)
        );
        let now = reading(Some(1500), Some(10_501));
        assert_eq!(
            borne_out(record(LOCKED, LOCKED), &now),
            record(LOCKED, ClockLockInForce::Unknown)
        );
    }

    #[test]
    fn a_reading_that_cannot_judge_leaves_the_record_as_it_is() {
        for now in [
            reading(Some(210), Some(405)),
            reading(Some(1500 + CLOCK_SLACK_MHZ), None),
            reading(None, None),
        ] {
            assert_eq!(
                borne_out(record(LOCKED, LOCKED), &now).gpu_clock_lock,
                LOCKED
            );
        }
        let unlocked = record(ClockLockInForce::Unlocked, ClockLockInForce::Unknown);
        assert_eq!(
            borne_out(unlocked, &reading(Some(2520), Some(10_501))),
            unlocked
        );
    }
}
