//! The energy counter, read at most once a second. `nvmlDeviceGetTotalEnergyConsumption`
//! took 3.1 ms a call on an H200 with driver 580 (other readings 1 to 25 µs), so reading it at
//! every sample (10 a second, per GPU) cost a quarter of a core on eight GPUs. Between reads
//! the counter is carried forward by the power draw times the time since the last sample; the
//! next real read replaces the estimate. What is reported never goes down.

/// How often the driver's counter is really read.
pub const COUNTER_EVERY_MS: u64 = 1_000;

/// One GPU's energy counter: the last real read, and the estimate carried since.
#[derive(Debug, Clone, Default)]
pub struct EnergyCounter {
    /// When the counter was last really read (monotonic milliseconds), whatever it answered.
    read_at_ms: Option<u64>,
    /// What is reported, in microjoules (power in mW times ms), so short steps are not lost.
    reported_uj: Option<u128>,
    /// When `reported_uj` was last moved forward.
    carried_at_ms: u64,
    /// The most ever reported, kept across a failed read so the next one is not lower (the
    /// counter only restarts with the driver, and a new driver means a new backend).
    floor_uj: u128,
}

impl EnergyCounter {
    /// Whether the driver's counter should be read at `now_ms`: at the first sample, a second
    /// after the last read, and whenever the power draw is unknown (nothing to carry it by).
    pub fn due(&self, now_ms: u64, power_draw_mw: Option<u32>) -> bool {
        power_draw_mw.is_none()
            || self
                .read_at_ms
                .is_none_or(|read_at| now_ms.saturating_sub(read_at) >= COUNTER_EVERY_MS)
    }

    /// Takes a real read of the counter (`None`: the card has none, or it failed this time).
    pub fn read(&mut self, now_ms: u64, counter_mj: Option<u64>) -> Option<u64> {
        self.read_at_ms = Some(now_ms);
        self.carried_at_ms = now_ms;
        // An estimate that ran ahead is kept until the counter passes it: never backwards.
        self.reported_uj =
            counter_mj.map(|counter_mj| self.floor_uj.max(u128::from(counter_mj) * 1_000));
        self.floor_uj = self.reported_uj.unwrap_or(self.floor_uj);
        self.reported_mj()
    }

    /// Carries the counter to `now_ms` by `power_draw_mw` since the last sample, without
    /// asking the driver.
    pub fn carry(&mut self, now_ms: u64, power_draw_mw: u32) -> Option<u64> {
        let elapsed_ms = now_ms.saturating_sub(self.carried_at_ms);
        self.carried_at_ms = self.carried_at_ms.max(now_ms);
        if let Some(reported) = &mut self.reported_uj {
            *reported += u128::from(power_draw_mw) * u128::from(elapsed_ms);
            self.floor_uj = *reported;
        }
        self.reported_mj()
    }

    fn reported_mj(&self) -> Option<u64> {
        self.reported_uj
            .map(|uj| u64::try_from(uj / 1_000).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples the counter like the backend does; returns what was reported and whether the
    /// driver was asked.
    fn sample(
        counter: &mut EnergyCounter,
        now_ms: u64,
        power_mw: Option<u32>,
        driver_mj: u64,
    ) -> (Option<u64>, bool) {
        match power_mw {
            Some(power_mw) if !counter.due(now_ms, Some(power_mw)) => {
                (counter.carry(now_ms, power_mw), false)
            }
            _ => (counter.read(now_ms, Some(driver_mj)), true),
        }
    }

    #[test]
    fn the_counter_is_read_once_a_second_and_carried_by_power_between() {
        let mut counter = EnergyCounter::default();
        // 300 W steady: the driver's counter grows 30 J each 100 ms sample.
        let driver_at = |now_ms: u64| 5_000_000 + now_ms * 300;
        let mut reads = 0;
        let mut last = 0;
        for step in 0..=50u64 {
            let now_ms = step * 100;
            let (reported, asked) = sample(&mut counter, now_ms, Some(300_000), driver_at(now_ms));
            reads += u32::from(asked);
            let reported = reported.unwrap_or(0);
            assert_eq!(reported, driver_at(now_ms), "at {now_ms} ms");
            assert!(reported >= last);
            last = reported;
        }
        // 5 s at 100 ms: the first sample and one a second.
        assert_eq!(reads, 6);
    }

    #[test]
    fn an_estimate_ahead_of_the_counter_is_held_never_taken_back() {
        let mut counter = EnergyCounter::default();
        assert_eq!(counter.read(0, Some(1_000)), Some(1_000));
        // Power said 400 W for 500 ms (200 J), but the counter will say only 100 J more.
        assert_eq!(counter.carry(500, 400_000), Some(201_000));
        assert!(!counter.due(500, Some(400_000)));
        assert!(counter.due(1_000, Some(400_000)));
        assert_eq!(counter.read(1_000, Some(101_000)), Some(201_000));
        // A failed read says nothing, and the next one is still not lower.
        assert_eq!(counter.read(2_000, None), None);
        assert_eq!(counter.read(3_000, Some(151_000)), Some(201_000));
        // The counter passes the estimate: it is taken again.
        assert_eq!(counter.read(4_000, Some(301_000)), Some(301_000));
    }

    #[test]
    fn unknown_power_reads_the_counter_and_no_counter_reports_none() {
        let mut counter = EnergyCounter::default();
        assert!(counter.due(0, None));
        assert_eq!(counter.read(0, Some(7)), Some(7));
        assert!(counter.due(100, None), "nothing to carry it by");
        let mut missing = EnergyCounter::default();
        assert_eq!(missing.read(0, None), None);
        assert_eq!(missing.carry(100, 300_000), None);
        assert!(
            !missing.due(100, Some(300_000)),
            "not asked again within the second"
        );
    }

    #[test]
    fn short_steps_add_up() {
        let mut counter = EnergyCounter::default();
        counter.read(0, Some(0));
        // 1 W for 1 ms is 1 mJ; 0.5 W for 1 ms a hundred times is 50 mJ.
        let mut reported = None;
        for now_ms in 1..=100 {
            reported = counter.carry(now_ms, 500);
        }
        assert_eq!(reported, Some(50));
    }
}
