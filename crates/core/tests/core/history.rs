//! Per-GPU history (bounded columnar rings, gaps, clamped time, quantization, rebasing) and
//! plot decimation (min/max per pixel column, checked against a naive scan, throttle OR).

use proptest::prelude::*;

use gputune_core::telemetry::decimate::{all_points, decimate, throttle_columns};
use gputune_core::telemetry::history::MetricRow;
use gputune_core::telemetry::history::{DAY_AT_10_HZ, GpuHistory, Metric};
use gputune_formats::{
    card::{FanReading, Telemetry},
    throttle::ThrottleReasons,
};

/// 2023-11-14, a realistic Unix time in ms.
const T0_MS: u64 = 1_700_000_000_000;
const MIB: u64 = 1 << 20;

fn reading(power_draw_mw: Option<u32>) -> Telemetry {
    Telemetry {
        power_draw_mw,
        power_limit_mw: Some(450_000),
        temperature_c: Some(65),
        fans: Some(vec![
            FanReading {
                speed_pct: Some(40),
                speed_rpm: Some(1500),
            },
            FanReading {
                speed_pct: Some(45),
                speed_rpm: Some(1600),
            },
        ]),
        gpu_clock_mhz: Some(2520),
        sm_clock_mhz: Some(2520),
        memory_clock_mhz: Some(10_501),
        utilization_gpu_pct: Some(98),
        utilization_memory_pct: Some(61),
        memory_used_bytes: Some(21 * 1024 * MIB),
        performance_state: Some(2),
        throttle_reasons: Some(ThrottleReasons::from_bits(0x4)),
        pcie_link_gen: Some(4),
        pcie_link_width: Some(16),
        pcie_link_gen_max: Some(4),
        pcie_link_width_max: Some(16),
        ..Telemetry::default()
    }
}

fn times(history: &GpuHistory) -> Vec<u64> {
    (0..history.len())
        .filter_map(|index| history.time_ms(index))
        .collect()
}

#[test]
fn never_more_than_capacity_and_the_oldest_go_first() {
    let mut history = GpuHistory::with_capacity(5);
    assert!(history.is_empty());
    for step in 0..12u64 {
        history.push(T0_MS + step * 100, Some(&reading(Some(step as u32 * 1000))));
        assert!(history.len() <= 5);
    }
    assert_eq!(history.len(), 5);
    assert_eq!(history.capacity(), 5);
    let expected: Vec<u64> = (7..12).map(|step| T0_MS + step * 100).collect();
    assert_eq!(times(&history), expected);
    assert_eq!(history.first_time_ms(), Some(T0_MS + 700));
    assert_eq!(history.last_time_ms(), Some(T0_MS + 1100));
    assert_eq!(history.value(Metric::PowerDrawW, 0), Some(7.0));
    assert_eq!(history.value(Metric::PowerDrawW, 4), Some(11.0));
    assert_eq!(history.value(Metric::PowerDrawW, 5), None);
    assert_eq!(history.time_ms(5), None);
}

#[test]
fn a_zero_capacity_keeps_one_sample() {
    let mut history = GpuHistory::with_capacity(0);
    history.push(T0_MS, None);
    history.push(T0_MS + 1, Some(&reading(Some(1000))));
    assert_eq!(history.len(), 1);
    assert_eq!(history.value(Metric::PowerDrawW, 0), Some(1.0));
}

#[test]
fn a_full_day_at_10_hz_fits_in_40_mb_and_stops_growing() {
    let mut history = GpuHistory::with_capacity(DAY_AT_10_HZ);
    let sample = reading(Some(300_000));
    for step in 0..DAY_AT_10_HZ as u64 {
        history.push(T0_MS + step * 100, Some(&sample));
    }
    assert_eq!(history.len(), DAY_AT_10_HZ);
    let full_bytes = history.memory_bytes();
    assert!(full_bytes <= 40_000_000, "{full_bytes} bytes per GPU-day");
    for step in 0..10_000u64 {
        history.push(T0_MS + (DAY_AT_10_HZ as u64 + step) * 100, None);
    }
    assert_eq!(history.len(), DAY_AT_10_HZ);
    assert_eq!(history.memory_bytes(), full_bytes);
    assert_eq!(history.first_time_ms(), Some(T0_MS + 10_000 * 100));
}

#[test]
fn a_failed_read_is_a_gap_in_every_column_and_a_missing_field_in_its_own() {
    let mut history = GpuHistory::with_capacity(10);
    history.push(T0_MS, Some(&reading(Some(250_000))));
    history.push(T0_MS + 100, None);
    let mut no_fans_no_power = reading(None);
    no_fans_no_power.fans = None;
    no_fans_no_power.throttle_reasons = None;
    history.push(T0_MS + 200, Some(&no_fans_no_power));
    let mut fans_without_speed = reading(Some(1000));
    fans_without_speed.fans = Some(vec![FanReading {
        speed_pct: None,
        speed_rpm: Some(900),
    }]);
    history.push(T0_MS + 300, Some(&fans_without_speed));

    for metric in Metric::ALL {
        assert!(history.value(metric, 0).is_some(), "{metric:?}");
        assert_eq!(history.value(metric, 1), None, "{metric:?}");
    }
    assert_eq!(history.throttle_bits(1), None);
    assert_eq!(history.time_ms(1), Some(T0_MS + 100));
    assert_eq!(history.value(Metric::PowerDrawW, 2), None);
    assert_eq!(history.value(Metric::FanSpeedPct, 2), None);
    assert_eq!(history.throttle_bits(2), None);
    assert_eq!(history.value(Metric::TemperatureC, 2), Some(65.0));
    assert_eq!(history.value(Metric::FanSpeedPct, 3), None);

    // The gaps split the plotted line.
    let lines = all_points(&history, Metric::PowerDrawW, T0_MS, T0_MS + 300, 1000);
    assert_eq!(
        lines,
        vec![vec![[1_700_000_000.0, 250.0]], vec![[1_700_000_000.3, 1.0]]]
    );
    let lines = decimate(&history, Metric::PowerDrawW, T0_MS, T0_MS + 300, 100, 1000);
    assert_eq!(
        lines,
        vec![vec![[1_700_000_000.0, 250.0]], vec![[1_700_000_000.3, 1.0]]]
    );
    let lines = decimate(
        &history,
        Metric::TemperatureC,
        T0_MS,
        T0_MS + 300,
        100,
        1000,
    );
    assert_eq!(lines.len(), 2);
}

#[test]
fn samples_further_apart_than_the_gap_split_the_line() {
    let mut history = GpuHistory::with_capacity(100);
    for step in [0u64, 1, 2, 10, 11] {
        history.push(T0_MS + step * 100, Some(&reading(Some(100_000))));
    }
    let lines = all_points(&history, Metric::PowerDrawW, T0_MS, T0_MS + 2000, 300);
    assert_eq!(lines.iter().map(Vec::len).collect::<Vec<_>>(), [3, 2]);
    let lines = decimate(&history, Metric::PowerDrawW, T0_MS, T0_MS + 2000, 1, 300);
    assert_eq!(lines.len(), 2);
    let lines = decimate(&history, Metric::PowerDrawW, T0_MS, T0_MS + 2000, 1, 1000);
    assert_eq!(lines.len(), 1);
}

#[test]
fn hover_reads_the_nearer_sample_on_the_line_and_nothing_across_a_gap() {
    // Samples 500 ms apart, then 10 s without one, then 500 ms apart again.
    let mut history = GpuHistory::with_capacity(100);
    for step_ms in [0u64, 500, 1_000, 11_000, 11_500] {
        history.push(T0_MS + step_ms, Some(&reading(Some(100_000))));
    }
    let (half_column_ms, gap_after_ms) = (25, 1_500);
    let read = |at_ms: u64| history.nearest_on_line(T0_MS + at_ms, half_column_ms, gap_after_ms);
    // Between two joined samples, ten columns apart: the nearer, the earlier on a tie.
    assert_eq!(read(200), Some(0));
    assert_eq!(read(250), Some(0));
    assert_eq!(read(300), Some(1));
    assert_eq!(read(11_400), Some(4));
    // In the gap: only within half a column of its ends.
    assert_eq!(read(1_020), Some(2));
    assert_eq!(read(1_100), None);
    assert_eq!(read(6_000), None);
    assert_eq!(read(10_980), Some(3));
    // Past either end.
    assert_eq!(read(11_600), None);
    assert_eq!(
        history.nearest_on_line(T0_MS - 100, half_column_ms, gap_after_ms),
        None
    );
    assert_eq!(
        GpuHistory::with_capacity(4).nearest_on_line(T0_MS, 25, 1_500),
        None
    );
}

#[test]
fn a_clock_that_steps_back_is_clamped_to_the_previous_time() {
    let mut history = GpuHistory::with_capacity(10);
    history.push(T0_MS + 1000, None);
    history.push(T0_MS + 400, None);
    history.push(T0_MS + 1100, None);
    assert_eq!(times(&history), [T0_MS + 1000, T0_MS + 1000, T0_MS + 1100]);
    assert_eq!(history.range(T0_MS + 1000, T0_MS + 1000), 0..2);
    assert_eq!(history.range(T0_MS, T0_MS + 999), 0..0);
    assert_eq!(history.range(T0_MS + 1001, T0_MS + 5000), 2..3);
    assert_eq!(history.range(T0_MS + 5000, T0_MS), 3..3);
}

#[test]
fn values_come_back_in_display_units() {
    let mut history = GpuHistory::with_capacity(4);
    history.push(T0_MS, Some(&reading(Some(287_449))));
    let value = |metric| history.value(metric, 0);
    assert_eq!(value(Metric::PowerDrawW), Some(287.4));
    assert_eq!(value(Metric::PowerLimitW), Some(450.0));
    assert_eq!(value(Metric::TemperatureC), Some(65.0));
    // The mean of 40 % and 45 %, rounded.
    assert_eq!(value(Metric::FanSpeedPct), Some(43.0));
    assert_eq!(value(Metric::GpuClockMhz), Some(2520.0));
    assert_eq!(value(Metric::MemoryClockMhz), Some(10_501.0));
    assert_eq!(value(Metric::UtilizationMemoryPct), Some(61.0));
    assert_eq!(value(Metric::MemoryUsedGib), Some(21.0));
    assert_eq!(value(Metric::PcieLinkWidthMax), Some(16.0));
    assert_eq!(value(Metric::PerformanceState), Some(2.0));
    assert_eq!(history.throttle_bits(0), Some(0x4));
    for metric in Metric::ALL {
        assert!(!metric.label().is_empty());
    }
    assert_eq!(Metric::PowerDrawW.label(), "Power draw");
    assert_eq!(Metric::TemperatureC.unit(), "°C");
    assert_eq!(Metric::MemoryUsedGib.unit(), "GiB");
}

#[test]
fn readings_beyond_a_column_type_saturate_instead_of_becoming_gaps() {
    let mut history = GpuHistory::with_capacity(4);
    let mut huge = reading(Some(u32::MAX));
    huge.temperature_c = Some(100_000);
    huge.gpu_clock_mhz = Some(1_000_000);
    huge.memory_used_bytes = Some(u64::MAX);
    history.push(T0_MS, Some(&huge));
    assert_eq!(history.value(Metric::PowerDrawW, 0), Some(6553.4));
    assert_eq!(history.value(Metric::TemperatureC, 0), Some(254.0));
    assert_eq!(history.value(Metric::GpuClockMhz, 0), Some(65_534.0));
    assert!(history.value(Metric::MemoryUsedGib, 0).is_some());
}

#[test]
fn times_past_the_u32_range_rebase_without_losing_precision() {
    let mut history = GpuHistory::with_capacity(2);
    let later_ms = [
        T0_MS,
        T0_MS + 3_000_000_000,
        T0_MS + 5_000_000_000,
        T0_MS + 7_500_000_000,
    ];
    for time_ms in later_ms {
        history.push(time_ms, Some(&reading(Some(1000))));
    }
    assert_eq!(times(&history), later_ms[2..]);
}

#[test]
fn a_jump_beyond_37_days_clamps_older_samples_but_keeps_order() {
    let mut history = GpuHistory::with_capacity(10);
    history.push(T0_MS, None);
    history.push(T0_MS + 100, None);
    let far_ms = T0_MS + 100 * 24 * 3600 * 1000;
    history.push(far_ms, None);
    history.push(u64::MAX, None);
    let kept = times(&history);
    assert_eq!(kept.len(), 4);
    assert!(kept.windows(2).all(|pair| pair[0] <= pair[1]), "{kept:?}");
    assert_eq!(kept.last(), Some(&u64::MAX));
    assert!(kept[0] >= T0_MS);
}

proptest! {
    #[test]
    fn quantization_round_trips_within_its_precision(
        power_draw_mw in 0u32..2_000_000,
        memory_used_bytes in 0u64..(200 * 1024 * MIB),
        fan_speeds in proptest::collection::vec(0u32..=100, 1..4),
        temperature_c in 0u32..200,
        sm_clock_mhz in 0u32..20_000,
    ) {
        let mut sample = reading(Some(power_draw_mw));
        sample.memory_used_bytes = Some(memory_used_bytes);
        sample.fans = Some(fan_speeds.iter().map(|&speed| FanReading {
            speed_pct: Some(speed),
            speed_rpm: None,
        }).collect());
        sample.temperature_c = Some(temperature_c);
        sample.sm_clock_mhz = Some(sm_clock_mhz);
        let mut history = GpuHistory::with_capacity(1);
        history.push(T0_MS, Some(&sample));
        let value = |metric| history.value(metric, 0).unwrap_or(f64::NAN);
        prop_assert!((value(Metric::PowerDrawW) - f64::from(power_draw_mw) / 1000.0).abs() <= 0.050_001);
        let gib = memory_used_bytes as f64 / (1024.0 * MIB as f64);
        prop_assert!((value(Metric::MemoryUsedGib) - gib).abs() <= 0.5 / 1024.0 + 1e-9);
        let mean_pct = f64::from(fan_speeds.iter().sum::<u32>()) / fan_speeds.len() as f64;
        prop_assert!((value(Metric::FanSpeedPct) - mean_pct).abs() <= 0.5);
        prop_assert_eq!(value(Metric::TemperatureC), f64::from(temperature_c));
        prop_assert_eq!(value(Metric::SmClockMhz), f64::from(sm_clock_mhz));
    }
}

// ---- decimation against a naive scan ----

/// One pushed sample: a failed read, or a reading with some fields missing.
#[derive(Debug, Clone)]
struct Generated {
    step_ms: i64,
    reading: Option<GeneratedReading>,
}

#[derive(Debug, Clone, Copy)]
struct GeneratedReading {
    power_draw_mw: Option<u32>,
    temperature_c: Option<u32>,
    memory_used_bytes: Option<u64>,
    throttle_bits: Option<u64>,
}

fn generated_sample() -> impl Strategy<Value = Generated> {
    let step_ms = prop_oneof![
        8 => Just(100i64),
        2 => 0i64..3,
        1 => 100i64..2_000,
        1 => -300i64..0,
    ];
    // Narrow value ranges make ties, which test "first occurrence" ordering.
    let fields = (
        proptest::option::weighted(0.95, 0u32..3_000),
        proptest::option::weighted(0.95, prop_oneof![0u32..4, 0u32..300]),
        proptest::option::weighted(0.95, 0u64..(8 * MIB)),
        proptest::option::weighted(0.95, prop_oneof![Just(0u64), 0u64..0x200]),
    )
        .prop_map(
            |(power_draw_mw, temperature_c, memory_used_bytes, throttle_bits)| GeneratedReading {
                power_draw_mw,
                temperature_c,
                memory_used_bytes,
                throttle_bits,
            },
        );
    (step_ms, proptest::option::weighted(0.97, fields))
        .prop_map(|(step_ms, reading)| Generated { step_ms, reading })
}

fn build_history(capacity: usize, samples: &[Generated]) -> GpuHistory {
    let mut history = GpuHistory::with_capacity(capacity);
    let mut time_ms = T0_MS;
    for sample in samples {
        time_ms = time_ms.saturating_add_signed(sample.step_ms);
        let telemetry = sample.reading.map(|generated| Telemetry {
            power_draw_mw: generated.power_draw_mw,
            temperature_c: generated.temperature_c,
            memory_used_bytes: generated.memory_used_bytes,
            throttle_reasons: generated.throttle_bits.map(ThrottleReasons::from_bits),
            ..Telemetry::default()
        });
        history.push(time_ms, telemetry.as_ref());
    }
    history
}

fn column_of(time_ms: u64, from_ms: u64, to_ms: u64, columns: usize) -> usize {
    (u128::from(time_ms - from_ms) * columns as u128 / (u128::from(to_ms - from_ms) + 1)) as usize
}

/// The runs of consecutive present, connected samples that share a pixel column, per line
/// segment: what `decimate` must summarize, found by looking at every sample.
fn naive_groups(
    history: &GpuHistory,
    metric: Metric,
    from_ms: u64,
    to_ms: u64,
    columns: usize,
    gap_after_ms: u64,
) -> Vec<Vec<Vec<usize>>> {
    let mut lines: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut line: Vec<Vec<usize>> = Vec::new();
    let mut previous_ms: Option<u64> = None;
    let mut group_column = None;
    if columns == 0 || to_ms < from_ms {
        return lines;
    }
    for index in 0..history.len() {
        let time_ms = history.time_ms(index).unwrap_or(0);
        if time_ms < from_ms || time_ms > to_ms {
            continue;
        }
        let joins = previous_ms.is_none_or(|previous| time_ms - previous <= gap_after_ms);
        previous_ms = Some(time_ms);
        let present = history.value(metric, index).is_some();
        if !present || !joins {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            group_column = None;
        }
        if !present {
            continue;
        }
        let column = column_of(time_ms, from_ms, to_ms, columns);
        if group_column != Some(column) {
            line.push(Vec::new());
            group_column = Some(column);
        }
        if let Some(group) = line.last_mut() {
            group.push(index);
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The naive decimation: per group the min and the max (first occurrences, in time order), or
/// the group itself when it has at most 2 samples.
fn naive_decimate(
    history: &GpuHistory,
    metric: Metric,
    groups: &[Vec<Vec<usize>>],
) -> Vec<Vec<[f64; 2]>> {
    let point = |index: usize| {
        [
            history.time_ms(index).unwrap_or(0) as f64 / 1000.0,
            history.value(metric, index).unwrap_or(f64::NAN),
        ]
    };
    let value = |index: usize| history.value(metric, index).unwrap_or(f64::NAN);
    groups
        .iter()
        .map(|line| {
            let mut points = Vec::new();
            for group in line {
                if group.len() <= 2 {
                    points.extend(group.iter().map(|&index| point(index)));
                    continue;
                }
                let mut min_index = group[0];
                let mut max_index = group[0];
                for &index in group {
                    if value(index) < value(min_index) {
                        min_index = index;
                    }
                    if value(index) > value(max_index) {
                        max_index = index;
                    }
                }
                points.push(point(min_index.min(max_index)));
                if min_index != max_index {
                    points.push(point(min_index.max(max_index)));
                }
            }
            points
        })
        .collect()
}

/// A random history and a random plot of it.
#[derive(Debug, Clone)]
struct Case {
    capacity: usize,
    samples: Vec<Generated>,
    /// Where the window starts, relative to the oldest sample kept.
    from_offset_ms: i64,
    window_ms: u64,
    columns: usize,
    gap_after_ms: u64,
    metric: Metric,
}

impl Case {
    /// The history, and the window `from_ms..=to_ms`.
    fn build(&self) -> (GpuHistory, u64, u64) {
        let history = build_history(self.capacity, &self.samples);
        let first_ms = history.first_time_ms().unwrap_or(T0_MS);
        let from_ms = first_ms.saturating_add_signed(self.from_offset_ms);
        (history, from_ms, from_ms + self.window_ms)
    }
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        1usize..1_500,
        proptest::collection::vec(generated_sample(), 0..3_000),
        -1_000i64..200_000,
        0u64..400_000,
        prop_oneof![1usize..8, 8usize..300, Just(1000usize)],
        prop_oneof![Just(150u64), Just(1_000u64), Just(u64::MAX)],
        prop_oneof![
            Just(Metric::PowerDrawW),
            Just(Metric::TemperatureC),
            Just(Metric::MemoryUsedGib)
        ],
    )
        .prop_map(
            |(capacity, samples, from_offset_ms, window_ms, columns, gap_after_ms, metric)| Case {
                capacity,
                samples,
                from_offset_ms,
                window_ms,
                columns,
                gap_after_ms,
                metric,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn decimation_keeps_the_min_and_the_max_of_every_bucket(case in case_strategy()) {
        let (history, from_ms, to_ms) = case.build();
        let (metric, columns, gap_after_ms) = (case.metric, case.columns, case.gap_after_ms);

        let lines = decimate(&history, metric, from_ms, to_ms, columns, gap_after_ms);
        let groups = naive_groups(&history, metric, from_ms, to_ms, columns, gap_after_ms);

        // Every bucket (a pixel column within one line segment) keeps its min and its max.
        prop_assert_eq!(lines.len(), groups.len());
        for (line, line_groups) in lines.iter().zip(&groups) {
            for group in line_groups {
                let values: Vec<f64> = group.iter().filter_map(|&index| history.value(metric, index)).collect();
                let column = column_of(history.time_ms(group[0]).unwrap_or(0), from_ms, to_ms, columns);
                let kept: Vec<f64> = line
                    .iter()
                    .filter(|point| column_of((point[0] * 1000.0).round() as u64, from_ms, to_ms, columns) == column)
                    .map(|point| point[1])
                    .collect();
                let min = values.iter().copied().fold(f64::INFINITY, f64::min);
                let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                prop_assert!(kept.contains(&min) && kept.contains(&max), "column {} kept {:?} of {:?}", column, kept, values);
                prop_assert!(kept.len() <= 2);
            }
        }
        // And exactly the points a scan of every sample picks, in the same order.
        prop_assert_eq!(&lines, &naive_decimate(&history, metric, &groups));

        // Decimated points are raw points: each line picks from the same line of every point.
        let all = all_points(&history, metric, from_ms, to_ms, gap_after_ms);
        prop_assert_eq!(all.len(), lines.len());
        for (picked, every) in lines.iter().zip(&all) {
            let mut remaining = every.iter();
            prop_assert!(picked.iter().all(|point| remaining.any(|raw| raw == point)));
        }
    }

    #[test]
    fn throttle_columns_or_the_bits_of_their_samples(case in case_strategy()) {
        let (history, from_ms, to_ms) = case.build();
        let columns = case.columns;
        let got = throttle_columns(&history, from_ms, to_ms, columns);

        let indices = history.range(from_ms, to_ms);
        if indices.is_empty() {
            prop_assert!(got.is_empty());
            return Ok(());
        }
        let mut expected: Vec<Option<u64>> = vec![None; columns];
        for index in indices {
            let column = column_of(history.time_ms(index).unwrap_or(0), from_ms, to_ms, columns);
            if let Some(bits) = history.throttle_bits(index) {
                expected[column] = Some(expected[column].unwrap_or(0) | bits);
            }
        }
        prop_assert_eq!(got, expected);
    }
}

#[test]
fn a_one_sample_spike_survives_a_day_at_1000_px() {
    let mut history = GpuHistory::with_capacity(DAY_AT_10_HZ);
    let steady = reading(Some(300_000));
    let spike = reading(Some(600_000));
    let dip = reading(Some(20_000));
    for step in 0..DAY_AT_10_HZ as u64 {
        let sample = match step {
            500_001 => &spike,
            700_123 => &dip,
            _ => &steady,
        };
        history.push(T0_MS + step * 100, Some(sample));
    }
    let to_ms = history.last_time_ms().unwrap_or(0);
    let lines = decimate(&history, Metric::PowerDrawW, T0_MS, to_ms, 1000, 1000);
    assert_eq!(lines.len(), 1);
    let points = &lines[0];
    assert!(points.len() <= 2000, "{} points", points.len());
    assert!(points.contains(&[(T0_MS + 500_001 * 100) as f64 / 1000.0, 600.0]));
    assert!(points.contains(&[(T0_MS + 700_123 * 100) as f64 / 1000.0, 20.0]));

    // Nothing to draw: no columns, an empty window, a window without samples.
    assert!(decimate(&history, Metric::PowerDrawW, T0_MS, to_ms, 0, 1000).is_empty());
    assert!(decimate(&history, Metric::PowerDrawW, to_ms, T0_MS, 100, 1000).is_empty());
    assert!(decimate(&history, Metric::PowerDrawW, 0, T0_MS - 1, 100, 1000).is_empty());
    assert!(throttle_columns(&history, T0_MS, to_ms, 0).is_empty());
    let throttle = throttle_columns(&history, T0_MS, to_ms, 1000);
    assert_eq!(throttle.len(), 1000);
    assert!(throttle.iter().all(|bits| *bits == Some(0x4)));
}

#[test]
fn the_daemons_earlier_rows_go_in_front_and_overlapping_ones_are_not_counted_twice() {
    use gputune_formats::history::HistoryRow;
    let mut own = GpuHistory::with_capacity(100);
    for second in 10..15u64 {
        own.push(second * 1000, Some(&reading(Some(200_000))));
    }
    // The daemon's rows run up to (and past) the window's first reading.
    let earlier: Vec<HistoryRow> = (0..12u64)
        .map(|second| HistoryRow::from_reading(second * 1000, Some(&reading(Some(100_000)))))
        .collect();
    let merged = own.with_earlier(&earlier);
    assert_eq!(merged.len(), 10 + 5);
    assert_eq!(merged.capacity(), 100);
    assert_eq!(times(&merged)[..3], [0, 1000, 2000]);
    assert_eq!(merged.value(Metric::PowerDrawW, 9), Some(100.0));
    assert_eq!(merged.value(Metric::PowerDrawW, 10), Some(200.0));
    // Rows read back exactly as pushed.
    assert_eq!(merged.row(10), own.row(0));
    assert_eq!(merged.row(0), Some(earlier[0]));
    // A small window keeps the newest of both.
    let mut small = GpuHistory::with_capacity(4);
    small.push(20_000, Some(&reading(Some(200_000))));
    let merged = small.with_earlier(&earlier);
    assert_eq!(times(&merged), [9_000, 10_000, 11_000, 20_000]);
}

#[test]
fn rows_the_window_missed_go_between_its_readings_in_time_order() {
    use gputune_formats::history::HistoryRow;
    let mut own = GpuHistory::with_capacity(100);
    // Readings until 3 s, a break (the daemon went away), readings again from 9 s.
    for second in [0u64, 1, 2, 3] {
        own.push(second * 1000, Some(&reading(Some(200_000))));
    }
    own.push(3_500, None);
    for second in [9u64, 10] {
        own.push(second * 1000, Some(&reading(Some(200_000))));
    }
    // What the new daemon kept meanwhile, and one row at the time of a reading of the window.
    let missed: Vec<HistoryRow> = [5u64, 6, 7, 8, 9]
        .iter()
        .map(|second| HistoryRow::from_reading(second * 1000, Some(&reading(Some(100_000)))))
        .collect();
    let merged = own.with_inserted(&missed);
    assert_eq!(
        times(&merged),
        [
            0, 1000, 2000, 3000, 3500, 5000, 6000, 7000, 8000, 9000, 10_000
        ]
    );
    assert_eq!(merged.value(Metric::PowerDrawW, 4), None, "the break stays");
    assert_eq!(merged.value(Metric::PowerDrawW, 5), Some(100.0));
    assert_eq!(merged.row(9), own.row(5), "the window's own reading wins");
    // A small window keeps the newest.
    let mut small = GpuHistory::with_capacity(3);
    small.push(10_000, Some(&reading(Some(200_000))));
    assert_eq!(times(&small.with_inserted(&missed)), [8_000, 9_000, 10_000]);
}

#[test]
fn nearest_finds_the_closest_sample_inside_the_column_only() {
    let mut history = GpuHistory::with_capacity(100);
    // Samples at 0, 1000, 2000 and 5000 ms (a gap from 2 s to 5 s).
    for (offset_ms, draw_w) in [(0, 100), (1_000, 200), (2_000, 300), (5_000, 400)] {
        history.push(T0_MS + offset_ms, Some(&reading(Some(draw_w * 1_000))));
    }
    let power =
        |index: Option<usize>| index.and_then(|index| history.value(Metric::PowerDrawW, index));
    // The nearest of the column's samples, whichever side.
    assert_eq!(
        power(history.nearest(T0_MS + 1_400, T0_MS, T0_MS + 3_000)),
        Some(200.0)
    );
    assert_eq!(
        power(history.nearest(T0_MS + 1_600, T0_MS, T0_MS + 3_000)),
        Some(300.0)
    );
    // A tie goes to the earlier sample.
    assert_eq!(
        power(history.nearest(T0_MS + 1_500, T0_MS, T0_MS + 3_000)),
        Some(200.0)
    );
    // Only samples inside the column: the 5 s sample is nearer 4 s, but outside 3.5..4.5 s.
    assert_eq!(
        history.nearest(T0_MS + 4_000, T0_MS + 3_500, T0_MS + 4_500),
        None
    );
    assert_eq!(
        power(history.nearest(T0_MS + 4_000, T0_MS + 2_000, T0_MS + 6_000)),
        Some(400.0)
    );
    // Before the first and after the last sample.
    assert_eq!(
        power(history.nearest(T0_MS - 500, T0_MS - 1_000, T0_MS)),
        Some(100.0)
    );
    assert_eq!(
        power(history.nearest(T0_MS + 9_000, T0_MS, T0_MS + 9_000)),
        Some(400.0)
    );
    assert_eq!(
        GpuHistory::with_capacity(10).nearest(T0_MS, 0, u64::MAX),
        None
    );
}
