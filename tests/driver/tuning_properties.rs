//! The write gate under fire: 10,000 random requests, as the window would send them (any
//! numbers, NaN and infinities included) straight through the gate to the real NVML backend,
//! and as a user would type them (any text), parsed and applied through the tuning engine (the
//! one path every front end writes through) on the fake libnvidia-ml. The fake's write log must
//! show zero writes outside the card's constraints, and every refused request must say why.

use std::cell::RefCell;

use common::FakeMachine;
use nvidia_ml_fake::{WriteRecord, save_state};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::common;
use gputune_core::cli::apply::{ApplyArgs, changes_on_gpus};
use gputune_core::device::Backend;
use gputune_core::device::nvml::NvmlBackend;
use gputune_core::tuning::engine::{ClientInfo, Engine, EngineOptions, Ownership};
use gputune_core::tuning::request::{FanRequest, PowerLimitRequest, TuneRequest};
use gputune_formats::card::{Constraints, Setting};

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
/// `device::gate`.
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
        // What the fake logs: each P-state's write, inside that P-state's own range.
        Setting::GpuClockOffsetAt { pstate, offset_mhz } => {
            constraints.gpu_clock_offset_pstates.iter().any(|range| {
                range.pstate == pstate && (range.min_mhz..=range.max_mhz).contains(&offset_mhz)
            })
        }
        Setting::MemoryClockOffsetAt { pstate, offset_mhz } => {
            constraints.memory_clock_offset_pstates.iter().any(|range| {
                range.pstate == pstate && (range.min_mhz..=range.max_mhz).contains(&offset_mhz)
            })
        }
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
    /// Checks the writes made for `settings`: each reaches the driver once, an offset for
    /// compute once per compute P-state it had to move (P0, and P2 unless it followed).
    fn check(&mut self, settings: &[Setting]) -> Result<(), TestCaseError> {
        let mut state = self.machine.state();
        let log: Vec<WriteRecord> = std::mem::take(&mut state.write_log);
        let compute_offsets = settings
            .iter()
            .filter(|setting| {
                matches!(
                    setting,
                    Setting::GpuClockOffset { .. } | Setting::MemoryClockOffset { .. }
                )
            })
            .count();
        prop_assert!(
            (settings.len()..=settings.len() + compute_offsets).contains(&log.len()),
            "every write reaches the driver once (an offset once per compute P-state): {:?} for {:?}",
            log,
            settings
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
        self.check(&[])
    }
}

/// The card's range for a control as floats, or a made-up one when the card lacks it (so
/// requests for it still come, and are refused).
fn range_or(range: Option<(f64, f64)>, fallback: (f64, f64)) -> (f64, f64) {
    range.unwrap_or(fallback)
}

/// Numbers as the window could send them: mostly inside the card's range, often just past
/// either end, and sometimes NaN, infinities, negatives or extremes.
fn number_near((min, max): (f64, f64)) -> impl Strategy<Value = f64> {
    let span = (max - min).max(1.0);
    prop_oneof![
        12 => min..=max,
        4 => (min - span * 0.2)..(max + span * 0.2),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(-0.0),
        1 => Just(f64::MAX),
        1 => -1e7..1e7f64,
        1 => any::<f64>(),
    ]
}

/// A whole number near a range (in it, past its ends), or any value of the type.
fn whole_near((min, max): (f64, f64)) -> impl Strategy<Value = i64> {
    number_near((min, max)).prop_filter_map("a whole number", |value| {
        value.is_finite().then_some(value.round() as i64)
    })
}

fn to_u32(value: i64) -> u32 {
    u32::try_from(value.max(0)).unwrap_or(u32::MAX)
}

fn to_i32(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}

/// A clock pair near the range, usually in order, sometimes inverted or anything at all.
fn clock_pair(range: (f64, f64)) -> impl Strategy<Value = (u32, u32)> {
    prop_oneof![
        8 => (whole_near(range), whole_near(range)).prop_map(|(a, b)| {
            (to_u32(a.min(b)), to_u32(a.max(b)))
        }),
        1 => (whole_near(range), whole_near(range)).prop_map(|(a, b)| (to_u32(a), to_u32(b))),
        1 => (any::<u32>(), any::<u32>()),
    ]
}

/// The ranges requests are drawn around, from the card's constraints.
#[derive(Clone, Copy)]
struct Ranges {
    power_w: (f64, f64),
    power_pct: (f64, f64),
    gpu_clock_mhz: (f64, f64),
    memory_clock_mhz: (f64, f64),
    gpu_offset_mhz: (f64, f64),
    memory_offset_mhz: (f64, f64),
    fan_pct: (f64, f64),
}

impl Ranges {
    fn of(constraints: &Constraints) -> Ranges {
        let mw = |min: Option<u32>, max: Option<u32>| {
            min.zip(max)
                .map(|(min, max)| (f64::from(min) / 1000.0, f64::from(max) / 1000.0))
        };
        let power_w = range_or(
            mw(
                constraints.power_limit_min_mw,
                constraints.power_limit_max_mw,
            ),
            (100.0, 800.0),
        );
        let default_w = constraints
            .power_limit_default_mw
            .map_or(power_w.1, |mw| f64::from(mw) / 1000.0);
        let clock = |range: Option<gputune_formats::card::ClockRangeMhz>| {
            range.map(|range| (f64::from(range.min_mhz), f64::from(range.max_mhz)))
        };
        let offset = |range: Option<gputune_formats::card::OffsetRangeMhz>| {
            range.map(|range| (f64::from(range.min_mhz), f64::from(range.max_mhz)))
        };
        Ranges {
            power_w,
            power_pct: (power_w.0 / default_w * 100.0, power_w.1 / default_w * 100.0),
            gpu_clock_mhz: range_or(clock(constraints.gpu_clock_range), (0.0, 3500.0)),
            memory_clock_mhz: range_or(clock(constraints.memory_clock_range), (0.0, 12_000.0)),
            gpu_offset_mhz: range_or(
                offset(constraints.gpu_clock_offset_range),
                (-1000.0, 1000.0),
            ),
            memory_offset_mhz: range_or(
                offset(constraints.memory_clock_offset_range),
                (-2000.0, 6000.0),
            ),
            fan_pct: range_or(
                constraints
                    .fan_speed_range
                    .map(|range| (f64::from(range.min_pct), f64::from(range.max_pct))),
                (0.0, 100.0),
            ),
        }
    }
}

/// How often each control appears in a request: a request with everything in it is almost
/// always refused somewhere, and then tests only the refusal.
const PRESENT: f64 = 0.35;

fn numeric_request(ranges: Ranges) -> impl Strategy<Value = TuneRequest> {
    let power = prop::option::weighted(
        PRESENT,
        prop_oneof![
            number_near(ranges.power_pct).prop_map(PowerLimitRequest::Percent),
            number_near(ranges.power_w).prop_map(PowerLimitRequest::Watts),
        ],
    );
    let offset = |range| prop::option::weighted(PRESENT, whole_near(range).prop_map(to_i32));
    let fan = prop::option::weighted(
        PRESENT,
        prop_oneof![
            6 => whole_near(ranges.fan_pct).prop_map(|pct| FanRequest::Percent(to_u32(pct))),
            1 => any::<u32>().prop_map(FanRequest::Percent),
            2 => Just(FanRequest::Automatic),
        ],
    );
    (
        power,
        prop::option::weighted(PRESENT, clock_pair(ranges.gpu_clock_mhz)),
        prop::bool::weighted(0.05),
        prop::option::weighted(PRESENT, clock_pair(ranges.memory_clock_mhz)),
        prop::bool::weighted(0.05),
        offset(ranges.gpu_offset_mhz),
        offset(ranges.memory_offset_mhz),
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

/// Text that is not a sensible number at all.
fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
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
            "auto",
            "AUTO",
            "off",
            "max",
            "--fan-speed",
            "70%%",
            "315 kW",
            ",",
            "1,2,3",
            "-5%",
        ])
        .prop_map(str::to_string),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| x.to_string()),
        "\\PC{0,12}",
    ]
}

/// A number near a range as someone would type it: "315", "315.5W", "+150", "60 %".
fn typed_near(
    range: (f64, f64),
    suffixes: &'static [&'static str],
) -> impl Strategy<Value = String> {
    let suffix = prop::sample::select(suffixes.to_vec());
    prop_oneof![
        6 => (whole_near(range), suffix.clone()).prop_map(|(n, suffix)| format!("{n}{suffix}")),
        2 => (number_near(range), suffix).prop_map(|(x, suffix)| format!("{x:.1}{suffix}")),
        1 => garbage(),
    ]
}

fn typed_range(range: (f64, f64)) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => clock_pair(range).prop_map(|(min, max)| format!("{min},{max}")),
        1 => clock_pair(range).prop_map(|(min, max)| format!(" {min} , {max}MHz")),
        1 => (garbage(), garbage()).prop_map(|(min, max)| format!("{min},{max}")),
        1 => garbage(),
    ]
}

fn typed_args(ranges: Ranges) -> impl Strategy<Value = ApplyArgs> {
    let some = |strategy: BoxedStrategy<String>| prop::option::weighted(PRESENT, strategy);
    let power = prop_oneof![
        typed_near(ranges.power_w, &["", "W", "w", " W", "%", "kW", "x"]),
        typed_near(ranges.power_pct, &["%", " %", "", "W"]),
    ]
    .boxed();
    let offset = |range| typed_near(range, &["", "", "MHz", " mhz", "%"]).boxed();
    let fan = prop_oneof![
        4 => typed_near(ranges.fan_pct, &["", "%", " %", "W"]),
        1 => Just("auto".to_string()),
    ]
    .boxed();
    (
        some(power),
        some(typed_range(ranges.gpu_clock_mhz).boxed()),
        prop::bool::weighted(0.05),
        some(typed_range(ranges.memory_clock_mhz).boxed()),
        prop::bool::weighted(0.05),
        some(offset(ranges.gpu_offset_mhz)),
        some(offset(ranges.memory_offset_mhz)),
        some(fan),
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
    let result = runner(cases).run(&numeric_request(Ranges::of(&constraints)), |request| {
        let mut audit = audit.borrow_mut();
        let mut backend = backend.borrow_mut();
        match request.validated(&constraints) {
            Err(error) => audit.refused(&error.to_string()),
            Ok(settings) => {
                for setting in &settings {
                    let written = backend.apply(0, setting);
                    prop_assert!(written.is_ok(), "{:?}: {:?}", setting, written);
                }
                let settings: Vec<Setting> =
                    settings.iter().map(|setting| *setting.setting()).collect();
                audit.check(&settings)
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

/// Text from the command line: parse, turn into settings for the GPU and apply through the
/// engine, as `gputune apply` does.
fn typed_requests_never_write_outside_the_constraints(scenario: &'static str, cases: u32) {
    let machine = FakeMachine::new(scenario, "");
    let state_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let (engine, notices) = Engine::open(
        Box::new(open(&machine)),
        &EngineOptions {
            state_dir: state_dir.path().to_path_buf(),
            // Tests may run as root: never the machine's shared record folder (/run/gputune).
            record_dir: Some(state_dir.path().to_path_buf()),
            ownership: Ownership::InProcess,
            call_timeout: std::time::Duration::from_secs(30),
            owner_label: "the property test".to_string(),
            box_journal_dir: None,
        },
        std::sync::Arc::new(gputune_core::clock::WallClock),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert!(notices.is_empty(), "{notices:?}");
    let gpus = engine.gpus();
    let constraints = gpus[0].constraints.clone();
    let client = ClientInfo {
        id: 1,
        pid: None,
        uid: None,
        user: None,
        label: "the property test".to_string(),
        may_write: true,
    };
    let ranges = Ranges::of(&constraints);
    let audit = RefCell::new(WriteAudit {
        machine: &machine,
        constraints: constraints.clone(),
        writes_checked: 0,
        requests_refused: 0,
    });
    let engine = RefCell::new(engine);
    let result = runner(cases).run(&typed_args(ranges), |args| {
        let mut audit = audit.borrow_mut();
        let engine = &mut *engine.borrow_mut();
        let plan = match args.plan() {
            Ok(plan) => plan,
            Err(error) => return audit.refused(&error.to_string()),
        };
        let changes = match changes_on_gpus(&gpus, &plan) {
            Ok(changes) => changes,
            Err(error) => return audit.refused(&error.to_string()),
        };
        let written = engine.apply_changes(&client, &changes);
        prop_assert!(written.is_ok(), "{:?}: {:?}", args, written);
        let settings: Vec<Setting> = changes
            .iter()
            .flat_map(|gpu| gpu.settings.iter().copied())
            .collect();
        audit.check(&settings)
    });
    if let Err(error) = result {
        panic!("{scenario}: {error}");
    }
    let audit = audit.into_inner();
    eprintln!(
        "{scenario}, text: {cases} requests, {} refused, {} writes, all inside the constraints",
        audit.requests_refused, audit.writes_checked
    );
    assert!(audit.writes_checked > 0 && audit.requests_refused > 0);
    assert!(
        std::fs::read_dir(state_dir.path())
            .unwrap_or_else(|error| panic!("{error}"))
            .filter_map(Result::ok)
            .all(|entry| !entry.file_name().to_string_lossy().starts_with("journal-")),
        "every apply finished: no journal is left"
    );
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
