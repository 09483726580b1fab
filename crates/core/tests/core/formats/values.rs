//! The fixed values the golden files hold: one of each message and record, with every optional
//! part filled somewhere so a renamed field shows.

// Through `gputune_formats`, so the list of formats names everything the golden files hold.
use gputune_core::telemetry::history::MetricRow;
use gputune_formats::card::{
    ClockRangeMhz, Constraints, CriticalEvent, DeviceError, EccCounts, FanMode, FanRangePct,
    FanReading, GpuIdentity, GpuProcess, OffsetRangeMhz, ProcessKind, PstateOffset,
    PstateOffsetRange, Setting, Telemetry,
};
use gputune_formats::fan_curve::{CurvePoint, FanCurve};
use gputune_formats::history::HistoryRow;
use gputune_formats::jobs::{CostConfig, JOB_RECORD_FORMAT, JobCost, JobGpu, JobRecord};
use gputune_formats::protocol::BootDefault;
use gputune_formats::temperature_hold::{
    TemperatureHold, TemperatureHoldState, TemperatureHoldStatus,
};
use gputune_formats::throttle::{ThrottleReason, ThrottleReasons};
use gputune_formats::tuning::{
    ChangeNote, ClockLockInForce, CriticalNote, GpuApplied, GpuChange, GpuInfo, GpuRestored,
    GpuStats, GpuTuning, Hold, Holder, JobInfo, Notice, SessionPurpose, SessionReport, SettingLeft,
    SettingsInForce, TemperatureTrend, ThrottleTime, TrialPhase, TrialStats, TrialStatus,
};

pub const UUID: &str = "GPU-5a1e0c2d-0000-4000-8000-000000000001";

pub fn power_limit(watts: u32) -> Setting {
    Setting::PowerLimit {
        power_limit_mw: watts * 1000,
    }
}

/// Every kind of setting once.
pub fn all_settings() -> Vec<Setting> {
    vec![
        power_limit(315),
        Setting::LockGpuClocks {
            min_mhz: 210,
            max_mhz: 2520,
        },
        Setting::ResetGpuClocks,
        Setting::LockMemoryClocks {
            min_mhz: 405,
            max_mhz: 10501,
        },
        Setting::ResetMemoryClocks,
        Setting::GpuClockOffset { offset_mhz: -150 },
        Setting::MemoryClockOffset { offset_mhz: 500 },
        Setting::FanSpeed {
            fan_index: 1,
            speed_pct: 55,
        },
        Setting::FanAutomatic { fan_index: 0 },
    ]
}

/// The settings protocol 6 added: one P-state's offset each (what puts back a card whose
/// P-states had different offsets).
pub fn pstate_settings() -> Vec<Setting> {
    vec![
        Setting::GpuClockOffsetAt {
            pstate: 2,
            offset_mhz: 60,
        },
        Setting::MemoryClockOffsetAt {
            pstate: 0,
            offset_mhz: -500,
        },
    ]
}

/// Every kind of setting once, those of protocol 6 included.
pub fn all_settings_v6() -> Vec<Setting> {
    let mut settings = all_settings();
    settings.extend(pstate_settings());
    settings
}

fn pstate_range(pstate: u32, room_mhz: i32) -> PstateOffsetRange {
    PstateOffsetRange {
        pstate,
        min_mhz: -room_mhz,
        max_mhz: room_mhz,
    }
}

fn pstate_offset(pstate: u32, offset_mhz: i32) -> PstateOffset {
    PstateOffset { pstate, offset_mhz }
}

pub fn curve() -> FanCurve {
    let points = vec![
        CurvePoint {
            temperature_c: 40.0,
            speed_pct: 30.0,
        },
        CurvePoint {
            temperature_c: 85.0,
            speed_pct: 100.0,
        },
    ];
    match FanCurve::new(points, 3.5) {
        Ok(curve) => curve,
        Err(error) => panic!("the fixed curve is valid: {error}"),
    }
}

/// A Slurm job's step, as the SPANK plugin names it.
pub fn job_info() -> JobInfo {
    JobInfo {
        scheduler: "slurm".to_string(),
        job_id: "4242".to_string(),
        step: "batch".to_string(),
        user: "alice".to_string(),
        uid: 1000,
    }
}

pub fn identity() -> GpuIdentity {
    GpuIdentity {
        index: 0,
        uuid: UUID.to_string(),
        name: "NVIDIA GeForce RTX 4090".to_string(),
        pci_bus_id: "00000000:01:00.0".to_string(),
        memory_total_bytes: 25_757_220_864,
        driver_version: Some("580.65.06".to_string()),
        nvml_version: Some("12.580.65.06".to_string()),
        architecture: Some("Ada".to_string()),
        minor_number: Some(0),
    }
}

pub fn constraints() -> Constraints {
    Constraints {
        power_limit_min_mw: Some(150_000),
        power_limit_max_mw: Some(600_000),
        power_limit_default_mw: Some(450_000),
        gpu_clock_range: Some(ClockRangeMhz {
            min_mhz: 210,
            max_mhz: 3105,
        }),
        memory_clock_range: Some(ClockRangeMhz {
            min_mhz: 405,
            max_mhz: 10501,
        }),
        fan_count: 2,
        fan_speed_range: Some(FanRangePct {
            min_pct: 30,
            max_pct: 100,
        }),
        gpu_clock_offset_range: Some(OffsetRangeMhz {
            min_mhz: -1000,
            max_mhz: 1000,
        }),
        memory_clock_offset_range: Some(OffsetRangeMhz {
            min_mhz: -2000,
            max_mhz: 6000,
        }),
        gpu_clock_offset_pstates: vec![
            pstate_range(0, 1000),
            pstate_range(2, 1000),
            pstate_range(8, 0),
        ],
        memory_clock_offset_pstates: vec![pstate_range(0, 2000), pstate_range(2, 2000)],
        slowdown_temperature_c: Some(87),
        boost_clock_mhz: Some(2520),
    }
}

pub fn gpu_info() -> GpuInfo {
    GpuInfo {
        identity: identity(),
        constraints: constraints(),
    }
}

pub fn telemetry() -> Telemetry {
    Telemetry {
        sampled_at_ms: 1_764_000_000_000,
        power_draw_mw: Some(287_512),
        power_limit_mw: Some(315_000),
        temperature_c: Some(64),
        fans: Some(vec![
            FanReading {
                speed_pct: Some(48),
                speed_rpm: Some(1450),
            },
            FanReading {
                speed_pct: Some(55),
                speed_rpm: None,
            },
        ]),
        gpu_clock_mhz: Some(2505),
        sm_clock_mhz: Some(2505),
        memory_clock_mhz: Some(10501),
        utilization_gpu_pct: Some(99),
        utilization_memory_pct: Some(41),
        memory_used_bytes: Some(18_253_611_008),
        performance_state: Some(2),
        throttle_reasons: Some(ThrottleReasons::from_bits(
            ThrottleReason::SwPowerCap.bit() | ThrottleReason::HwThermalSlowdown.bit(),
        )),
        pcie_link_gen: Some(4),
        pcie_link_width: Some(16),
        pcie_link_gen_max: Some(4),
        pcie_link_width_max: Some(16),
        energy_total_mj: Some(912_345_678),
        processes: Some(vec![GpuProcess {
            pid: 4242,
            kind: ProcessKind::Compute,
            used_memory_bytes: Some(17_179_869_184),
            user: Some("alice".to_string()),
            command: Some("python train.py".to_string()),
            exited: false,
            ancestor_pids: Vec::new(),
        }]),
        ecc: Some(EccCounts {
            corrected_volatile: 3,
            uncorrected_volatile: 0,
        }),
    }
}

pub fn in_force() -> SettingsInForce {
    SettingsInForce {
        power_limit_mw: Some(315_000),
        gpu_clock_lock: ClockLockInForce::Locked {
            min_mhz: 210,
            max_mhz: 2520,
        },
        memory_clock_lock: ClockLockInForce::Unknown,
        gpu_clock_offset_mhz: Some(-150),
        memory_clock_offset_mhz: Some(0),
        fans: Some(vec![FanMode::Automatic, FanMode::Manual { speed_pct: 55 }]),
        gpu_clock_offsets: vec![
            pstate_offset(0, 0),
            pstate_offset(2, -150),
            pstate_offset(8, 0),
        ],
        memory_clock_offsets: vec![pstate_offset(0, 0), pstate_offset(2, 0)],
    }
}

pub fn tuning() -> GpuTuning {
    GpuTuning {
        gpu_index: 0,
        gpu_uuid: UUID.to_string(),
        in_force: in_force(),
        fan_curve: Some(curve()),
        fan_safety_engaged: false,
        holders: vec![Holder {
            session: 7,
            controls: vec![Hold::PowerLimit, Hold::Fans],
            purpose: SessionPurpose::Stability,
            by: "gputune check (pid 77, user bob)".to_string(),
            client: 3,
            since_ms: 1_764_000_000_000,
            trial_ends_at_ms: Some(1_764_000_060_000),
            job_pid: Some(4242),
            energy_at_start_mj: Some(900_000_000),
            job: None,
        }, Holder {
            session: 8,
            controls: vec![Hold::GpuClockOffset],
            purpose: SessionPurpose::Job,
            by: "gputune_spank.so (pid 91, user root)".to_string(),
            client: 4,
            since_ms: 1_764_000_000_000,
            trial_ends_at_ms: None,
            job_pid: None,
            energy_at_start_mj: Some(900_000_000),
            job: Some(job_info()),
        }],
        last_change: Some(change_note(1_764_000_000_000)),
        last_critical: Some(CriticalNote {
            at_ms: 1_764_000_030_000,
            critical: CriticalEvent {
                gpu_index: 0,
                xid: 13,
            },
            put_back: vec![
                Setting::ResetGpuClocks,
                Setting::GpuClockOffset { offset_mhz: 0 },
            ],
            sentence: "GPU 0 reported Xid 13 at +300 MHz: the GPU clock lock and GPU clock offset were put back; fans kept.".to_string(),
        }),
        temperature_hold: Some(TemperatureHoldStatus {
            hold: temperature_hold(),
            set_by: "alice".to_string(),
            since_ms: 1_764_000_000_000,
            state: TemperatureHoldState::Paused {
                by: "a sweep of gputune sweep (pid 77, user bob)".to_string(),
            },
            put_back_mw: Some(450_000),
        }),
    }
}

pub fn temperature_hold() -> TemperatureHold {
    TemperatureHold {
        max_temperature_c: 80,
        min_power_limit_mw: 270_000,
        max_power_limit_mw: 450_000,
    }
}

pub fn change_note(at_ms: u64) -> ChangeNote {
    ChangeNote {
        at_ms,
        by: "gputune apply (pid 77, user bob)".to_string(),
        what: "power limit 315 W".to_string(),
    }
}

pub fn stats() -> TrialStats {
    TrialStats {
        samples: 60,
        duration_s: 59.5,
        average_power_w: Some(301.25),
        average_sm_clock_mhz: Some(2490.5),
        min_sm_clock_mhz: Some(2415),
        average_temperature_c: Some(63.5),
        peak_temperature_c: Some(66),
        average_fan_speed_pct: Some(51.5),
        energy_wh: Some(4.96875),
        energy_wh_per_min: Some(5.0),
        throttle_s: vec![ThrottleTime {
            reason: ThrottleReason::SwPowerCap,
            seconds: 12.5,
        }],
        temperature_trend: Some(TemperatureTrend::Moving { c_per_min: 0.75 }),
    }
}

pub fn trial_status() -> TrialStatus {
    TrialStatus {
        gpu_index: 0,
        session: 7,
        what: "power limit 315 W".to_string(),
        phase: TrialPhase::Running { left_s: 42 },
        baseline: stats(),
        during: TrialStats::default(),
        baseline_warning: Some("The power limit changed during the baseline.".to_string()),
        message: None,
        failed: false,
    }
}

pub fn report() -> SessionReport {
    SessionReport {
        session: 7,
        purpose: SessionPurpose::Scan,
        kept: false,
        restored: vec![GpuRestored {
            gpu_index: 0,
            gpu_uuid: UUID.to_string(),
            restored: vec![
                power_limit(450),
                Setting::GpuClockOffsetAt {
                    pstate: 0,
                    offset_mhz: 0,
                },
                Setting::GpuClockOffsetAt {
                    pstate: 2,
                    offset_mhz: 60,
                },
            ],
            left: vec![SettingLeft {
                setting: Setting::FanAutomatic { fan_index: 1 },
                reason: "the driver refused".to_string(),
            }],
            exact: true,
        }],
        stats: vec![GpuStats {
            gpu_index: 0,
            stats: stats(),
        }],
        message: "The scan ended: GPU 0 reported Xid 13.".to_string(),
        critical_event: Some(CriticalEvent {
            gpu_index: 0,
            xid: 13,
        }),
        job_record: None,
    }
}

/// A job's session ended by its client: the report carries the job's record.
pub fn job_report() -> SessionReport {
    SessionReport {
        purpose: SessionPurpose::Job,
        stats: Vec::new(),
        message: "Put back".to_string(),
        critical_event: None,
        job_record: Some(Box::new(job_record())),
        ..report()
    }
}

pub fn cost_config() -> CostConfig {
    CostConfig {
        price_per_kwh: Some(0.32),
        currency: Some("€".to_string()),
        co2_grams_per_kwh: Some(380.0),
    }
}

/// Two hours of a job on one card: 1.25 kWh by its energy counter.
pub fn job_record() -> JobRecord {
    JobRecord {
        format_version: JOB_RECORD_FORMAT,
        job: job_info(),
        node: "node07".to_string(),
        session: 7,
        started_at_ms: 1_764_000_000_000,
        ended_at_ms: 1_764_007_200_000,
        ended: "Put back".to_string(),
        gpus: vec![JobGpu {
            gpu_index: 0,
            gpu_uuid: UUID.to_string(),
            name: "NVIDIA GeForce RTX 4090".to_string(),
            energy_j: 4_500_000.0,
            energy_kwh: 1.25,
            energy_estimated: false,
            mean_power_w: Some(312.5),
            peak_power_w: Some(345.25),
            peak_temperature_c: Some(71),
            throttle: vec![
                ThrottleTime {
                    reason: ThrottleReason::SwPowerCap,
                    seconds: 6_480.5,
                },
                ThrottleTime {
                    reason: ThrottleReason::SwThermalSlowdown,
                    seconds: 12.0,
                },
            ],
            readings: 7_200,
            first_reading_ms: Some(1_764_000_000_500),
            last_reading_ms: Some(1_764_007_199_500),
            settings_held: vec![
                power_limit(315),
                Setting::GpuClockOffset { offset_mhz: 150 },
            ],
        }],
        energy_j: 4_500_000.0,
        energy_kwh: 1.25,
        energy_estimated: false,
        cost: Some(JobCost {
            price: cost_config(),
            cost: Some(0.4),
            co2_kg: Some(0.475),
            from: "the daemon's /etc/gputune/cost.toml".to_string(),
        }),
    }
}

pub fn applied() -> GpuApplied {
    GpuApplied {
        gpu_index: 0,
        applied: vec![power_limit(315)],
        in_force: in_force(),
        enforced_power_limit_mw: Some(315_000),
    }
}

pub fn change() -> GpuChange {
    GpuChange {
        gpu_uuid: UUID.to_string(),
        settings: vec![
            power_limit(315),
            Setting::GpuClockOffset { offset_mhz: -150 },
        ],
    }
}

pub fn boot_default() -> BootDefault {
    BootDefault {
        gpu_uuid: UUID.to_string(),
        profile_name: "Quiet".to_string(),
        settings: all_settings(),
        fan_curve: Some(curve()),
        temperature_hold: Some(temperature_hold()),
    }
}

pub fn device_errors() -> Vec<DeviceError> {
    vec![
        DeviceError::GpuLost { index: 1 },
        DeviceError::Timeout {
            what: "reading the temperature".to_string(),
            waited_s: 5,
        },
    ]
}

pub fn notice() -> Notice {
    Notice::Warning("The fan safety net handed the fans back to the driver.".to_string())
}

/// A sample a second: one full row, one with a gap in a metric, one failed read.
pub fn history_rows() -> Vec<HistoryRow> {
    let mut full = HistoryRow::from_reading(1_764_000_000_000, Some(&telemetry()));
    full.time_ms = 1_764_000_000_000;
    let mut partial = HistoryRow::from_reading(1_764_000_001_000, Some(&telemetry()));
    partial.values[2] = None;
    partial.throttle_bits = None;
    vec![full, partial, HistoryRow::gap(1_764_000_002_000)]
}
