//! Trying settings for a while: what the card did before and during a trial ([`TrialStats`],
//! [`comparison_table`]), and the guard that puts the card back from the journal however the
//! trial ends ([`RevertGuard`]).

use std::path::PathBuf;

use crate::device::{Backend, Telemetry, ThrottleReason};
use crate::tuning::journal::{Journal, JournalError, RestoreReport, restore_journal};

/// What a GPU did over a run of samples.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrialStats {
    pub samples: usize,
    /// From the first sample to the last.
    pub duration_s: f64,
    pub average_power_w: Option<f64>,
    pub average_sm_clock_mhz: Option<f64>,
    pub min_sm_clock_mhz: Option<u32>,
    pub average_temperature_c: Option<f64>,
    pub peak_temperature_c: Option<u32>,
    /// From the energy counter when the card has one, else from the average power.
    pub energy_wh_per_min: Option<f64>,
    /// Seconds under each throttle reason that was active at all, in NVML's order. Each
    /// interval between two samples counts under the reasons its closing sample reports.
    pub throttle_s: Vec<(ThrottleReason, f64)>,
}

impl TrialStats {
    /// Summarizes `samples` (oldest first). Readings a card does not report stay `None`.
    pub fn from_samples(samples: &[Telemetry]) -> TrialStats {
        let duration_s = match (samples.first(), samples.last()) {
            (Some(first), Some(last)) => {
                last.sampled_at_ms.saturating_sub(first.sampled_at_ms) as f64 / 1000.0
            }
            _ => 0.0,
        };
        let average_power_w = average(samples.iter().filter_map(|sample| sample.power_draw_mw))
            .map(|milliwatts| milliwatts / 1000.0);
        let energy_wh_per_min = energy_counter_wh_per_min(samples, duration_s)
            .or_else(|| average_power_w.map(|watts| watts / 60.0));
        let mut throttle_s = Vec::new();
        for reason in ThrottleReason::ALL {
            let milliseconds: u64 = samples
                .windows(2)
                .filter(|pair| {
                    pair[1]
                        .throttle_reasons
                        .is_some_and(|reasons| reasons.contains(reason))
                })
                .map(|pair| pair[1].sampled_at_ms.saturating_sub(pair[0].sampled_at_ms))
                .sum();
            if milliseconds > 0 {
                throttle_s.push((reason, milliseconds as f64 / 1000.0));
            }
        }
        TrialStats {
            samples: samples.len(),
            duration_s,
            average_power_w,
            average_sm_clock_mhz: average(samples.iter().filter_map(|sample| sample.sm_clock_mhz)),
            min_sm_clock_mhz: samples
                .iter()
                .filter_map(|sample| sample.sm_clock_mhz)
                .min(),
            average_temperature_c: average(
                samples.iter().filter_map(|sample| sample.temperature_c),
            ),
            peak_temperature_c: samples
                .iter()
                .filter_map(|sample| sample.temperature_c)
                .max(),
            energy_wh_per_min,
            throttle_s,
        }
    }

    /// Seconds under `reason` (0 when it never showed).
    pub fn throttled_s(&self, reason: ThrottleReason) -> f64 {
        self.throttle_s
            .iter()
            .find(|(seen, _)| *seen == reason)
            .map_or(0.0, |(_, seconds)| *seconds)
    }
}

fn average(values: impl Iterator<Item = u32>) -> Option<f64> {
    let (sum, count) = values.fold((0.0, 0u32), |(sum, count), value| {
        (sum + f64::from(value), count + 1)
    });
    (count > 0).then(|| sum / f64::from(count))
}

/// Wh per minute from the energy counter's first and last readings; `None` without a counter,
/// over no time, or when the counter went backwards (driver reload).
fn energy_counter_wh_per_min(samples: &[Telemetry], duration_s: f64) -> Option<f64> {
    let first = samples.iter().find_map(|sample| {
        sample
            .energy_total_mj
            .map(|energy| (sample.sampled_at_ms, energy))
    })?;
    let last = samples.iter().rev().find_map(|sample| {
        sample
            .energy_total_mj
            .map(|energy| (sample.sampled_at_ms, energy))
    })?;
    let counted_s = last.0.saturating_sub(first.0) as f64 / 1000.0;
    if counted_s <= 0.0 || last.1 < first.1 || duration_s <= 0.0 {
        return None;
    }
    let watt_hours = (last.1 - first.1) as f64 / 3_600_000.0;
    Some(watt_hours / (counted_s / 60.0))
}

/// A before/during table for the terminal, every value with its unit:
///
/// ```text
///                          Before      During      Change
/// Power, average           431 W       315 W       -26.9 %
/// ```
pub fn comparison_table(before: &TrialStats, during: &TrialStats) -> String {
    let mut rows: Vec<[String; 4]> = vec![[
        String::new(),
        "Before".to_string(),
        "During".to_string(),
        "Change".to_string(),
    ]];
    let mut row = |label: &str,
                   before: Option<f64>,
                   during: Option<f64>,
                   unit: &str,
                   decimals: usize,
                   relative: bool| {
        let show = |value: Option<f64>| {
            value.map_or_else(
                || "n/a".to_string(),
                |value| format!("{value:.decimals$} {unit}"),
            )
        };
        let change = match (before, during) {
            (Some(before), Some(during)) if relative && before != 0.0 => {
                format!("{:+.1} %", (during - before) / before * 100.0)
            }
            (Some(before), Some(during)) if !relative => {
                format!("{:+.decimals$} {unit}", during - before)
            }
            _ => String::new(),
        };
        rows.push([label.to_string(), show(before), show(during), change]);
    };
    row(
        "Power, average",
        before.average_power_w,
        during.average_power_w,
        "W",
        0,
        true,
    );
    row(
        "SM clock, average",
        before.average_sm_clock_mhz,
        during.average_sm_clock_mhz,
        "MHz",
        0,
        true,
    );
    row(
        "SM clock, minimum",
        before.min_sm_clock_mhz.map(f64::from),
        during.min_sm_clock_mhz.map(f64::from),
        "MHz",
        0,
        true,
    );
    row(
        "Temperature, average",
        before.average_temperature_c,
        during.average_temperature_c,
        "°C",
        1,
        false,
    );
    row(
        "Temperature, peak",
        before.peak_temperature_c.map(f64::from),
        during.peak_temperature_c.map(f64::from),
        "°C",
        0,
        false,
    );
    row(
        "Energy per minute",
        before.energy_wh_per_min,
        during.energy_wh_per_min,
        "Wh",
        2,
        true,
    );
    for reason in ThrottleReason::ALL {
        let (before_s, during_s) = (before.throttled_s(reason), during.throttled_s(reason));
        if before_s > 0.0 || during_s > 0.0 {
            row(
                &format!("Throttled: {}", reason.label()),
                Some(before_s),
                Some(during_s),
                "s",
                0,
                false,
            );
        }
    }
    rows.push([
        "Measured".to_string(),
        format!("{:.0} s ({} samples)", before.duration_s, before.samples),
        format!("{:.0} s ({} samples)", during.duration_s, during.samples),
        String::new(),
    ]);
    let widths: Vec<usize> = (0..4)
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut table = String::new();
    for row in &rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            let padding = widths[column] - cell.chars().count();
            if column == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(padding));
            } else {
                // Numbers line up on the right.
                line.push_str("   ");
                line.push_str(&" ".repeat(padding));
                line.push_str(cell);
            }
        }
        table.push_str(line.trim_end());
        table.push('\n');
    }
    table
}

/// Holds the backend for the length of a trial and restores from the journal when the trial
/// ends: by [`RevertGuard::revert`], or, if the trial panics or returns early, when dropped.
pub struct RevertGuard<'a> {
    backend: &'a mut dyn Backend,
    journal_path: PathBuf,
    journal: Journal,
    finished: bool,
}

impl<'a> RevertGuard<'a> {
    /// Starts guarding: `journal` must already be written at `journal_path`.
    pub fn new(backend: &'a mut dyn Backend, journal_path: PathBuf, journal: Journal) -> Self {
        RevertGuard {
            backend,
            journal_path,
            journal,
            finished: false,
        }
    }

    /// The backend, for applying and sampling during the trial.
    pub fn backend(&mut self) -> &mut dyn Backend {
        &mut *self.backend
    }

    /// Replaces what will be restored (e.g. only what was applied before a write failed) and
    /// rewrites the journal to match.
    pub fn set_journal(&mut self, journal: Journal) -> Result<(), JournalError> {
        journal.write(&self.journal_path)?;
        self.journal = journal;
        Ok(())
    }

    /// Restores every GPU from the journal; removes the journal when all of it was restored.
    pub fn revert(mut self) -> Result<RestoreReport, JournalError> {
        self.finished = true;
        restore_journal(&self.journal_path, &mut *self.backend, &self.journal)
    }

    /// Keeps the trial's settings: removes the journal without restoring anything.
    pub fn keep(mut self) -> Result<(), JournalError> {
        self.finished = true;
        match std::fs::remove_file(&self.journal_path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(JournalError::Write {
                path: self.journal_path.clone(),
                detail: error.to_string(),
            }),
        }
    }
}

impl Drop for RevertGuard<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Reached on a panic or an early return: nobody is left to print a report, so log it.
        match restore_journal(&self.journal_path, &mut *self.backend, &self.journal) {
            Ok(report) => {
                for line in report.lines("The trial ended unexpectedly; reverted") {
                    tracing::warn!("{line}");
                }
            }
            Err(error) => tracing::error!("The trial ended unexpectedly: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::gate::validate;
    use crate::device::sim::{SimBackend, SimOptions};
    use crate::device::{BackendKind, Setting, ThrottleReasons};
    use crate::tuning::journal::{JOURNAL_FILE_NAME, JournalEntry};

    fn sample(at_s: u64, power_w: u32, clock_mhz: u32, temperature_c: u32) -> Telemetry {
        Telemetry {
            sampled_at_ms: 1_000_000 + at_s * 1000,
            power_draw_mw: Some(power_w * 1000),
            sm_clock_mhz: Some(clock_mhz),
            temperature_c: Some(temperature_c),
            ..Telemetry::default()
        }
    }

    #[test]
    fn averages_minimum_peak_and_energy_from_power() {
        let samples = [
            sample(0, 400, 2700, 60),
            sample(1, 300, 2500, 64),
            sample(2, 350, 2600, 62),
        ];
        let stats = TrialStats::from_samples(&samples);
        assert_eq!(stats.samples, 3);
        assert_eq!(stats.duration_s, 2.0);
        assert_eq!(stats.average_power_w, Some(350.0));
        assert_eq!(stats.average_sm_clock_mhz, Some(2600.0));
        assert_eq!(stats.min_sm_clock_mhz, Some(2500));
        assert_eq!(stats.average_temperature_c, Some(62.0));
        assert_eq!(stats.peak_temperature_c, Some(64));
        // No counter: 350 W for a minute is 350/60 Wh.
        assert_eq!(stats.energy_wh_per_min, Some(350.0 / 60.0));
        assert!(stats.throttle_s.is_empty());
    }

    #[test]
    fn energy_comes_from_the_counter_and_throttle_time_from_intervals() {
        let power_cap = ThrottleReasons::from_bits(ThrottleReason::SwPowerCap.bit());
        let both = ThrottleReasons::from_bits(
            ThrottleReason::SwPowerCap.bit() | ThrottleReason::SwThermalSlowdown.bit(),
        );
        let mut samples: Vec<Telemetry> = (0..=4).map(|s| sample(s * 2, 300, 2500, 70)).collect();
        for (index, sample) in samples.iter_mut().enumerate() {
            // 360 J every 2 s = 180 W = 3 Wh per minute.
            sample.energy_total_mj = Some(5_000_000 + index as u64 * 360_000);
        }
        samples[1].throttle_reasons = Some(power_cap);
        samples[2].throttle_reasons = Some(both);
        samples[3].throttle_reasons = Some(ThrottleReasons::default());
        samples[4].throttle_reasons = Some(power_cap);
        let stats = TrialStats::from_samples(&samples);
        let energy = stats.energy_wh_per_min.unwrap_or_default();
        assert!((energy - 3.0).abs() < 1e-9, "{energy}");
        assert_eq!(stats.throttled_s(ThrottleReason::SwPowerCap), 6.0);
        assert_eq!(stats.throttled_s(ThrottleReason::SwThermalSlowdown), 2.0);
        assert_eq!(stats.throttled_s(ThrottleReason::HwSlowdown), 0.0);
    }

    #[test]
    fn missing_readings_stay_missing() {
        let samples = [Telemetry::default(), Telemetry::default()];
        let stats = TrialStats::from_samples(&samples);
        assert_eq!(stats.average_power_w, None);
        assert_eq!(stats.energy_wh_per_min, None);
        assert_eq!(stats.peak_temperature_c, None);
        assert_eq!(TrialStats::from_samples(&[]).samples, 0);
    }

    #[test]
    fn the_table_has_units_and_changes() {
        let before =
            TrialStats::from_samples(&[sample(0, 400, 2700, 60), sample(10, 400, 2700, 62)]);
        let mut during_samples = vec![sample(0, 300, 2500, 58), sample(10, 300, 2400, 60)];
        during_samples[1].throttle_reasons =
            Some(ThrottleReasons::from_bits(ThrottleReason::SwPowerCap.bit()));
        let during = TrialStats::from_samples(&during_samples);
        let table = comparison_table(&before, &during);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("Before") && lines[0].contains("During"),
            "{table}"
        );
        assert!(
            lines[1].starts_with("Power, average") && lines[1].ends_with("-25.0 %"),
            "{table}"
        );
        assert!(
            table.contains("400 W") && table.contains("300 W"),
            "{table}"
        );
        assert!(
            table.contains("2450 MHz") && table.contains("°C"),
            "{table}"
        );
        assert!(table.contains("Throttled: Power cap"), "{table}");
        assert!(table.contains("10 s (2 samples)"), "{table}");
        assert!(table.contains("Wh"), "{table}");
    }

    #[test]
    fn a_guard_dropped_mid_trial_reverts_and_removes_the_journal() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join(JOURNAL_FILE_NAME);
        let mut backend = SimBackend::new(&SimOptions::default());
        let change = Setting::PowerLimit {
            power_limit_mw: 300_000,
        };
        let entry = JournalEntry::record(&mut backend, 0, &[change]).unwrap();
        let journal = Journal::new(BackendKind::Sim, vec![entry]);
        journal.write(&path).unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut guard = RevertGuard::new(&mut backend, path.clone(), journal);
            let constraints = guard.backend().constraints(0).unwrap();
            let validated = validate(&constraints, change).unwrap();
            guard.backend().apply(0, &validated).unwrap();
            panic!("a bug in the middle of a trial");
        }));
        assert!(result.is_err());
        assert_eq!(
            backend.current_settings(0).unwrap().power_limit_mw,
            Some(450_000)
        );
        assert!(!path.exists());
    }
}
