//! What one job did on one card, kept as running figures so a job of days costs the same few
//! bytes as one of seconds: no reading is kept.

use gputune_formats::card::Telemetry;
use gputune_formats::jobs::{JOULES_PER_KWH, JobGpu};
use gputune_formats::throttle::ThrottleReason;
use gputune_formats::tuning::ThrottleTime;

/// Running figures over a card's readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CardTally {
    /// The energy counter when the job began (the reading before its session, else its
    /// first), and at its last reading (mJ).
    counter_start_mj: Option<u64>,
    counter_last_mj: Option<u64>,
    /// The counter went backwards (a driver reload): it no longer says the job's energy.
    counter_broken: bool,
    /// Power times time between readings (mJ), for a card without a counter.
    integrated_mj: f64,
    power_sum_mw: u64,
    power_readings: u64,
    peak_power_mw: Option<u32>,
    peak_temperature_c: Option<u32>,
    /// Milliseconds in each reason, in `ThrottleReason::ALL`'s order.
    throttle_ms: [u64; ThrottleReason::ALL.len()],
    readings: u64,
    first_ms: Option<u64>,
    /// The last reading's time, power and throttle reasons: the next reading's interval is
    /// counted at these.
    last_ms: Option<u64>,
    last_power_mw: Option<u32>,
    last_throttle_bits: u64,
}

impl CardTally {
    /// A tally whose energy counts from `counter_at_start_mj` (the card's counter when the
    /// session began), when known.
    pub fn starting_at(counter_at_start_mj: Option<u64>) -> CardTally {
        CardTally {
            counter_start_mj: counter_at_start_mj,
            ..CardTally::default()
        }
    }

    /// Takes in one reading. Readings not newer than the last are ignored.
    pub fn observe(&mut self, reading: &Telemetry) {
        let at_ms = reading.sampled_at_ms;
        if let Some(last_ms) = self.last_ms {
            if at_ms <= last_ms {
                return;
            }
            let elapsed_ms = at_ms - last_ms;
            if let Some(power_mw) = self.last_power_mw {
                // mW × ms = µJ.
                self.integrated_mj += f64::from(power_mw) * elapsed_ms as f64 / 1000.0;
            }
            for (position, reason) in ThrottleReason::ALL.iter().enumerate() {
                if self.last_throttle_bits & reason.bit() != 0 {
                    self.throttle_ms[position] += elapsed_ms;
                }
            }
        }
        self.readings += 1;
        self.first_ms.get_or_insert(at_ms);
        self.last_ms = Some(at_ms);
        self.last_power_mw = reading.power_draw_mw;
        self.last_throttle_bits = reading.throttle_reasons.map_or(0, |reasons| reasons.bits());
        if let Some(power_mw) = reading.power_draw_mw {
            self.power_sum_mw += u64::from(power_mw);
            self.power_readings += 1;
            self.peak_power_mw = self.peak_power_mw.max(Some(power_mw));
        }
        if let Some(celsius) = reading.temperature_c {
            self.peak_temperature_c = self.peak_temperature_c.max(Some(celsius));
        }
        match reading.energy_total_mj {
            Some(counter_mj) => {
                let floor = self.counter_last_mj.or(self.counter_start_mj);
                if floor.is_some_and(|floor| counter_mj < floor) {
                    self.counter_broken = true;
                }
                self.counter_start_mj.get_or_insert(counter_mj);
                self.counter_last_mj = Some(counter_mj);
            }
            None => self.counter_broken |= self.counter_start_mj.is_some(),
        }
    }

    /// The energy in joules, and whether it is estimated (power times time).
    pub fn energy_j(&self) -> (f64, bool) {
        match (self.counter_start_mj, self.counter_last_mj) {
            (Some(start_mj), Some(last_mj)) if !self.counter_broken && last_mj >= start_mj => {
                ((last_mj - start_mj) as f64 / 1000.0, false)
            }
            _ => (self.integrated_mj / 1000.0, true),
        }
    }

    /// The card's part of a job record (its identity and held settings are the engine's).
    pub fn to_job_gpu(
        &self,
        gpu_index: u32,
        gpu_uuid: &str,
        name: &str,
        settings_held: Vec<gputune_formats::card::Setting>,
    ) -> JobGpu {
        let (energy_j, energy_estimated) = self.energy_j();
        JobGpu {
            gpu_index,
            gpu_uuid: gpu_uuid.to_string(),
            name: name.to_string(),
            energy_j,
            energy_kwh: energy_j / JOULES_PER_KWH,
            energy_estimated,
            mean_power_w: (self.power_readings > 0)
                .then(|| self.power_sum_mw as f64 / self.power_readings as f64 / 1000.0),
            peak_power_w: self.peak_power_mw.map(|mw| f64::from(mw) / 1000.0),
            peak_temperature_c: self.peak_temperature_c,
            throttle: ThrottleReason::ALL
                .iter()
                .zip(self.throttle_ms)
                .filter(|(_, ms)| *ms > 0)
                .map(|(reason, ms)| ThrottleTime {
                    reason: *reason,
                    seconds: ms as f64 / 1000.0,
                })
                .collect(),
            readings: self.readings,
            first_reading_ms: self.first_ms,
            last_reading_ms: self.last_ms,
            settings_held,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::throttle::ThrottleReasons;

    fn reading(at_ms: u64, power_w: u32, energy_mj: Option<u64>, bits: u64) -> Telemetry {
        Telemetry {
            sampled_at_ms: at_ms,
            power_draw_mw: Some(power_w * 1000),
            temperature_c: Some(40 + power_w / 10),
            energy_total_mj: energy_mj,
            throttle_reasons: Some(ThrottleReasons::from_bits(bits)),
            ..Telemetry::default()
        }
    }

    #[test]
    fn the_counter_gives_the_energy_and_times_go_to_the_reasons_in_force() {
        let mut tally = CardTally::starting_at(Some(1_000_000));
        tally.observe(&reading(10_000, 200, Some(1_100_000), 0x4));
        tally.observe(&reading(12_000, 400, Some(1_900_000), 0x4 | 0x20));
        tally.observe(&reading(13_000, 300, Some(2_250_000), 0));
        // An old reading again changes nothing.
        tally.observe(&reading(12_500, 900, Some(9_000_000), 0x8));
        let gpu = tally.to_job_gpu(0, "GPU-1", "RTX 4090", Vec::new());
        assert_eq!(gpu.energy_j, 1_250.0);
        assert!(!gpu.energy_estimated);
        assert_eq!(gpu.peak_power_w, Some(400.0));
        assert_eq!(gpu.mean_power_w, Some(300.0));
        assert_eq!(gpu.peak_temperature_c, Some(80));
        assert_eq!(
            gpu.throttle,
            vec![
                ThrottleTime {
                    reason: ThrottleReason::SwPowerCap,
                    seconds: 3.0
                },
                ThrottleTime {
                    reason: ThrottleReason::SwThermalSlowdown,
                    seconds: 1.0
                },
            ]
        );
        assert_eq!(
            (gpu.first_reading_ms, gpu.last_reading_ms),
            (Some(10_000), Some(13_000))
        );
        assert_eq!(gpu.readings, 3);
    }

    #[test]
    fn without_a_counter_or_after_a_reload_the_energy_is_power_times_time() {
        let mut tally = CardTally::starting_at(None);
        tally.observe(&reading(0, 100, None, 0));
        tally.observe(&reading(2_000, 300, None, 0));
        tally.observe(&reading(3_000, 300, None, 0));
        assert_eq!(tally.energy_j(), (500.0, true));
        let mut reloaded = CardTally::starting_at(Some(5_000_000));
        reloaded.observe(&reading(0, 100, Some(5_100_000), 0));
        reloaded.observe(&reading(1_000, 100, Some(20), 0));
        assert_eq!(reloaded.energy_j(), (100.0, true));
    }
}
