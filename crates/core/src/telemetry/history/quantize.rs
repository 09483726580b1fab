//! How each metric is stored: which integer type, at which step, and how a `Telemetry` field
//! becomes that integer. Precision (documented on `Metric`): power 0.1 W, memory 1 MiB, fan
//! speed the mean of the fans rounded to 1 %, everything else exact.

use super::Metric;
use super::column::{MinMax, Quantized, SummarizedColumn};
use gputune_formats::card::Telemetry;

/// Milliwatts per stored power step (0.1 W).
const MILLIWATTS_PER_STEP: u64 = 100;
/// Bytes per stored memory step (1 MiB).
use gputune_formats::units::BYTES_PER_MIB;
const MIB_PER_GIB: f64 = 1024.0;

/// One metric's samples, in the narrowest type that holds its range.
#[derive(Clone)]
pub(crate) enum MetricColumn {
    U8(SummarizedColumn<MinMax<u8>>),
    U16(SummarizedColumn<MinMax<u16>>),
    U32(SummarizedColumn<MinMax<u32>>),
}

impl MetricColumn {
    /// An empty column of the type `metric` is stored in.
    pub(crate) fn for_metric(metric: Metric) -> MetricColumn {
        match metric {
            Metric::PowerDrawW
            | Metric::PowerLimitW
            | Metric::GpuClockMhz
            | Metric::SmClockMhz
            | Metric::MemoryClockMhz => MetricColumn::U16(SummarizedColumn::new()),
            Metric::MemoryUsedGib => MetricColumn::U32(SummarizedColumn::new()),
            Metric::TemperatureC
            | Metric::FanSpeedPct
            | Metric::UtilizationGpuPct
            | Metric::UtilizationMemoryPct
            | Metric::PcieLinkGen
            | Metric::PcieLinkWidth
            | Metric::PcieLinkGenMax
            | Metric::PcieLinkWidthMax
            | Metric::PerformanceState => MetricColumn::U8(SummarizedColumn::new()),
        }
    }

    /// Stores a quantized value (`None`: missing) in `slot`.
    pub(crate) fn write(&mut self, slot: usize, quantized: Option<u32>, capacity: usize) {
        match self {
            MetricColumn::U8(column) => column.write(slot, store(quantized), capacity),
            MetricColumn::U16(column) => column.write(slot, store(quantized), capacity),
            MetricColumn::U32(column) => column.write(slot, store(quantized), capacity),
        }
    }

    /// The quantized value in `slot`; `None` when missing or never written.
    pub(crate) fn get(&self, slot: usize) -> Option<u32> {
        match self {
            MetricColumn::U8(column) => load(column.get(slot)),
            MetricColumn::U16(column) => load(column.get(slot)),
            MetricColumn::U32(column) => load(column.get(slot)),
        }
    }

    /// Bytes this column has allocated.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            MetricColumn::U8(column) => column.memory_bytes(),
            MetricColumn::U16(column) => column.memory_bytes(),
            MetricColumn::U32(column) => column.memory_bytes(),
        }
    }
}

/// Bytes one value of `metric` takes in its column (and in the daemon's history file); its
/// largest value is the "missing" sentinel.
pub fn stored_bytes(metric: Metric) -> usize {
    match MetricColumn::for_metric(metric) {
        MetricColumn::U8(_) => 1,
        MetricColumn::U16(_) => 2,
        MetricColumn::U32(_) => 4,
    }
}

fn store<T: Quantized>(quantized: Option<u32>) -> T {
    quantized.map_or(T::MISSING, T::saturating_from)
}

fn load<T: Quantized>(stored: Option<T>) -> Option<u32> {
    stored.filter(|value| *value != T::MISSING).map(Into::into)
}

/// `metric` of one reading, in its stored steps; `None` when the card did not report it.
pub(crate) fn quantize(metric: Metric, reading: &Telemetry) -> Option<u32> {
    match metric {
        Metric::PowerDrawW => reading.power_draw_mw.map(power_steps),
        Metric::PowerLimitW => reading.power_limit_mw.map(power_steps),
        Metric::TemperatureC => reading.temperature_c,
        Metric::FanSpeedPct => mean_fan_speed_pct(reading),
        Metric::GpuClockMhz => reading.gpu_clock_mhz,
        Metric::SmClockMhz => reading.sm_clock_mhz,
        Metric::MemoryClockMhz => reading.memory_clock_mhz,
        Metric::UtilizationGpuPct => reading.utilization_gpu_pct,
        Metric::UtilizationMemoryPct => reading.utilization_memory_pct,
        Metric::MemoryUsedGib => reading.memory_used_bytes.map(mebibytes),
        Metric::PcieLinkGen => reading.pcie_link_gen,
        Metric::PcieLinkWidth => reading.pcie_link_width,
        Metric::PcieLinkGenMax => reading.pcie_link_gen_max,
        Metric::PcieLinkWidthMax => reading.pcie_link_width_max,
        Metric::PerformanceState => reading.performance_state,
    }
}

/// Stored steps per display unit of `metric` (a divisor, so 2874 steps read as exactly 287.4 W).
pub(crate) fn steps_per_display_unit(metric: Metric) -> f64 {
    match metric {
        Metric::PowerDrawW | Metric::PowerLimitW => 1000.0 / MILLIWATTS_PER_STEP as f64,
        Metric::MemoryUsedGib => MIB_PER_GIB,
        _ => 1.0,
    }
}

fn power_steps(milliwatts: u32) -> u32 {
    let steps = (u64::from(milliwatts) + MILLIWATTS_PER_STEP / 2) / MILLIWATTS_PER_STEP;
    u32::try_from(steps).unwrap_or(u32::MAX)
}

fn mebibytes(bytes: u64) -> u32 {
    let mebibytes = bytes.saturating_add(BYTES_PER_MIB / 2) / BYTES_PER_MIB;
    u32::try_from(mebibytes).unwrap_or(u32::MAX)
}

/// The mean of the fans that report a speed, rounded; `None` without any.
fn mean_fan_speed_pct(reading: &Telemetry) -> Option<u32> {
    let speeds = reading
        .fans
        .as_deref()?
        .iter()
        .filter_map(|fan| fan.speed_pct);
    let (sum, count) = speeds.fold((0u64, 0u64), |(sum, count), speed| {
        (sum + u64::from(speed), count + 1)
    });
    let mean = (sum + count / 2).checked_div(count)?;
    Some(u32::try_from(mean).unwrap_or(u32::MAX))
}
