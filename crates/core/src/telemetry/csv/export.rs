//! A GPU's history (what the window and the daemon keep) written as CSV, in the columns and
//! units of `gputune log` (`super::TelemetryCsvWriter`): the window's export and
//! `gputune history --csv`. A history keeps power, not the energy counter: the energy column
//! counts from the first row.

use std::fs::File;
use std::path::Path;

use super::{CsvError, TelemetryCsvWriter};
use crate::telemetry::history::{GpuHistory, Metric};
use gputune_formats::{
    card::{FanReading, GpuIdentity, Telemetry},
    throttle::ThrottleReasons,
};

/// Writes the samples `history` keeps for one GPU to a new file at `path` (replacing one there:
/// the save dialog already asked), header first. Returns the rows written. Samples where the
/// GPU failed to read are left out; energy counts from the first row (`EnergySince`), and
/// values carry the history's precision (power 0.1 W, fan speed the mean of the fans).
pub fn export_history(
    path: &Path,
    identity: &GpuIdentity,
    history: &GpuHistory,
) -> Result<usize, CsvError> {
    let file = File::create(path).map_err(|source| CsvError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    export_histories(file, path, &[(identity, history)])
}

/// Writes the samples of several GPUs' histories to `file` (named `path` in messages), header
/// first, in time order (one row per GPU per sample, as `gputune log` writes them). Returns the
/// rows written.
pub fn export_histories(
    file: File,
    path: &Path,
    gpus: &[(&GpuIdentity, &GpuHistory)],
) -> Result<usize, CsvError> {
    let mut order: Vec<(u64, usize, usize)> = gpus
        .iter()
        .enumerate()
        .flat_map(|(gpu, (_, history))| {
            (0..history.len()).filter_map(move |index| Some((history.time_ms(index)?, gpu, index)))
        })
        .collect();
    order.sort_unstable();
    let mut writer = TelemetryCsvWriter::new(file, true).with_destination_name(path);
    let mut rows = 0;
    let mut energy: Vec<EnergySince> = vec![EnergySince::default(); gpus.len()];
    for (_, gpu, index) in order {
        let (identity, history) = gpus[gpu];
        if let Some(mut reading) = reading_from_history(history, index) {
            reading.energy_total_mj = Some(energy[gpu].add(&reading));
            writer.write_row(identity, &reading)?;
            rows += 1;
        }
    }
    writer.flush()?;
    Ok(rows)
}

/// A history keeps power, not the card's energy counter: the energy column of an export counts
/// from its first row, the power readings integrated (trapezoids; a gap longer than
/// [`LONGEST_INTEGRATED_GAP_MS`] adds nothing rather than a guess). Differences between rows
/// are the energy used in between, as with `gputune log`'s counter.
#[derive(Debug, Clone, Copy, Default)]
struct EnergySince {
    total_mj: u64,
    last: Option<(u64, u32)>,
}

/// Longer without a power reading, and the energy of the gap is not guessed.
const LONGEST_INTEGRATED_GAP_MS: u64 = 10_000;

impl EnergySince {
    /// Takes in one reading; returns the energy since the first, millijoules.
    fn add(&mut self, reading: &Telemetry) -> u64 {
        if let Some(power_mw) = reading.power_draw_mw {
            if let Some((then_ms, then_mw)) = self.last {
                let gap_ms = reading.sampled_at_ms.saturating_sub(then_ms);
                if gap_ms <= LONGEST_INTEGRATED_GAP_MS {
                    // mW × ms = µJ.
                    let microjoules = (u64::from(then_mw) + u64::from(power_mw)) * gap_ms / 2;
                    self.total_mj += microjoules / 1000;
                }
            }
            self.last = Some((reading.sampled_at_ms, power_mw));
        }
        self.total_mj
    }
}

/// Sample `index` of `history` as a `Telemetry`; `None` when that sample is a failed read.
fn reading_from_history(history: &GpuHistory, index: usize) -> Option<Telemetry> {
    let sampled_at_ms = history.time_ms(index)?;
    let whole = |metric: Metric| {
        history
            .value(metric, index)
            .filter(|value| value.is_finite() && *value >= 0.0)
            // In range by the filter and the history's integer columns; `as` saturates anyway.
            .map(|value| value.round() as u64)
    };
    let small = |metric: Metric| whole(metric).and_then(|value| u32::try_from(value).ok());
    // Display units back to the device's: W → mW, GiB → bytes.
    let scaled = |metric: Metric, factor: f64| {
        history
            .value(metric, index)
            .filter(|value| value.is_finite() && *value >= 0.0)
            .map(|value| (value * factor).round() as u64)
    };
    let reading = Telemetry {
        sampled_at_ms,
        power_draw_mw: scaled(Metric::PowerDrawW, 1000.0).and_then(|mw| u32::try_from(mw).ok()),
        power_limit_mw: scaled(Metric::PowerLimitW, 1000.0).and_then(|mw| u32::try_from(mw).ok()),
        temperature_c: small(Metric::TemperatureC),
        fans: small(Metric::FanSpeedPct).map(|speed_pct| {
            vec![FanReading {
                speed_pct: Some(speed_pct),
                speed_rpm: None,
            }]
        }),
        gpu_clock_mhz: small(Metric::GpuClockMhz),
        sm_clock_mhz: small(Metric::SmClockMhz),
        memory_clock_mhz: small(Metric::MemoryClockMhz),
        utilization_gpu_pct: small(Metric::UtilizationGpuPct),
        utilization_memory_pct: small(Metric::UtilizationMemoryPct),
        memory_used_bytes: scaled(
            Metric::MemoryUsedGib,
            (gputune_formats::units::BYTES_PER_MIB * 1024) as f64,
        ),
        performance_state: small(Metric::PerformanceState),
        throttle_reasons: history.throttle_bits(index).map(ThrottleReasons::from_bits),
        pcie_link_gen: small(Metric::PcieLinkGen),
        pcie_link_width: small(Metric::PcieLinkWidth),
        pcie_link_gen_max: small(Metric::PcieLinkGenMax),
        pcie_link_width_max: small(Metric::PcieLinkWidthMax),
        energy_total_mj: None,
        processes: None,
        // History keeps no ECC counters.
        ecc: None,
    };
    let failed_read = Telemetry {
        sampled_at_ms,
        ..Telemetry::default()
    };
    (reading != failed_read).then_some(reading)
}

#[cfg(test)]
mod tests {
    use super::super::HEADER;
    use super::super::tests::{full_reading, identity};
    use super::*;

    #[test]
    fn an_export_of_the_history_leaves_failed_reads_out_and_keeps_its_precision() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("export.csv");
        let mut history = GpuHistory::with_capacity(16);
        let reading = full_reading();
        history.push(reading.sampled_at_ms, Some(&reading));
        history.push(reading.sampled_at_ms + 100, None);
        history.push(reading.sampled_at_ms + 200, Some(&reading));
        assert_eq!(export_history(&path, &identity(), &history).unwrap(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(HEADER.join(",").as_str()));
        // Power to 0.1 W, fan speed as the mean, energy from the first row.
        assert_eq!(
            lines.next(),
            Some(
                "2023-11-14T22:13:20.250Z,3,GPU-12345678-aaaa-bbbb-cccc-1234567890ab,\
                 \"NVIDIA GeForce RTX 4090, test\",87.500,450.000,67,52,2520,2520,10501,99,41,\
                 20000,24564,P2,4,4,16,16,sw_power_cap|sw_thermal_slowdown,0.000"
            )
        );
        // 87.5 W for 0.2 s (the failed read between adds no guess of its own).
        let second = lines.next().unwrap_or_default();
        assert!(
            second.starts_with("2023-11-14T22:13:20.450Z,") && second.ends_with(",17.500"),
            "{second}"
        );
        assert_eq!(lines.next(), None);
    }
}
