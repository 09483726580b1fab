//! What the card did while a check ran, from the service's readings: clocks, temperature,
//! power against the limit, throttle reasons and the energy counter. A check that never
//! reaches the power limit did not stress the card, and the verdict says so (unless its clock
//! lock held it below the limit). Power is set only against the limit it was drawn under.

use serde::{Deserialize, Serialize};

use crate::card::{EccCounts, Telemetry};
use crate::throttle::{ThrottleReason, ThrottleReasons};

/// The readings of one span (a whole check, or one scan step).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Watched {
    pub readings: u32,
    pub clock_min_mhz: Option<u32>,
    pub clock_max_mhz: Option<u32>,
    pub temperature_peak_c: Option<u32>,
    pub power_mean_w: Option<f64>,
    pub power_peak_w: Option<f64>,
    /// The limit the card enforced at the last reading.
    pub power_limit_w: Option<f64>,
    /// Every throttle reason seen at least once.
    pub throttle_reasons: ThrottleReasons,
    /// Energy the card used over the span, from its counter (first to last reading).
    pub energy_j: Option<f64>,
    /// ECC errors the card counted over the span (volatile counters, last reading less the
    /// first); `None` for a card without ECC.
    #[serde(default)]
    pub ecc_errors: Option<EccCounts>,
    /// The top of the GPU clock lock in force, when one was: a card held there below its
    /// power limit was not meant to reach it.
    #[serde(default)]
    pub locked_max_mhz: Option<u32>,
    #[serde(skip)]
    ecc_first: Option<EccCounts>,
    #[serde(skip)]
    power_sum_w: f64,
    #[serde(skip)]
    power_readings: u32,
    #[serde(skip)]
    energy_first_mj: Option<u64>,
    #[serde(skip)]
    first_ms: Option<u64>,
    #[serde(skip)]
    last_ms: Option<u64>,
}

impl Watched {
    pub fn take(&mut self, reading: &Telemetry) {
        self.readings += 1;
        let clock = reading.sm_clock_mhz.or(reading.gpu_clock_mhz);
        if let Some(clock) = clock {
            self.clock_min_mhz = Some(self.clock_min_mhz.map_or(clock, |low| low.min(clock)));
            self.clock_max_mhz = Some(self.clock_max_mhz.map_or(clock, |high| high.max(clock)));
        }
        if let Some(temperature) = reading.temperature_c {
            self.temperature_peak_c = Some(self.temperature_peak_c.unwrap_or(0).max(temperature));
        }
        // A new limit: the power figures start again from this reading, so a sample taken before
        // the limit was in force (delivered after) is never set against it.
        if let (Some(limit_mw), Some(before_w)) = (reading.power_limit_mw, self.power_limit_w)
            && f64::from(limit_mw) / 1000.0 != before_w
        {
            self.power_sum_w = 0.0;
            self.power_readings = 0;
            self.power_mean_w = None;
            self.power_peak_w = None;
        }
        if let Some(power_mw) = reading.power_draw_mw {
            let power_w = f64::from(power_mw) / 1000.0;
            self.power_sum_w += power_w;
            self.power_readings += 1;
            self.power_mean_w = Some(self.power_sum_w / f64::from(self.power_readings));
            self.power_peak_w = Some(self.power_peak_w.unwrap_or(0.0).max(power_w));
        }
        if let Some(limit_mw) = reading.power_limit_mw {
            self.power_limit_w = Some(f64::from(limit_mw) / 1000.0);
        }
        if let Some(reasons) = reading.throttle_reasons {
            for reason in reasons.iter() {
                self.throttle_reasons.insert(reason);
            }
        }
        if let Some(energy_mj) = reading.energy_total_mj {
            match self.energy_first_mj {
                None => self.energy_first_mj = Some(energy_mj),
                Some(first) => {
                    self.energy_j = Some(energy_mj.saturating_sub(first) as f64 / 1000.0);
                }
            }
        }
        if let Some(ecc) = reading.ecc {
            let first = *self.ecc_first.get_or_insert(ecc);
            self.ecc_errors = Some(EccCounts {
                corrected_volatile: ecc
                    .corrected_volatile
                    .saturating_sub(first.corrected_volatile),
                uncorrected_volatile: ecc
                    .uncorrected_volatile
                    .saturating_sub(first.uncorrected_volatile),
            });
        }
        self.first_ms.get_or_insert(reading.sampled_at_ms);
        self.last_ms = Some(reading.sampled_at_ms);
    }

    /// The average power over the readings' span from the energy counter, watts: what the
    /// card drew in all, not only at the instants it was read.
    pub fn counter_power_w(&self) -> Option<f64> {
        let (first_ms, last_ms) = (self.first_ms?, self.last_ms?);
        let span_s = last_ms.saturating_sub(first_ms) as f64 / 1000.0;
        let energy_j = self.energy_j?;
        (span_s > 0.0).then(|| energy_j / span_s)
    }

    /// Whether the card drew within 5 % of its limit at some reading.
    pub fn reached_power_limit(&self) -> bool {
        match (self.power_peak_w, self.power_limit_w) {
            (Some(peak), Some(limit)) => peak >= limit * 0.95,
            _ => false,
        }
    }

    /// "2415-2745 MHz, 71 °C peak, 398 W average (450 W limit)"; parts without readings left out.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(clocks) = crate::units::clock_range_mhz(self.clock_min_mhz, self.clock_max_mhz)
        {
            parts.push(clocks);
        }
        if let Some(peak) = self.temperature_peak_c {
            parts.push(format!("{peak} °C peak"));
        }
        if let Some(mean) = self.power_mean_w {
            let limit = self
                .power_limit_w
                .map(|limit| format!(" of a {limit:.0} W limit"))
                .unwrap_or_default();
            let peak = self.power_peak_w.unwrap_or(mean);
            parts.push(format!("{mean:.0} W average, {peak:.0} W peak{limit}"));
        }
        // The card's own limits show up here; the clock lock the check asked for does not
        // need saying, nor idle between pulses.
        let throttles: Vec<&str> = self
            .throttle_reasons
            .iter()
            .filter(|reason| {
                !matches!(
                    reason,
                    ThrottleReason::GpuIdle | ThrottleReason::ApplicationsClocksSetting
                )
            })
            .map(ThrottleReason::label)
            .collect();
        if !throttles.is_empty() {
            parts.push(format!(
                "held back by: {}",
                throttles.join(", ").to_lowercase()
            ));
        }
        if let Some(ecc) = self.ecc_errors {
            parts.push(match (ecc.corrected_volatile, ecc.uncorrected_volatile) {
                (0, 0) => "no ECC errors".to_string(),
                (corrected, uncorrected) => {
                    format!("ECC errors: {corrected} corrected, {uncorrected} uncorrected")
                }
            });
        }
        if parts.is_empty() {
            "no readings of the card".to_string()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(
        at_ms: u64,
        clock: u32,
        temperature: u32,
        power_w: u32,
        energy_mj: u64,
    ) -> Telemetry {
        Telemetry {
            sampled_at_ms: at_ms,
            sm_clock_mhz: Some(clock),
            temperature_c: Some(temperature),
            power_draw_mw: Some(power_w * 1000),
            power_limit_mw: Some(450_000),
            energy_total_mj: Some(energy_mj),
            ..Telemetry::default()
        }
    }

    #[test]
    fn readings_give_the_range_peak_mean_and_energy() {
        let mut watched = Watched::default();
        watched.take(&reading(0, 2745, 60, 300, 1_000_000));
        watched.take(&reading(1000, 2415, 71, 440, 1_370_000));
        assert_eq!(watched.clock_min_mhz, Some(2415));
        assert_eq!(watched.clock_max_mhz, Some(2745));
        assert_eq!(watched.temperature_peak_c, Some(71));
        assert_eq!(watched.power_mean_w, Some(370.0));
        assert_eq!(watched.energy_j, Some(370.0));
        assert!(watched.reached_power_limit());
        assert_eq!(
            watched.summary(),
            "2415–2745 MHz, 71 °C peak, 370 W average, 440 W peak of a 450 W limit"
        );
    }

    #[test]
    fn a_card_far_below_its_limit_was_not_stressed_and_no_readings_say_so() {
        let mut watched = Watched::default();
        assert_eq!(watched.summary(), "no readings of the card");
        watched.take(&reading(0, 1800, 50, 200, 0));
        assert!(!watched.reached_power_limit());
    }
}
