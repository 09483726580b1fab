//! Health hints from synthetic histories: each rule fires when it should and stays quiet
//! otherwise.

use gputune_core::telemetry::health::{HintKind, Severity, health_hints};
use gputune_core::telemetry::history::GpuHistory;
use gputune_formats::{
    card::Telemetry,
    throttle::{ThrottleReason, ThrottleReasons},
};

const START_MS: u64 = 1_700_000_000_000;
const GIB: u64 = 1024 * 1024 * 1024;

fn reading(utilization_pct: u32, reasons: &[ThrottleReason], link: (u32, u32)) -> Telemetry {
    Telemetry {
        utilization_gpu_pct: Some(utilization_pct),
        memory_used_bytes: Some(20 * GIB),
        throttle_reasons: Some(reasons.iter().copied().collect::<ThrottleReasons>()),
        pcie_link_gen: Some(link.0),
        pcie_link_width: Some(link.1),
        pcie_link_gen_max: Some(4),
        pcie_link_width_max: Some(16),
        power_draw_mw: Some(300_000),
        ..Telemetry::default()
    }
}

/// A minute of samples, 500 ms apart, produced by `make(sample_index)`.
fn minute_of(make: impl Fn(usize) -> Telemetry) -> (GpuHistory, u64) {
    let mut history = GpuHistory::with_capacity(1_000);
    let mut time_ms = START_MS;
    for index in 0..120 {
        time_ms = START_MS + index as u64 * 500;
        history.push(time_ms, Some(&make(index)));
    }
    (history, time_ms)
}

fn kinds(history: &GpuHistory, now_ms: u64) -> Vec<HintKind> {
    health_hints(history, now_ms)
        .into_iter()
        .map(|hint| hint.kind)
        .collect()
}

#[test]
fn pcie_link_below_maximum_under_load_is_flagged_but_idle_downtraining_is_not() {
    let (history, now) = minute_of(|_| reading(99, &[], (3, 8)));
    let hints = health_hints(&history, now);
    let hint = hints
        .iter()
        .find(|hint| hint.kind == HintKind::PcieBelowMaximum);
    let hint = hint.unwrap_or_else(|| panic!("{hints:?}"));
    assert_eq!(hint.severity, Severity::Warning);
    assert!(
        hint.title.contains("Gen 3 x8") && hint.title.contains("Gen 4 x16"),
        "{}",
        hint.title
    );
    assert!(hint.advice.contains("riser"));

    // An idle card trains its link down to save power: that is normal.
    let (history, now) = minute_of(|_| reading(0, &[ThrottleReason::GpuIdle], (1, 16)));
    assert!(!kinds(&history, now).contains(&HintKind::PcieBelowMaximum));
}

#[test]
fn utilization_that_keeps_dropping_to_zero_points_at_the_data_loader() {
    // 2.5 s busy, 1.5 s waiting, like the simulator's stop-and-go load.
    let (history, now) = minute_of(|index| {
        if index % 8 < 5 {
            reading(99, &[], (4, 16))
        } else {
            reading(0, &[], (4, 16))
        }
    });
    let hints = health_hints(&history, now);
    let hint = hints
        .iter()
        .find(|hint| hint.kind == HintKind::DataLoaderStarving);
    let hint = hint.unwrap_or_else(|| panic!("{hints:?}"));
    assert!(hint.advice.contains("num_workers") && hint.advice.contains("pin_memory"));
    assert!(hint.title.contains("15 times"), "{}", hint.title);

    let (steady, now) = minute_of(|_| reading(99, &[], (4, 16)));
    assert!(!kinds(&steady, now).contains(&HintKind::DataLoaderStarving));
}

#[test]
fn thermal_throttling_is_a_warning_and_power_cap_a_note() {
    let (history, now) = minute_of(|index| {
        let mut reasons = vec![ThrottleReason::SwPowerCap];
        if index % 5 == 0 {
            reasons.push(ThrottleReason::SwThermalSlowdown);
        }
        reading(99, &reasons, (4, 16))
    });
    let hints = health_hints(&history, now);
    assert_eq!(
        hints
            .iter()
            .map(|hint| (hint.kind, hint.severity))
            .collect::<Vec<_>>(),
        vec![
            (HintKind::ThermalThrottling, Severity::Warning),
            (HintKind::PowerCapAlways, Severity::Info)
        ],
        "warnings come first"
    );
}

#[test]
fn too_little_data_or_a_quiet_card_gives_no_hints() {
    let mut history = GpuHistory::with_capacity(100);
    for index in 0..5 {
        history.push(
            START_MS + index * 500,
            Some(&reading(99, &[ThrottleReason::SwThermalSlowdown], (1, 1))),
        );
    }
    assert!(health_hints(&history, START_MS + 2_500).is_empty());

    let (quiet, now) = minute_of(|_| reading(40, &[], (4, 16)));
    assert!(health_hints(&quiet, now).is_empty());
}

#[test]
fn hints_only_look_at_the_last_minute() {
    let (history, end) = minute_of(|_| reading(99, &[ThrottleReason::SwThermalSlowdown], (4, 16)));
    assert!(kinds(&history, end).contains(&HintKind::ThermalThrottling));
    // Ten minutes later nothing recent is left to judge.
    assert!(health_hints(&history, end + 600_000).is_empty());
}
