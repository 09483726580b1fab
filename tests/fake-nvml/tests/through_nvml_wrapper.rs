//! Loads the built fake library with a real `dlopen`, through nvml-wrapper, the way gputune
//! does, and checks the contract in the crate documentation.
//!
//! The fake reads its configuration from environment variables, which are process-global, so
//! every test holds `ENV_LOCK` while it runs.

use std::ffi::{CStr, c_char, c_uint};
use std::fmt::Debug;
use std::mem::discriminant;
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, PoisonError};

use nvidia_ml_fake::{
    DRIVER_VERSION, FAULTS_ENV, LOAD_ENV, NVML_VERSION, PROCESSES_ENV, PSTATES_ENV, SCENARIO_ENV,
    STATE_ENV, fake_library_path, load_state,
};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    Clock, PerformanceState, TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::device::{DeviceArchitecture, GpuLockedClocksSetting};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::{
    NvmlLib, nvmlDevice_t, nvmlProcessInfo_v1_t, nvmlProcessInfo_v2_t, nvmlReturn_t,
};
use tempfile::TempDir;

use gputune_core::device::Backend;
use gputune_core::device::nvml::NvmlBackend;
use gputune_formats::card::Setting;

static ENV_LOCK: Mutex<()> = Mutex::new(());

/// One test's fake machine: its own state file and environment, held for the whole test.
struct Fake {
    _env: MutexGuard<'static, ()>,
    dir: TempDir,
}

impl Fake {
    /// A fake machine of `scenario` (training load) with `faults`, in a fresh state file.
    fn new(scenario: &str, faults: &str) -> Fake {
        let env = ENV_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = tempfile::tempdir().expect("temporary folder");
        let fake = Fake { _env: env, dir };
        set_env(
            STATE_ENV,
            Some(fake.state_path().as_os_str().to_str().expect("UTF-8 path")),
        );
        set_env(SCENARIO_ENV, Some(scenario));
        set_env(LOAD_ENV, Some("training"));
        set_env(FAULTS_ENV, Some(faults));
        set_env(PROCESSES_ENV, None);
        set_env(PSTATES_ENV, None);
        fake
    }

    fn state_path(&self) -> PathBuf {
        self.dir.path().join("state.json")
    }

    fn set_faults(&self, faults: &str) {
        set_env(FAULTS_ENV, Some(faults));
    }
}

fn set_env(name: &str, value: Option<&str>) {
    // SAFETY: every test that touches the environment holds ENV_LOCK, and the test harness's
    // own threads do not read it while tests run.
    unsafe {
        match value {
            Some(value) => std::env::set_var(name, value),
            None => std::env::remove_var(name),
        }
    }
}

fn library() -> PathBuf {
    fake_library_path().expect("libnvidia_ml_fake.so is built next to the test binary")
}

fn open() -> Result<Nvml, NvmlError> {
    Nvml::builder().lib_path(library().as_os_str()).init()
}

/// Asserts that an NVML call failed with `expected` (`NvmlError` is not `PartialEq`).
#[track_caller]
fn assert_fails<T: Debug>(result: Result<T, NvmlError>, expected: NvmlError) {
    match result {
        Err(error) if discriminant(&error) == discriminant(&expected) => {}
        other => panic!("expected Err({expected:?}), got {other:?}"),
    }
}

fn write_log_codes(path: &Path) -> Vec<(String, Setting, u32)> {
    load_state(path)
        .expect("state file")
        .write_log
        .into_iter()
        .map(|record| (record.function, record.setting, record.result_code))
        .collect()
}

#[test]
fn library_is_found_next_to_the_test_binary() {
    let path = library();
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    assert!(
        name.starts_with("libnvidia_ml_fake") && name.ends_with(".so"),
        "{path:?}"
    );
}

#[test]
fn init_counts_and_identifies_the_gpu() {
    let fake = Fake::new("rtx4090", "");
    let nvml = open().expect("init");
    assert_eq!(nvml.device_count().expect("count"), 1);
    assert_eq!(
        nvml.sys_driver_version().expect("driver version"),
        DRIVER_VERSION
    );
    assert_eq!(nvml.sys_nvml_version().expect("NVML version"), NVML_VERSION);
    assert_eq!(
        nvml.sys_cuda_driver_version().expect("CUDA version"),
        12_060
    );

    let device = nvml.device_by_index(0).expect("handle");
    let uuid = device.uuid().expect("uuid");
    assert!(uuid.starts_with("GPU-"), "{uuid}");
    assert_eq!(device.name().expect("name"), "NVIDIA GeForce RTX 4090");
    let pci = device.pci_info().expect("PCI info");
    assert_eq!(pci.bus_id, "00000000:01:00.0");
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 1, 0));
    assert_eq!(
        device.architecture().expect("architecture"),
        DeviceArchitecture::Ada
    );
    let memory = device.memory_info().expect("memory info");
    assert_eq!(memory.total, 24_564 * 1024 * 1024);
    assert_eq!(memory.used + memory.free, memory.total);
    assert_fails(nvml.device_by_index(1), NvmlError::InvalidArg);

    // The state file was created at init and matches what NVML reported.
    let state = load_state(fake.state_path()).expect("state");
    assert_eq!(state.machine.gpus[0].uuid, uuid);
}

#[test]
fn eight_cards_have_distinct_identities() {
    let _fake = Fake::new("8x-rtx4090", "");
    let nvml = open().expect("init");
    assert_eq!(nvml.device_count().expect("count"), 8);
    let mut uuids: Vec<String> = (0..8)
        .map(|index| {
            nvml.device_by_index(index)
                .and_then(|device| device.uuid())
                .expect("uuid")
        })
        .collect();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 8);
}

#[test]
fn power_limit_is_range_checked_and_persists_across_loads() {
    let fake = Fake::new("rtx4090", "");
    {
        let nvml = open().expect("init");
        let mut device = nvml.device_by_index(0).expect("handle");
        let range = device
            .power_management_limit_constraints()
            .expect("constraints");
        assert_eq!((range.min_limit, range.max_limit), (150_000, 600_000));
        assert_eq!(
            device.power_management_limit_default().expect("default"),
            450_000
        );
        assert_fails(
            device.set_power_management_limit(100_000),
            NvmlError::InvalidArg,
        );
        assert_fails(
            device.set_power_management_limit(700_000),
            NvmlError::InvalidArg,
        );
        device
            .set_power_management_limit(300_000)
            .expect("in-range limit");
        assert_eq!(device.power_management_limit().expect("limit"), 300_000);
        assert_eq!(device.enforced_power_limit().expect("enforced"), 300_000);
    }
    // A new load of the library (as a new process would) sees the same hardware.
    let nvml = open().expect("second init");
    let device = nvml.device_by_index(0).expect("handle");
    assert_eq!(device.enforced_power_limit().expect("enforced"), 300_000);

    let power_limit = |power_limit_mw| Setting::PowerLimit { power_limit_mw };
    let function = "nvmlDeviceSetPowerManagementLimit".to_owned();
    assert_eq!(
        write_log_codes(&fake.state_path()),
        vec![
            (function.clone(), power_limit(100_000), 2),
            (function.clone(), power_limit(700_000), 2),
            (function, power_limit(300_000), 0),
        ]
    );
}

#[test]
fn no_permission_refuses_writes_and_logs_them() {
    let fake = Fake::new("rtx4090", "no_permission");
    let nvml = open().expect("init");
    let mut device = nvml.device_by_index(0).expect("handle");
    assert_fails(
        device.set_power_management_limit(300_000),
        NvmlError::NoPermission,
    );
    assert_fails(device.reset_gpu_locked_clocks(), NvmlError::NoPermission);
    assert_fails(device.set_fan_speed(0, 80), NvmlError::NoPermission);
    // Reads still work, and nothing changed.
    assert_eq!(device.power_management_limit().expect("limit"), 450_000);

    let state = load_state(fake.state_path()).expect("state");
    let refused: Vec<(&str, u32, u32)> = state
        .write_log
        .iter()
        .map(|record| {
            (
                record.function.as_str(),
                record.gpu_index,
                record.result_code,
            )
        })
        .collect();
    assert_eq!(
        refused,
        vec![
            ("nvmlDeviceSetPowerManagementLimit", 0, 4),
            ("nvmlDeviceResetGpuLockedClocks", 0, 4),
            ("nvmlDeviceSetFanSpeed_v2", 0, 4),
        ]
    );
    assert_eq!(
        state.write_log[0].setting,
        Setting::PowerLimit {
            power_limit_mw: 300_000
        }
    );
}

#[test]
fn fanless_card_has_no_fans_and_no_offsets() {
    let _fake = Fake::new("datacenter-fanless", "");
    let nvml = open().expect("init");
    let mut device = nvml.device_by_index(0).expect("handle");
    assert_eq!(device.name().expect("name"), "NVIDIA H100 80GB HBM3");
    assert_eq!(
        device.architecture().expect("architecture"),
        DeviceArchitecture::Hopper
    );
    assert_eq!(device.num_fans().expect("fan count"), 0);
    assert_fails(device.fan_speed(0), NvmlError::NotSupported);
    assert_fails(device.fan_speed_rpm(0), NvmlError::NotSupported);
    assert_fails(device.min_max_fan_speed(), NvmlError::NotSupported);
    assert_fails(device.set_fan_speed(0, 50), NvmlError::NotSupported);
    assert_fails(
        device.clock_offset(Clock::Graphics, PerformanceState::Zero),
        NvmlError::NotSupported,
    );
    assert_fails(
        device.set_clock_offset(Clock::Graphics, PerformanceState::Zero, 100),
        NvmlError::NotSupported,
    );
}

#[test]
fn gpu_is_lost_after_the_call_budget() {
    let fake = Fake::new("rtx4090", "gpu_lost_after=3");
    {
        let nvml = open().expect("init");
        let device = nvml.device_by_index(0).expect("handle");
        device.uuid().expect("call 1");
        device.name().expect("call 2");
        device.power_usage().expect("call 3");
        assert_fails(
            device.temperature(TemperatureSensor::Gpu),
            NvmlError::GpuLost,
        );
        assert_fails(device.power_usage(), NvmlError::GpuLost);
    }
    // The count lives in the state, so the next load finds the GPU already lost.
    let nvml = open().expect("init again");
    assert_fails(nvml.device_by_index(0), NvmlError::GpuLost);
    assert_eq!(
        load_state(fake.state_path()).expect("state").device_calls,
        5
    );
}

#[test]
fn supported_clock_lists_come_back_whole() {
    let _fake = Fake::new("rtx4090", "");
    let nvml = open().expect("init");
    let device = nvml.device_by_index(0).expect("handle");
    let memory_clocks = device.supported_memory_clocks().expect("memory clocks");
    assert_eq!(memory_clocks, vec![10_501, 10_251, 5_001, 810, 405]);
    assert_fails(device.supported_graphics_clocks(1234), NvmlError::NotFound);
    assert_eq!(
        device
            .max_clock_info(Clock::Graphics)
            .expect("max graphics"),
        3105
    );
    assert_eq!(
        device.max_clock_info(Clock::Memory).expect("max memory"),
        10_501
    );

    // The graphics list is longer than nvml-wrapper's fixed first guess of 128 entries, as on
    // a real RTX 4090, so check NVML's size protocol through the raw C functions.
    let lib = nvml.lib();
    let mut count: c_uint = 0;
    // SAFETY: a live handle from this `Nvml`; a null array with a count of 0 is NVML's way of
    // asking for the size, and the second call passes an array of `count` entries.
    let clocks = unsafe {
        let handle = device.handle();
        let asked =
            lib.nvmlDeviceGetSupportedGraphicsClocks(handle, 10_501, &mut count, null_mut());
        assert_eq!(
            (asked, count),
            (7, 194),
            "INSUFFICIENT_SIZE with the needed count"
        );
        let mut clocks: Vec<c_uint> = vec![0; count as usize];
        let filled = lib.nvmlDeviceGetSupportedGraphicsClocks(
            handle,
            10_501,
            &mut count,
            clocks.as_mut_ptr(),
        );
        assert_eq!((filled, count), (0, 194));
        clocks
    };
    assert_eq!(clocks.first(), Some(&3105));
    assert_eq!(clocks.last(), Some(&210));
    assert!(clocks.windows(2).all(|pair| pair[0] - pair[1] == 15));
}

#[test]
fn raw_calls_check_init_and_pointers() {
    let _fake = Fake::new("rtx4090", "");
    // SAFETY: the fake library exports every symbol NvmlLib resolves that these calls use;
    // pointers are null only where the test means them to be.
    unsafe {
        let lib = NvmlLib::new(library().as_os_str()).expect("dlopen");
        let mut count: c_uint = 0;
        assert_eq!(
            lib.nvmlDeviceGetCount_v2(&mut count),
            1,
            "UNINITIALIZED before init"
        );
        assert_eq!(lib.nvmlShutdown(), 1, "UNINITIALIZED: nothing to shut down");
        assert_eq!(lib.nvmlInit_v2(), 0);
        assert_eq!(
            lib.nvmlDeviceGetCount_v2(null_mut()),
            2,
            "INVALID_ARGUMENT for null"
        );
        assert_eq!(lib.nvmlDeviceGetCount_v2(&mut count), 0);
        assert_eq!(count, 1);
        let mut handle = null_mut();
        assert_eq!(lib.nvmlDeviceGetHandleByIndex_v2(0, &mut handle), 0);
        assert_eq!(lib.nvmlDeviceGetPowerUsage(handle, null_mut()), 2);
        assert_eq!(
            lib.nvmlDeviceGetPowerUsage(null_mut(), &mut count),
            2,
            "unknown handle"
        );
        let mut name: [c_char; 8] = [0; 8];
        assert_eq!(
            lib.nvmlDeviceGetName(handle, name.as_mut_ptr(), 8),
            7,
            "name does not fit"
        );
        let text = CStr::from_ptr(lib.nvmlErrorString(4));
        assert_eq!(text.to_str(), Ok("Insufficient Permissions"));
        assert_eq!(lib.nvmlShutdown(), 0);
        assert_eq!(
            lib.nvmlDeviceGetCount_v2(&mut count),
            1,
            "UNINITIALIZED after shutdown"
        );
    }
}

#[test]
fn readings_look_like_a_card_under_training_load() {
    let _fake = Fake::new("rtx4090", "");
    let nvml = open().expect("init");
    let device = nvml.device_by_index(0).expect("handle");
    let power_mw = device.power_usage().expect("power");
    assert!((100_000..=460_000).contains(&power_mw), "{power_mw}");
    let temperature_c = device
        .temperature(TemperatureSensor::Gpu)
        .expect("temperature");
    assert!((30..=95).contains(&temperature_c), "{temperature_c}");
    let threshold = |kind| device.temperature_threshold(kind);
    assert_eq!(
        threshold(TemperatureThreshold::Shutdown).expect("shutdown"),
        95
    );
    assert_eq!(
        threshold(TemperatureThreshold::Slowdown).expect("slowdown"),
        90
    );
    assert_eq!(
        threshold(TemperatureThreshold::GpuMax).expect("GPU max"),
        83
    );
    assert_fails(
        threshold(TemperatureThreshold::MemoryMax),
        NvmlError::NotSupported,
    );
    assert_eq!(device.num_fans().expect("fan count"), 2);
    assert_eq!(device.min_max_fan_speed().expect("fan range"), (30, 100));
    assert!(device.fan_speed(0).expect("fan speed") <= 100);
    assert!(device.fan_speed_rpm(1).expect("fan RPM") <= 3_000);
    assert_fails(device.fan_speed(2), NvmlError::InvalidArg);
    let graphics_mhz = device.clock_info(Clock::Graphics).expect("graphics clock");
    let sm_mhz = device.clock_info(Clock::SM).expect("SM clock");
    // Two calls, two readings: the clock may move a bin between them.
    assert!(
        graphics_mhz > 1_000 && sm_mhz.abs_diff(graphics_mhz) <= 30,
        "{graphics_mhz} {sm_mhz}"
    );
    assert_eq!(
        device.clock_info(Clock::Memory).expect("memory clock"),
        10_251
    );
    assert_fails(device.clock_info(Clock::Video), NvmlError::NotSupported);
    let utilization = device.utilization_rates().expect("utilization");
    assert!(utilization.gpu >= 90, "{utilization:?}");
    assert_eq!(
        device.performance_state().expect("P-state"),
        PerformanceState::Two
    );
    device.current_throttle_reasons().expect("throttle reasons");
    assert_eq!(device.current_pcie_link_gen().expect("PCIe generation"), 4);
    assert_eq!(device.current_pcie_link_width().expect("PCIe width"), 16);
    assert_eq!(device.max_pcie_link_gen().expect("max PCIe generation"), 4);
    assert_eq!(device.max_pcie_link_width().expect("max PCIe width"), 16);
    assert!(device.total_energy_consumption().expect("energy") > 0);
    let offset = device
        .clock_offset(Clock::Graphics, PerformanceState::Zero)
        .expect("offset");
    assert_eq!(
        (
            offset.clock_offset_mhz,
            offset.min_clock_offset_mhz,
            offset.max_clock_offset_mhz
        ),
        (0, -1000, 1000)
    );
    let offset = device
        .clock_offset(Clock::Memory, PerformanceState::Zero)
        .expect("offset");
    assert_eq!(
        (offset.min_clock_offset_mhz, offset.max_clock_offset_mhz),
        (-2000, 6000)
    );
}

#[test]
fn writes_reach_the_simulated_card() {
    let fake = Fake::new("rtx4090", "");
    let nvml = open().expect("init");
    let mut device = nvml.device_by_index(0).expect("handle");
    device.set_fan_speed(0, 70).expect("fan speed");
    assert_fails(device.set_fan_speed(0, 10), NvmlError::InvalidArg);
    assert_fails(device.set_fan_speed(5, 70), NvmlError::InvalidArg);
    device.set_default_fan_speed(1).expect("fan automatic");
    device
        .set_clock_offset(Clock::Graphics, PerformanceState::Zero, 150)
        .expect("GPU offset");
    assert_fails(
        device.set_clock_offset(Clock::Memory, PerformanceState::Zero, 7000),
        NvmlError::InvalidArg,
    );
    let offset = device
        .clock_offset(Clock::Graphics, PerformanceState::Zero)
        .expect("offset");
    assert_eq!(offset.clock_offset_mhz, 150);
    let lock = GpuLockedClocksSetting::Numeric {
        min_clock_mhz: 210,
        max_clock_mhz: 2_400,
    };
    device.set_gpu_locked_clocks(lock).expect("GPU clock lock");
    assert_fails(
        device.set_mem_locked_clocks(405, 99_999),
        NvmlError::InvalidArg,
    );
    device
        .set_mem_locked_clocks(405, 10_501)
        .expect("memory clock lock");
    device
        .reset_mem_locked_clocks()
        .expect("memory clock reset");

    let state = load_state(fake.state_path()).expect("state");
    let settings = &state.machine.gpus[0].settings;
    assert_eq!(settings.fan_manual_pct, vec![Some(70), None]);
    assert_eq!(settings.gpu_clock_offset_mhz, 150);
    assert_eq!(
        settings.gpu_locked_clocks.map(|lock| lock.max_mhz),
        Some(2_400)
    );
    assert_eq!(settings.memory_locked_clocks, None);
    assert_eq!(state.write_log.len(), 10);
}

#[test]
fn feature_faults_make_fans_and_offsets_unsupported() {
    let fake = Fake::new("rtx4090", "fans_not_supported,offsets_not_supported");
    let nvml = open().expect("init");
    let mut device = nvml.device_by_index(0).expect("handle");
    assert_fails(device.num_fans(), NvmlError::NotSupported);
    assert_fails(device.fan_speed(0), NvmlError::NotSupported);
    assert_fails(device.fan_speed_rpm(0), NvmlError::NotSupported);
    assert_fails(device.min_max_fan_speed(), NvmlError::NotSupported);
    assert_fails(device.set_fan_speed(0, 50), NvmlError::NotSupported);
    assert_fails(device.set_default_fan_speed(0), NvmlError::NotSupported);
    assert_fails(
        device.clock_offset(Clock::Memory, PerformanceState::Zero),
        NvmlError::NotSupported,
    );
    assert_fails(
        device.set_clock_offset(Clock::Memory, PerformanceState::Zero, 500),
        NvmlError::NotSupported,
    );
    // Faults are read on every call: lifting them mid-run takes effect at once.
    fake.set_faults("");
    assert_eq!(device.num_fans().expect("fan count"), 2);
}

#[test]
fn init_faults_and_empty_machines() {
    let fake = Fake::new("rtx4090", "driver_not_loaded");
    assert_fails(open(), NvmlError::DriverNotLoaded);
    fake.set_faults("no_permision");
    assert_fails(open(), NvmlError::Unknown);
    fake.set_faults("no_gpus");
    let nvml = open().expect("init");
    assert_eq!(nvml.device_count().expect("count"), 0);
    assert_fails(nvml.device_by_index(0), NvmlError::InvalidArg);
}

#[test]
fn bad_configuration_is_refused_not_guessed() {
    let fake = Fake::new("rtx5090", "");
    assert_fails(open(), NvmlError::Unknown);
    assert!(!fake.state_path().exists());

    // A corrupt state file is reported and left as it was.
    set_env(SCENARIO_ENV, Some("rtx4090"));
    std::fs::write(fake.state_path(), b"{ not json").expect("write");
    assert_fails(open(), NvmlError::Unknown);
    assert_eq!(
        std::fs::read(fake.state_path()).expect("read"),
        b"{ not json"
    );
}

#[test]
fn init_is_reference_counted() {
    let _fake = Fake::new("rtx4090", "");
    let first = open().expect("first init");
    let second = open().expect("second init");
    second.shutdown().expect("shutdown");
    assert_eq!(first.device_count().expect("count"), 1);
}

#[test]
fn without_a_state_file_the_state_lives_in_memory() {
    let fake = Fake::new("rtx4090", "");
    set_env(STATE_ENV, None);
    let nvml = open().expect("init");
    let mut device = nvml.device_by_index(0).expect("handle");
    device.set_power_management_limit(320_000).expect("limit");
    assert_eq!(device.power_management_limit().expect("limit"), 320_000);
    assert!(!fake.state_path().exists());
}

#[test]
fn gputune_reads_the_fake_through_its_nvml_backend() {
    let _fake = Fake::new("rtx4090", "");
    let mut backend = NvmlBackend::open(Some(&library())).expect("gputune opens the fake");
    assert_eq!(backend.gpu_count(), Ok(1));
    let identity = backend.identity(0).expect("identity");
    assert_eq!(identity.name, "NVIDIA GeForce RTX 4090");
    assert_eq!(identity.pci_bus_id, "00000000:01:00.0");
    assert_eq!(identity.driver_version.as_deref(), Some(DRIVER_VERSION));
    let constraints = backend.constraints(0).expect("constraints");
    assert_eq!(constraints.power_limit_max_mw, Some(600_000));
    assert_eq!(constraints.fan_count, 2);
    assert!(constraints.clock_offsets_supported());
    let gpu_clock_range = constraints
        .gpu_clock_range
        .map(|range| (range.min_mhz, range.max_mhz));
    assert_eq!(gpu_clock_range, Some((210, 3105)));
    let telemetry = backend.telemetry(0).expect("telemetry");
    assert!(telemetry.power_draw_mw.is_some() && telemetry.temperature_c.is_some());
    assert_eq!(telemetry.fans.map(|fans| fans.len()), Some(2));
    assert_eq!(telemetry.pcie_link_width_max, Some(16));
    assert!(telemetry.energy_total_mj.is_some());
}

#[test]
fn gputune_sees_a_fanless_card_without_fans() {
    let _fake = Fake::new("datacenter-fanless", "");
    let mut backend = NvmlBackend::open(Some(&library())).expect("gputune opens the fake");
    let constraints = backend.constraints(0).expect("constraints");
    assert_eq!(constraints.fan_count, 0);
    assert_eq!(constraints.fan_speed_range, None);
    assert!(!constraints.clock_offsets_supported());
    let telemetry = backend.telemetry(0).expect("telemetry");
    assert_eq!(telemetry.fans, None);
    assert!(telemetry.power_draw_mw.is_some());
}

#[test]
fn slow_ms_delays_every_call() {
    let _fake = Fake::new("rtx4090", "slow_ms=40");
    let nvml = open().expect("init");
    let started = std::time::Instant::now();
    nvml.device_count().expect("count");
    assert!(started.elapsed() >= std::time::Duration::from_millis(40));
}

/// How many writes each child process makes in `processes_share_one_machine`.
const WRITES_PER_CHILD: u32 = 10;

/// Run only as a child of `processes_share_one_machine`, with its environment.
#[test]
#[ignore = "a helper process for processes_share_one_machine"]
fn child_makes_writes() {
    let nvml = open().expect("init");
    let mut device = nvml.device_by_index(0).expect("handle");
    for step in 0..WRITES_PER_CHILD {
        device
            .set_power_management_limit(200_000 + step * 1_000)
            .expect("limit");
    }
}

#[test]
fn processes_share_one_machine() {
    let fake = Fake::new("rtx4090", "");
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "child_makes_writes",
                    "--ignored",
                    "--test-threads=1",
                ])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("child exit").success());
    }
    // Every write of every process made it: the lock file kept them from overwriting each other.
    let state = load_state(fake.state_path()).expect("state");
    assert_eq!(state.write_log.len(), 3 * WRITES_PER_CHILD as usize);
    assert_eq!(state.device_calls, 3 * u64::from(WRITES_PER_CHILD));
    assert_eq!(state.machine.gpus[0].settings.power_limit_mw, 209_000);
}

#[test]
fn processes_are_listed_in_every_version_of_the_calls() {
    let _fake = Fake::new("rtx4090", "");
    set_env(
        PROCESSES_ENV,
        Some("0:101:compute:2048,0:102:graphics:n/a,0:103:both:512"),
    );
    let nvml = open().expect("init");
    let device = nvml.device_by_index(0).expect("handle");
    let pids = |list: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>| {
        list.iter().map(|info| info.pid).collect::<Vec<_>>()
    };
    let compute = device.running_compute_processes().expect("compute _v3");
    assert_eq!(pids(compute.clone()), vec![101, 103]);
    assert_eq!(
        compute[0].used_gpu_memory,
        nvml_wrapper::enums::device::UsedGpuMemory::Used(2048 << 20)
    );
    assert_eq!(compute[0].gpu_instance_id, None, "no MIG");
    let graphics = device.running_graphics_processes().expect("graphics _v3");
    assert_eq!(pids(graphics.clone()), vec![102, 103]);
    assert_eq!(
        graphics[0].used_gpu_memory,
        nvml_wrapper::enums::device::UsedGpuMemory::Unavailable
    );
    // The `_v2` calls share v3's layout; the unversioned call writes the two-field v1 layout.
    let library = raw_library();
    type ListCall<T> = unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut T) -> nvmlReturn_t;
    for name in [
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    ] {
        // SAFETY: the fake exports it with this signature.
        let call =
            unsafe { library.get::<ListCall<nvmlProcessInfo_v2_t>>(name.as_bytes()) }.expect(name);
        let mut entries = [nvmlProcessInfo_v2_t {
            pid: 0,
            usedGpuMemory: 0,
            gpuInstanceId: 0,
            computeInstanceId: 0,
        }; 4];
        let mut count: c_uint = 4;
        // SAFETY: a handle of this library; the array holds `count` entries.
        let code = unsafe { call(device.handle(), &mut count, entries.as_mut_ptr()) };
        assert_eq!((code, count, entries[1].pid), (0, 2, 103), "{name}");
    }
    // SAFETY: as above.
    let v1 = unsafe {
        library.get::<ListCall<nvmlProcessInfo_v1_t>>(b"nvmlDeviceGetComputeRunningProcesses")
    }
    .expect("unversioned symbol");
    let mut entries = [nvmlProcessInfo_v1_t {
        pid: 0,
        usedGpuMemory: 0,
    }; 4];
    let mut count: c_uint = 4;
    // SAFETY: a handle of this library; the array holds `count` entries.
    let code = unsafe { v1(device.handle(), &mut count, entries.as_mut_ptr()) };
    assert_eq!((code, count), (0, 2));
    assert_eq!((entries[1].pid, entries[1].usedGpuMemory), (103, 512 << 20));
    let mut count: c_uint = 0;
    // SAFETY: as above, asking for the count with no array.
    let code = unsafe { v1(device.handle(), &mut count, null_mut()) };
    assert_eq!((code, count), (7, 2), "INSUFFICIENT_SIZE with the count");
    let samples = device
        .process_utilization_stats(None)
        .expect("per-process utilization");
    assert_eq!(samples.len(), 3);
    set_env(PROCESSES_ENV, None);
}

#[test]
fn what_monitors_read_besides_answers_as_the_card_would() {
    use nvml_wrapper::enum_wrappers::device::{
        ComputeMode, EccCounter, MemoryError, PcieUtilCounter,
    };
    let _fake = Fake::new("rtx4090", "");
    let nvml = open().expect("init");
    let geforce = nvml.device_by_index(0).expect("handle");
    assert!(matches!(geforce.compute_mode(), Ok(ComputeMode::Default)));
    assert!(!geforce.is_in_persistent_mode().expect("persistence"));
    assert!(!geforce.is_display_active().expect("display active"));
    assert!(!geforce.is_display_connected().expect("display mode"));
    type DriverModelCall = unsafe extern "C" fn(nvmlDevice_t, *mut u32, *mut u32) -> nvmlReturn_t;
    let library = raw_library();
    // SAFETY: the fake exports it with this signature.
    let driver_model = unsafe { library.get::<DriverModelCall>(b"nvmlDeviceGetDriverModel") }
        .expect("driver model symbol");
    let (mut current, mut pending) = (0, 0);
    // SAFETY: a handle of this library; both pointers are valid for a write.
    let code = unsafe { driver_model(geforce.handle(), &mut current, &mut pending) };
    assert_eq!(code, 3, "NOT_SUPPORTED: Windows only");
    let ecc = geforce.is_ecc_enabled().expect("ECC mode");
    assert!(
        !ecc.currently_enabled && !ecc.pending_enabled,
        "a 4090 ships with ECC off"
    );
    assert_fails(
        geforce.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        NvmlError::NotSupported,
    );
    assert_fails(geforce.mig_mode(), NvmlError::NotSupported);
    let encoder = geforce.encoder_utilization().expect("encoder");
    assert_eq!((encoder.utilization, encoder.sampling_period), (0, 167_000));
    assert_eq!(
        geforce.decoder_utilization().expect("decoder").utilization,
        0
    );
    let received = geforce
        .pcie_throughput(PcieUtilCounter::Receive)
        .expect("RX");
    let sent = geforce.pcie_throughput(PcieUtilCounter::Send).expect("TX");
    assert!(
        received > 500_000 && sent > 0 && sent < received,
        "{received} {sent}"
    );
    let lib = unsafe_lib();
    let mut speed: c_uint = 0;
    let fan_speed = lib.nvmlDeviceGetFanSpeed.as_ref().expect("v1 fan speed");
    // SAFETY: a handle of this library; `speed` is valid for a write.
    assert_eq!(unsafe { fan_speed(geforce.handle(), &mut speed) }, 0);
    assert_eq!(speed, geforce.fan_speed(0).expect("fan 0"));
    let memory_info = lib
        .nvmlDeviceGetMemoryInfo
        .as_ref()
        .expect("v1 memory info");
    let mut memory = nvml_wrapper_sys::bindings::nvmlMemory_t {
        total: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: as above.
    assert_eq!(unsafe { memory_info(geforce.handle(), &mut memory) }, 0);
    assert_eq!(memory.total, 24_564 * 1024 * 1024);
    assert_eq!(memory.used + memory.free, memory.total);
    let cuda = lib
        .nvmlSystemGetCudaDriverVersion
        .as_ref()
        .expect("v1 CUDA version");
    let mut version = 0;
    // SAFETY: `version` is valid for a write.
    assert_eq!(unsafe { cuda(&mut version) }, 0);
    assert_eq!(version, 12_060);
    drop(nvml);
    drop(_fake);

    let _fake = Fake::new("datacenter-fanless", "");
    let nvml = open().expect("init");
    let h100 = nvml.device_by_index(0).expect("handle");
    assert!(h100.is_in_persistent_mode().expect("persistence"));
    assert!(h100.is_ecc_enabled().expect("ECC mode").currently_enabled);
    assert_eq!(
        h100.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .expect("ECC errors"),
        0
    );
    assert_eq!(h100.mig_mode().expect("MIG mode").current, 0);
    assert_fails(h100.encoder_utilization(), NvmlError::NotSupported);
    assert!(h100.decoder_utilization().is_ok());
    let mut speed: c_uint = 0;
    let fan_speed = unsafe_lib()
        .nvmlDeviceGetFanSpeed
        .as_ref()
        .map(|f| *f)
        .expect("v1");
    // SAFETY: as above.
    assert_eq!(
        unsafe { fan_speed(h100.handle(), &mut speed) },
        3,
        "NOT_SUPPORTED: no fans"
    );
}

/// The fake library itself, for symbols `NvmlLib` does not load on Linux.
fn raw_library() -> libloading::Library {
    // SAFETY: loading the fake library runs no code besides Rust's own initializers.
    unsafe { libloading::Library::new(library()) }.expect("the fake library loads")
}

/// The fake library's symbols, loaded directly (for calls nvml-wrapper does not make).
fn unsafe_lib() -> NvmlLib {
    // SAFETY: loading the fake library runs no code besides Rust's own initializers.
    unsafe { NvmlLib::new(library().as_os_str()) }.expect("the fake library loads")
}

/// Offsets per P-state: P0, P2 and P8 listed; P0 and P2 take the card's ranges, P8 0 to 0;
/// independent P-states keep their own offsets, linked ones move together; the card computes
/// in P2 under training.
#[test]
fn clock_offsets_are_per_p_state_independent_or_linked() {
    let fake = Fake::new("rtx4090", "");
    let nvml = open().expect("init");
    let mut device = nvml.device_by_index(0).expect("handle");
    assert_eq!(
        device.supported_performance_states().expect("P-states"),
        vec![
            PerformanceState::Zero,
            PerformanceState::Two,
            PerformanceState::Eight
        ]
    );
    assert_eq!(
        device.performance_state().expect("P-state"),
        PerformanceState::Two,
        "CUDA runs in P2"
    );
    let idle = device
        .clock_offset(Clock::Graphics, PerformanceState::Eight)
        .expect("P8's offset");
    assert_eq!(
        (idle.min_clock_offset_mhz, idle.max_clock_offset_mhz),
        (0, 0)
    );
    assert_fails(
        device.clock_offset(Clock::Graphics, PerformanceState::Five),
        NvmlError::NotSupported,
    );
    device
        .set_clock_offset(Clock::Graphics, PerformanceState::Two, 90)
        .expect("P2's offset");
    let offset_in = |device: &nvml_wrapper::Device<'_>, pstate| {
        device
            .clock_offset(Clock::Graphics, pstate)
            .map(|offset| offset.clock_offset_mhz)
            .expect("an offset")
    };
    assert_eq!(offset_in(&device, PerformanceState::Two), 90);
    assert_eq!(offset_in(&device, PerformanceState::Zero), 0, "independent");
    assert_fails(
        device.set_clock_offset(Clock::Graphics, PerformanceState::Eight, 15),
        NvmlError::InvalidArg,
    );
    let state = load_state(fake.state_path()).expect("state");
    assert_eq!(
        state.write_log[0].setting,
        Setting::GpuClockOffsetAt {
            pstate: 2,
            offset_mhz: 90
        }
    );
    drop(nvml);
    drop(fake);

    let _fake = Fake::new("rtx4090", "");
    set_env(PSTATES_ENV, Some("linked"));
    let nvml = open().expect("init");
    let mut device = nvml.device_by_index(0).expect("handle");
    device
        .set_clock_offset(Clock::Graphics, PerformanceState::Zero, -45)
        .expect("P0's offset");
    assert_eq!(offset_in(&device, PerformanceState::Two), -45, "linked");
    assert_eq!(offset_in(&device, PerformanceState::Eight), 0);
    set_env(PSTATES_ENV, None);
}

#[test]
fn a_driver_that_cannot_list_p_states_says_so() {
    let _fake = Fake::new("rtx4090", "pstates_not_listed");
    let nvml = open().expect("init");
    let device = nvml.device_by_index(0).expect("handle");
    assert_fails(
        device.supported_performance_states(),
        NvmlError::NotSupported,
    );
}
