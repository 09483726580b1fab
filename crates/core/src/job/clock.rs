//! The clock a job's progress and readings share.

use std::time::Instant;

/// Milliseconds since a job began: the one clock for its progress and the card's readings
/// (a sweep's steps, a measured run). Progress readers stamp their readings with it.
#[derive(Debug, Clone, Copy)]
pub struct JobClock(Instant);

impl JobClock {
    pub fn start() -> JobClock {
        JobClock(Instant::now())
    }

    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
