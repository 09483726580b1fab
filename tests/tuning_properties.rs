//! The write gate under fire: 10,000 random requests, as the window would send them (any
//! numbers, NaN and infinities included) and as a user would type them (any text), parsed,
//! validated and applied to the real NVML backend on the fake libnvidia-ml. The fake's write
//! log must show zero writes outside the card's constraints, and every refused request must
//! say why.

mod common;

use std::cell::RefCell;

use common::FakeMachine;
use gputune::cli::apply::{ApplyArgs, apply_changes, validate_on_gpus};
use gputune::device::nvml::NvmlBackend;
use gputune::device::{Backend, Constraints, Setting};
use gputune::tuning::request::{FanRequest, PowerLimitRequest, TuneRequest};
use nvidia_ml_fake::{WriteRecord, save_state};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Cases per property; four properties make 10,000 requests.
const CASES_PER_CARD_AND_SOURCE: [u32; 2] = [3_000, 2_000];

fn open(machine: &FakeMachine) -> NvmlBackend {
    NvmlBackend::open(Some(&machine.library))
        .unwrap_or_else(|error| panic!("the fake library opens: {error}"))
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 200,
        ..Config::default()
    })
}

/// Whether a write the driver saw lies inside the constraints, checked here independently of
/// `tuning::limits`.
fn inside(constraints: &Constraints, setting: &Setting) -> bool {
    let within = |value: u32, min: Option<u32>, max: Option<u32>| matches!((min, max), (Some(min), Some(max)) if (min..=max).contains(&value));
    match *setting {
        Setting::PowerLimit { power_limit_mw } => within(
            power_limit_mw,
            constraints.power_limit_min_mw,
            constraints.power_limit_max_mw,
        ),
        Setting::LockGpuClocks { min_mhz, max_mhz } => {
            constraints.gpu_clock_range.is_some_and(|range| {
                range.min_mhz <= min_mhz && min_mhz <= max_mhz && max_mhz <= range.max_mhz
            })
        }
        Setting::LockMemoryClocks { min_mhz, max_mhz } => {
            constraints.memory_clock_range.is_some_and(|range| {
                range.min_mhz <= min_mhz && min_mhz <= max_mhz && max_mhz <= range.max_mhz
            })
        }
        Setting::ResetGpuClocks => constraints.gpu_clock_range.is_some(),
        Setting::ResetMemoryClocks => constraints.memory_clock_range.is_some(),
        Setting::GpuClockOffset { offset_mhz } => constraints
            .gpu_clock_offset_range
            .is_some_and(|range| (range.min_mhz..=range.max_mhz).contains(&offset_mhz)),
        Setting::MemoryClockOffset { offset_mhz } => constraints
            .memory_clock_offset_range
            .is_some_and(|range| (range.min_mhz..=range.max_mhz).contains(&offset_mhz)),
        Setting::FanSpeed {
            fan_index,
            speed_pct,
        } => {
            fan_index < constraints.fan_count
                && within(
                    speed_pct,
                    constraints.fan_speed_range.map(|range| range.min_pct),
                    constraints.fan_speed_range.map(|range| range.max_pct),
                )
        }
        Setting::FanAutomatic { fan_index } => fan_index < constraints.fan_count,
    }
}

/// Reads the writes made since the last check, checks each against the constraints, and
/// empties the log so it stays small over thousands of cases.
struct WriteAudit<'a> {
    machine: &'a FakeMachine,
    constraints: Constraints,
    writes_checked: u64,
    requests_refused: u64,
}

impl WriteAudit<'_> {
    fn check(&mut self, writes_expected: usize) -> Result<(), TestCaseError> {
        let mut state = self.machine.state();
        let log: Vec<WriteRecord> = std::mem::take(&mut state.write_log);
        prop_assert_eq!(
            log.len(),
            writes_expected,
            "every write reaches the driver once: {:?}",
            log
        );
        for record in &log {
            prop_assert!(
                inside(&self.constraints, &record.setting),
                "a write outside the constraints {:?}: {:?}",
                self.constraints,
                record
            );
            prop_assert_eq!(record.result_code, 0, "the driver refused {:?}", record);
        }
        self.writes_checked += log.len() as u64;
        if !log.is_empty() {
            save_state(self.machine.state_path(), &state).map_err(TestCaseError::fail)?;
        }
        Ok(())
    }

    fn refused(&mut self, message: &str) -> Result<(), TestCaseError> {
        prop_assert!(!message.trim().is_empty(), "a refusal without a message");
        self.requests_refused += 1;
        self.check(0)
    }
}

/// Numbers as the window could send them: sensible ones, and NaN, infinities, negatives,
/// extremes.
fn any_number(sensible: std::ops::Range<f64>) -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => sensible,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(-0.0),
        1 => Just(f64::MAX),
        1 => Just(f64::MIN_POSITIVE),
        2 => -1e7..1e7f64,
        2 => any::<f64>(),
    ]
}

fn clock_pair(sensible_max: u32) -> impl Strategy<Value = (u32, u32)> {
    prop_oneof![
        3 => (0..sensible_max, 0..sensible_max),
        1 => (any::<u32>(), any::<u32>()),
    ]
}

fn numeric_request() -> impl Strategy<Value = TuneRequest> {
    let power = prop::option::of(prop_oneof![
        any_number(40.0..140.0).prop_map(PowerLimitRequest::Percent),
        any_number(100.0..800.0).prop_map(PowerLimitRequest::Watts),
    ]);
    let offset = || {
        prop::option::of(prop_oneof![
            3 => -2500..7000i32,
            1 => any::<i32>(),
        ])
    };
    let fan = prop::option::of(prop_oneof![
        4 => (0u32..130).prop_map(FanRequest::Percent),
        1 => any::<u32>().prop_map(FanRequest::Percent),
        1 => Just(FanRequest::Automatic),
    ]);
    (
        power,
        prop::option::of(clock_pair(3500)),
        prop::bool::weighted(0.1),
        prop::option::of(clock_pair(12_000)),
        prop::bool::weighted(0.1),
        offset(),
        offset(),
        fan,
    )
        .prop_map(
            |(
                power_limit,
                lock_gpu_clocks,
                reset_gpu_clocks,
                lock_memory_clocks,
                reset_memory_clocks,
                gpu_clock_offset_mhz,
                memory_clock_offset_mhz,
                fan,
            )| TuneRequest {
                power_limit,
                lock_gpu_clocks,
                reset_gpu_clocks,
                lock_memory_clocks,
                reset_memory_clocks,
                gpu_clock_offset_mhz,
                memory_clock_offset_mhz,
                fan,
            },
        )
}

/// A number as someone might type it, in range or far out of it.
fn typed_number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0i64..12_000).prop_map(|n| n.to_string()),
        (-3000i64..3000).prop_map(|n| format!("{n:+}")),
        any::<i64>().prop_map(|n| n.to_string()),
        (-1e4..1e4f64).prop_map(|x| format!("{x:.2}")),
        any::<f64>().prop_map(|x| x.to_string()),
        prop::sample::select(vec![
            "NaN",
            "nan",
            "inf",
            "-inf",
            "Infinity",
            "1e309",
            "-0",
            "0x1F",
            "1_000",
            "",
            " ",
            "٣١٥",
            "３１５",
            "9999999999999999999999999999999999999999",
        ])
        .prop_map(str::to_string),
    ]
}

/// Text for an option: a typed number with a plausible or wrong suffix, or anything at all.
fn typed_value() -> impl Strategy<Value = String> {
    let suffix = prop::sample::select(vec![
        "", "", "", "W", "w", " W", "%", " %", "MHz", "mhz", "kW", "%%", "x",
    ]);
    prop_oneof![
        6 => (typed_number(), suffix).prop_map(|(number, suffix)| format!("{number}{suffix}")),
        1 => prop::sample::select(vec!["auto", "AUTO", "Auto ", "off", "max", "--fan-speed"])
            .prop_map(str::to_string),
        1 => "\\PC{0,12}",
    ]
}

fn typed_range() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (typed_number(), typed_number()).prop_map(|(min, max)| format!("{min},{max}")),
        1 => (0u32..4000, 0u32..12_000).prop_map(|(min, max)| format!("{min}, {max}MHz")),
        1 => typed_value(),
    ]
}

fn typed_args() -> impl Strategy<Value = ApplyArgs> {
    let value = || prop::option::weighted(0.5, typed_value());
    let range = || prop::option::weighted(0.3, typed_range());
    (
        value(),
        range(),
        prop::bool::weighted(0.1),
        range(),
        prop::bool::weighted(0.1),
        value(),
        value(),
        value(),
    )
        .prop_map(
            |(
                power_limit,
                lock_gpu_clocks,
                reset_gpu_clocks,
                lock_memory_clocks,
                reset_memory_clocks,
                gpu_clock_offset,
                memory_clock_offset,
                fan_speed,
            )| ApplyArgs {
                gpu: Vec::new(),
                power_limit,
                lock_gpu_clocks,
                reset_gpu_clocks,
                lock_memory_clocks,
                reset_memory_clocks,
                gpu_clock_offset,
                memory_clock_offset,
                fan_speed,
                try_s: None,
                baseline_s: "10".to_string(),
            },
        )
}

/// Numbers from the window: validate against the card's constraints, write what passed.
fn numeric_requests_never_write_outside_the_constraints(scenario: &'static str, cases: u32) {
    let machine = FakeMachine::new(scenario, "");
    let mut backend = open(&machine);
    let constraints = backend
        .constraints(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let audit = RefCell::new(WriteAudit {
        machine: &machine,
        constraints: constraints.clone(),
        writes_checked: 0,
        requests_refused: 0,
    });
    let backend = RefCell::new(backend);
    let result = runner(cases).run(&numeric_request(), |request| {
        let mut audit = audit.borrow_mut();
        let mut backend = backend.borrow_mut();
        match request.validated(&constraints) {
            Err(error) => audit.refused(&error.to_string()),
            Ok(settings) => {
                for setting in &settings {
                    let written = backend.apply(0, setting);
                    prop_assert!(written.is_ok(), "{:?}: {:?}", setting, written);
                }
                audit.check(settings.len())
            }
        }
    });
    if let Err(error) = result {
        panic!("{scenario}: {error}");
    }
    let audit = audit.into_inner();
    eprintln!(
        "{scenario}, numbers: {cases} requests, {} refused, {} writes, all inside the constraints",
        audit.requests_refused, audit.writes_checked
    );
    assert!(audit.writes_checked > 0 && audit.requests_refused > 0);
}

/// Text from the command line: parse, validate on the GPU and write, as `gputune apply` does.
fn typed_requests_never_write_outside_the_constraints(scenario: &'static str, cases: u32) {
    let machine = FakeMachine::new(scenario, "");
    let mut backend = open(&machine);
    let constraints = backend
        .constraints(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let audit = RefCell::new(WriteAudit {
        machine: &machine,
        constraints,
        writes_checked: 0,
        requests_refused: 0,
    });
    let backend = RefCell::new(backend);
    let result = runner(cases).run(&typed_args(), |args| {
        let mut audit = audit.borrow_mut();
        let backend = &mut *backend.borrow_mut();
        let plan = match args.plan() {
            Ok(plan) => plan,
            Err(error) => return audit.refused(&error.to_string()),
        };
        match validate_on_gpus(backend, &plan) {
            Err(error) => audit.refused(&error.to_string()),
            Ok(changes) => {
                let written = apply_changes(backend, &changes);
                prop_assert!(written.is_ok(), "{:?}: {:?}", args, written);
                audit.check(changes.iter().map(|gpu| gpu.settings.len()).sum())
            }
        }
    });
    if let Err(error) = result {
        panic!("{scenario}: {error}");
    }
    let audit = audit.into_inner();
    eprintln!(
        "{scenario}, text: {cases} requests, {} refused, {} writes, all inside the constraints",
        audit.requests_refused, audit.writes_checked
    );
    assert!(audit.requests_refused > 0);
}

#[test]
fn rtx4090_numeric_requests() {
    numeric_requests_never_write_outside_the_constraints("rtx4090", CASES_PER_CARD_AND_SOURCE[0]);
}

#[test]
fn rtx4090_typed_requests() {
    typed_requests_never_write_outside_the_constraints("rtx4090", CASES_PER_CARD_AND_SOURCE[0]);
}

#[test]
fn fanless_numeric_requests() {
    numeric_requests_never_write_outside_the_constraints(
        "datacenter-fanless",
        CASES_PER_CARD_AND_SOURCE[1],
    );
}

#[test]
fn fanless_typed_requests() {
    typed_requests_never_write_outside_the_constraints(
        "datacenter-fanless",
        CASES_PER_CARD_AND_SOURCE[1],
    );
}
