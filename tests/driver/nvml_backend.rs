//! gputune's real NVML backend, through nvml-wrapper and a real dlopen, against the fake
//! libnvidia-ml: every reading, every control, every fault.

use common::FakeMachine;

use crate::common;
use gputune_core::device::gate::validate;
use gputune_core::device::nvml::NvmlBackend;
use gputune_core::device::{Backend, BackendChoice, BackendOptions, open_backend};
use gputune_formats::{
    card::{BackendKind, ClockRangeMhz, DeviceError, Setting},
    throttle::ThrottleReason,
};

fn open(machine: &FakeMachine) -> NvmlBackend {
    match NvmlBackend::open(Some(&machine.library)) {
        Ok(backend) => backend,
        Err(error) => panic!("the fake library opens: {error}"),
    }
}

fn apply(backend: &mut NvmlBackend, setting: Setting) -> Result<(), DeviceError> {
    let constraints = backend.constraints(0)?;
    let validated =
        validate(&constraints, setting).unwrap_or_else(|error| panic!("{setting:?}: {error}"));
    backend.apply(0, &validated)
}

#[test]
fn identity_matches_the_card() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    assert_eq!(backend.kind(), BackendKind::Nvml);
    assert_eq!(backend.gpu_count(), Ok(1));
    let identity = backend
        .identity(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let card = &machine.state().machine.gpus[0];
    assert_eq!(identity.index, 0);
    assert_eq!(identity.uuid, card.uuid);
    assert!(identity.uuid.starts_with("GPU-"));
    assert_eq!(identity.name, "NVIDIA GeForce RTX 4090");
    assert_eq!(identity.pci_bus_id, card.pci_bus_id);
    assert_eq!(identity.memory_total_bytes, 24_564 * 1024 * 1024);
    assert_eq!(
        identity.driver_version.as_deref(),
        Some(nvidia_ml_fake::DRIVER_VERSION)
    );
    assert_eq!(
        identity.nvml_version.as_deref(),
        Some(nvidia_ml_fake::NVML_VERSION)
    );
    assert_eq!(identity.architecture.as_deref(), Some("Ada"));
}

#[test]
fn constraints_are_the_cards() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    let constraints = backend
        .constraints(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(constraints.power_limit_min_mw, Some(150_000));
    assert_eq!(constraints.power_limit_max_mw, Some(600_000));
    assert_eq!(constraints.power_limit_default_mw, Some(450_000));
    assert_eq!(
        constraints.gpu_clock_range,
        Some(ClockRangeMhz {
            min_mhz: 210,
            max_mhz: 3105
        })
    );
    assert_eq!(
        constraints.memory_clock_range,
        Some(ClockRangeMhz {
            min_mhz: 405,
            max_mhz: 10_501
        })
    );
    assert_eq!(constraints.fan_count, 2);
    assert_eq!(
        constraints
            .fan_speed_range
            .map(|range| (range.min_pct, range.max_pct)),
        Some((30, 100))
    );
    assert!(constraints.clock_offsets_supported());
    assert_eq!(
        constraints
            .gpu_clock_offset_range
            .map(|range| (range.min_mhz, range.max_mhz)),
        Some((-1000, 1000))
    );
    assert_eq!(
        constraints
            .memory_clock_offset_range
            .map(|range| (range.min_mhz, range.max_mhz)),
        Some((-2000, 6000))
    );
}

#[test]
fn every_reading_arrives_under_a_training_load() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    let reading = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let power_mw = reading.power_draw_mw.unwrap_or(0);
    assert!((400_000..=452_000).contains(&power_mw), "{power_mw} mW");
    assert_eq!(reading.power_limit_mw, Some(450_000));
    assert!(
        reading
            .temperature_c
            .is_some_and(|c| (50..=83).contains(&c)),
        "{reading:?}"
    );
    let fans = reading.fans.clone().unwrap_or_default();
    assert_eq!(fans.len(), 2);
    assert!(
        fans.iter()
            .all(|fan| fan.speed_pct.is_some_and(|pct| pct >= 30)
                && fan.speed_rpm.is_some_and(|rpm| rpm > 0))
    );
    let gpu_clock = reading.gpu_clock_mhz.unwrap_or(0);
    assert!((2_000..=2_790).contains(&gpu_clock), "{gpu_clock} MHz");
    // Graphics and SM clocks are two NVML calls: the card may move a boost bin between them.
    let sm_clock = reading.sm_clock_mhz.unwrap_or(0);
    assert!(
        sm_clock.abs_diff(gpu_clock) <= 60,
        "SM {sm_clock} MHz vs graphics {gpu_clock} MHz"
    );
    assert_eq!(reading.memory_clock_mhz, Some(10_251));
    assert!(reading.utilization_gpu_pct.is_some_and(|pct| pct >= 95));
    assert!(reading.utilization_memory_pct.is_some_and(|pct| pct > 0));
    assert!(
        reading
            .memory_used_bytes
            .is_some_and(|used| used > 20 * 1024 * 1024 * 1024)
    );
    assert_eq!(reading.performance_state, Some(2));
    assert!(
        reading
            .throttle_reasons
            .is_some_and(|reasons| reasons.contains(ThrottleReason::SwPowerCap))
    );
    assert_eq!(reading.pcie_link_gen, Some(4));
    assert_eq!(reading.pcie_link_width, Some(16));
    assert_eq!(reading.pcie_link_gen_max, Some(4));
    assert_eq!(reading.pcie_link_width_max, Some(16));
    assert!(reading.energy_total_mj.is_some_and(|mj| mj > 0));
    assert!(reading.sampled_at_ms > 1_600_000_000_000);
}

/// The energy counter is slow on real cards (3.1 ms a call on an H200): sampled every few
/// milliseconds, it is asked at most once a second, and what is reported still only grows.
#[test]
fn the_energy_counter_is_read_at_most_once_a_second_and_only_grows() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    let reads_before = machine.state().energy_reads;
    let started = std::time::Instant::now();
    let mut last_mj = 0;
    const SAMPLES: u64 = 30;
    for _ in 0..SAMPLES {
        let reading = backend
            .telemetry(0)
            .unwrap_or_else(|error| panic!("{error}"));
        let energy_mj = reading.energy_total_mj.unwrap_or(0);
        assert!(
            energy_mj > 0 && energy_mj >= last_mj,
            "{energy_mj} after {last_mj}"
        );
        last_mj = energy_mj;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let reads = machine.state().energy_reads - reads_before;
    // The first sample, then one a second at most (a generous bound, whatever the pace).
    let most_reads = started.elapsed().as_secs() + 2;
    assert!(reads >= 1, "the counter is read at the first sample");
    assert!(
        reads <= most_reads && reads < SAMPLES,
        "{reads} reads in {SAMPLES} samples"
    );
    // Close to the driver's own counter: within what the card draws in two seconds.
    let counter_mj = machine.state().machine.gpus[0].energy_total_mj();
    let most_power_mj = u64::from(machine.state().machine.gpus[0].spec.power_limit_max_mw) * 2;
    assert!(
        last_mj.abs_diff(counter_mj) <= most_power_mj,
        "reported {last_mj} mJ, counter {counter_mj} mJ"
    );
}

/// What changes slowly and no setting moves (the fan count, the PCIe link) is read at most
/// once a second, not at every sample; the enforced limit is read every time.
#[test]
fn slow_readings_are_not_asked_again_within_the_second_but_a_new_limit_shows_at_once() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    let calls = |machine: &FakeMachine| machine.state().device_calls;
    let before = calls(&machine);
    let first = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let first_calls = calls(&machine) - before;
    let before = calls(&machine);
    let second = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let second_calls = calls(&machine) - before;
    // The fan count, 4 × PCIe and the energy counter: 6 calls fewer, unless a second passed
    // between the two samples (a very slow machine).
    assert!(
        second_calls + 6 <= first_calls || second.sampled_at_ms >= first.sampled_at_ms + 1_000,
        "{first_calls} then {second_calls} calls"
    );
    assert_eq!(second.pcie_link_gen_max, Some(4));
    assert_eq!(second.pcie_link_width, Some(16));
    assert_eq!(second.fans.as_ref().map(Vec::len), Some(2));
    // The engine writes through its own handle; the sampler's sees the limit at once.
    let mut engine_handle = open(&machine);
    assert_eq!(
        apply(
            &mut engine_handle,
            Setting::PowerLimit {
                power_limit_mw: 300_000
            }
        ),
        Ok(())
    );
    let reading = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(reading.power_limit_mw, Some(300_000));
}

#[test]
fn idle_card_reports_idle_state() {
    let machine = FakeMachine::with_load("rtx4090", "", "idle");
    let mut backend = open(&machine);
    let reading = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(reading.utilization_gpu_pct, Some(0));
    assert_eq!(reading.performance_state, Some(8));
    assert_eq!(reading.pcie_link_gen, Some(1));
    assert!(
        reading
            .throttle_reasons
            .is_some_and(|reasons| reasons.contains(ThrottleReason::GpuIdle))
    );
}

#[test]
fn every_control_reaches_the_card_and_is_logged() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    let settings = [
        Setting::PowerLimit {
            power_limit_mw: 315_000,
        },
        Setting::LockGpuClocks {
            min_mhz: 210,
            max_mhz: 2_400,
        },
        Setting::LockMemoryClocks {
            min_mhz: 405,
            max_mhz: 10_251,
        },
        Setting::GpuClockOffset { offset_mhz: 150 },
        Setting::MemoryClockOffset { offset_mhz: 1_000 },
        Setting::FanSpeed {
            fan_index: 0,
            speed_pct: 70,
        },
        Setting::FanSpeed {
            fan_index: 1,
            speed_pct: 65,
        },
    ];
    for setting in settings {
        assert_eq!(apply(&mut backend, setting), Ok(()), "{setting:?}");
    }
    let card = machine.state().machine.gpus[0].settings.clone();
    assert_eq!(card.power_limit_mw, 315_000);
    assert_eq!(
        card.gpu_locked_clocks,
        Some(ClockRangeMhz {
            min_mhz: 210,
            max_mhz: 2_400
        })
    );
    assert_eq!(
        card.memory_locked_clocks,
        Some(ClockRangeMhz {
            min_mhz: 405,
            max_mhz: 10_251
        })
    );
    assert_eq!(card.gpu_clock_offset_mhz, 150);
    assert_eq!(card.memory_clock_offset_mhz, 1_000);
    assert_eq!(card.fan_manual_pct, vec![Some(70), Some(65)]);

    let reading = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        reading.power_limit_mw,
        Some(315_000),
        "the enforced limit reads back"
    );
    assert!(reading.gpu_clock_mhz.is_some_and(|mhz| mhz <= 2_400));

    let resets = [
        Setting::ResetGpuClocks,
        Setting::ResetMemoryClocks,
        Setting::FanAutomatic { fan_index: 0 },
        Setting::FanAutomatic { fan_index: 1 },
    ];
    for setting in resets {
        assert_eq!(apply(&mut backend, setting), Ok(()), "{setting:?}");
    }
    let state = machine.state();
    let card = &state.machine.gpus[0].settings;
    assert_eq!(card.gpu_locked_clocks, None);
    assert_eq!(card.memory_locked_clocks, None);
    assert_eq!(card.fan_manual_pct, vec![None, None]);
    let logged: Vec<Setting> = state
        .write_log
        .iter()
        .map(|record| record.setting)
        .collect();
    // An offset for compute is one write per compute P-state (P0, then P2: CUDA's).
    let expected: Vec<Setting> = settings
        .iter()
        .chain(resets.iter())
        .flat_map(|setting| match *setting {
            Setting::GpuClockOffset { offset_mhz } => vec![
                Setting::GpuClockOffsetAt {
                    pstate: 0,
                    offset_mhz,
                },
                Setting::GpuClockOffsetAt {
                    pstate: 2,
                    offset_mhz,
                },
            ],
            Setting::MemoryClockOffset { offset_mhz } => vec![
                Setting::MemoryClockOffsetAt {
                    pstate: 0,
                    offset_mhz,
                },
                Setting::MemoryClockOffsetAt {
                    pstate: 2,
                    offset_mhz,
                },
            ],
            other => vec![other],
        })
        .collect();
    assert_eq!(logged, expected);
    assert!(
        state
            .write_log
            .iter()
            .all(|record| record.result_code == 0 && record.gpu_index == 0)
    );
}

#[test]
fn no_permission_is_a_clear_error_and_nothing_changes() {
    let machine = FakeMachine::new("rtx4090", "no_permission");
    let mut backend = open(&machine);
    let result = apply(
        &mut backend,
        Setting::PowerLimit {
            power_limit_mw: 300_000,
        },
    );
    let Err(error) = result else {
        panic!("the write must be refused")
    };
    assert!(
        matches!(error, DeviceError::NoPermission { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("power limit 300 W") && message.contains("administrator"),
        "{message}"
    );
    let state = machine.state();
    assert_eq!(state.machine.gpus[0].settings.power_limit_mw, 450_000);
    assert_eq!(state.write_log.len(), 1);
    assert_eq!(state.write_log[0].result_code, 4);
    // Reading still works for an unprivileged user.
    assert!(backend.telemetry(0).is_ok());
}

#[test]
fn fans_not_supported_reads_as_no_fans() {
    let machine = FakeMachine::new("rtx4090", "fans_not_supported");
    let mut backend = open(&machine);
    let reading = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(reading.fans, None);
    assert!(
        reading.power_draw_mw.is_some(),
        "other readings are unaffected"
    );
    let constraints = backend
        .constraints(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(constraints.fan_count, 0);
    assert_eq!(constraints.fan_speed_range, None);
}

#[test]
fn offsets_not_supported_reads_as_no_offset_ranges() {
    let machine = FakeMachine::new("rtx4090", "offsets_not_supported");
    let mut backend = open(&machine);
    let constraints = backend
        .constraints(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(!constraints.clock_offsets_supported());
    assert!(validate(&constraints, Setting::GpuClockOffset { offset_mhz: 100 }).is_err());
}

#[test]
fn lost_gpu_is_an_error_not_a_panic() {
    let mut machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    assert!(backend.telemetry(0).is_ok());
    let calls_so_far = machine.state().device_calls;
    machine.set_faults(&format!("gpu_lost_after={}", calls_so_far + 3));
    let result = backend.telemetry(0);
    assert_eq!(result, Err(DeviceError::GpuLost { index: 0 }));
    let message = result
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(message.contains("stopped answering"), "{message}");
    assert!(matches!(
        apply(&mut backend, Setting::ResetGpuClocks),
        Err(DeviceError::GpuLost { .. })
    ));
}

#[test]
fn slow_driver_still_answers() {
    let machine = FakeMachine::new("rtx4090", "slow_ms=5");
    let mut backend = open(&machine);
    let reading = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert!(reading.power_draw_mw.is_some());
}

#[test]
fn driver_not_loaded_and_no_gpus_are_clear_errors() {
    let machine = FakeMachine::new("rtx4090", "driver_not_loaded");
    let error = NvmlBackend::open(Some(&machine.library)).err();
    assert!(
        matches!(error, Some(DeviceError::DriverNotLoaded { .. })),
        "{error:?}"
    );
    drop(machine);

    let machine = FakeMachine::new("rtx4090", "no_gpus");
    let error = NvmlBackend::open(Some(&machine.library)).err();
    assert_eq!(error, Some(DeviceError::NoGpus));
    // `auto` falls back to the simulator and says why.
    let opened = open_backend(&BackendOptions {
        choice: BackendChoice::Auto,
        nvml_library_path: Some(machine.library.clone()),
        ..BackendOptions::default()
    });
    let Ok(opened) = opened else {
        panic!("auto always opens something")
    };
    assert_eq!(opened.backend.kind(), BackendKind::Sim);
    assert_eq!(
        opened.fallback_reason.as_deref(),
        Some("The NVIDIA driver found no GPU.")
    );
}

#[test]
fn missing_library_names_the_path() {
    let missing = std::path::Path::new("/nonexistent/libnvidia-ml.so.1");
    let error = NvmlBackend::open(Some(missing))
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(
        error.contains("/nonexistent/libnvidia-ml.so.1") && error.contains("--nvml-lib"),
        "{error}"
    );
}

#[test]
fn a_list_of_libraries_loads_the_first_that_exists() {
    let machine = FakeMachine::new("rtx4090", "");
    // As a Kubernetes node has it: the GPU Operator's driver folder (absent here), then the
    // host's library.
    let listed = format!(
        "/nonexistent/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:{}",
        machine.library.display()
    );
    let mut backend = match NvmlBackend::open(Some(std::path::Path::new(&listed))) {
        Ok(backend) => backend,
        Err(error) => panic!("the fake library in the list opens: {error}"),
    };
    assert_eq!(backend.gpu_count().ok(), Some(1));
    // None there: one sentence naming each, and what to do.
    let missing = "/nonexistent/a/libnvidia-ml.so.1:/nonexistent/b/libnvidia-ml.so.1";
    let error = NvmlBackend::open(Some(std::path::Path::new(missing)))
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(
        error.contains(
            "none of /nonexistent/a/libnvidia-ml.so.1, /nonexistent/b/libnvidia-ml.so.1 exists"
        ) && error.contains("--nvml-lib"),
        "{error}"
    );
}

#[test]
fn fanless_datacenter_card() {
    let machine = FakeMachine::new("datacenter-fanless", "");
    let mut backend = open(&machine);
    let identity = backend
        .identity(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(identity.name, "NVIDIA H100 80GB HBM3");
    assert_eq!(identity.architecture.as_deref(), Some("Hopper"));
    let reading = backend
        .telemetry(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(reading.fans, None);
    assert_eq!(reading.pcie_link_gen_max, Some(5));
    let constraints = backend
        .constraints(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(constraints.fan_count, 0);
    assert!(!constraints.clock_offsets_supported());
    assert!(validate(&constraints, Setting::FanAutomatic { fan_index: 0 }).is_err());
}

#[test]
fn eight_gpus_each_answer_for_themselves() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let mut backend = open(&machine);
    assert_eq!(backend.gpu_count(), Ok(8));
    let validated = validate(
        &backend.constraints(5).unwrap_or_default(),
        Setting::PowerLimit {
            power_limit_mw: 300_000,
        },
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(backend.apply(5, &validated), Ok(()));
    for index in 0..8 {
        let reading = backend
            .telemetry(index)
            .unwrap_or_else(|error| panic!("{error}"));
        let expected = if index == 5 { 300_000 } else { 450_000 };
        assert_eq!(reading.power_limit_mw, Some(expected), "GPU {index}");
    }
    assert_eq!(machine.state().write_log[0].gpu_index, 5);
}

#[test]
fn current_settings_read_back_what_a_trial_must_restore() {
    let machine = FakeMachine::new("rtx4090", "");
    let mut backend = open(&machine);
    let before = backend
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(before.power_limit_mw, Some(450_000));
    assert_eq!(before.gpu_clock_offset_mhz, Some(0));
    assert_eq!(before.memory_clock_offset_mhz, Some(0));
    assert_eq!(
        apply(
            &mut backend,
            Setting::PowerLimit {
                power_limit_mw: 350_000
            }
        ),
        Ok(())
    );
    assert_eq!(
        apply(&mut backend, Setting::GpuClockOffset { offset_mhz: 120 }),
        Ok(())
    );
    let after = backend
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(after.power_limit_mw, Some(350_000));
    assert_eq!(after.gpu_clock_offset_mhz, Some(120));
    drop(machine);

    let machine = FakeMachine::new("datacenter-fanless", "");
    let mut backend = open(&machine);
    let fanless = backend
        .current_settings(0)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(fanless.power_limit_mw, Some(700_000));
    assert_eq!(
        fanless.gpu_clock_offset_mhz, None,
        "no offsets on a datacenter card"
    );
}
