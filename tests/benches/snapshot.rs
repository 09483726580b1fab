//! The cost of one full telemetry snapshot of one GPU through the fake libnvidia-ml, next to
//! each individual NVML call that snapshot makes. Results are recorded in docs/benchmarks.md.
//!
//! Run: `cargo bench --bench snapshot` (set FAKE_NVML_STATE to measure the file-backed mode).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gputune_core::device::Backend;
use gputune_core::device::nvml::NvmlBackend;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};

fn snapshot(criterion: &mut Criterion) {
    let Some(library) = nvidia_ml_fake::fake_library_path() else {
        eprintln!(
            "The fake libnvidia-ml was not built; run `cargo build -p fake-nvml --release` first."
        );
        return;
    };
    let mode = if std::env::var_os("FAKE_NVML_STATE").is_some() {
        "state file"
    } else {
        "in memory"
    };
    eprintln!("fake NVML at {} ({mode})", library.display());

    let mut backend = match NvmlBackend::open(Some(&library)) {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("Opening the fake library failed: {error}");
            return;
        }
    };
    criterion.bench_function("full snapshot (Backend::telemetry)", |bench| {
        bench.iter(|| black_box(backend.telemetry(0)))
    });
    drop(backend);

    let nvml = match Nvml::builder().lib_path(library.as_os_str()).init() {
        Ok(nvml) => nvml,
        Err(error) => {
            eprintln!("Opening the fake library failed: {error}");
            return;
        }
    };
    let Ok(device) = nvml.device_by_index(0) else {
        eprintln!("The fake library has no GPU 0");
        return;
    };
    let mut group = criterion.benchmark_group("single NVML call");
    group.bench_function("device_by_index", |bench| {
        bench.iter(|| black_box(nvml.device_by_index(0).is_ok()))
    });
    group.bench_function("num_fans", |bench| {
        bench.iter(|| black_box(device.num_fans()))
    });
    group.bench_function("fan_speed (x2 fans)", |bench| {
        bench.iter(|| black_box(device.fan_speed(0)))
    });
    group.bench_function("fan_speed_rpm (x2 fans)", |bench| {
        bench.iter(|| black_box(device.fan_speed_rpm(0)))
    });
    group.bench_function("utilization_rates", |bench| {
        bench.iter(|| black_box(device.utilization_rates()))
    });
    group.bench_function("performance_state", |bench| {
        bench.iter(|| black_box(device.performance_state()))
    });
    group.bench_function("power_usage", |bench| {
        bench.iter(|| black_box(device.power_usage()))
    });
    group.bench_function("enforced_power_limit", |bench| {
        bench.iter(|| black_box(device.enforced_power_limit()))
    });
    group.bench_function("temperature", |bench| {
        bench.iter(|| black_box(device.temperature(TemperatureSensor::Gpu)))
    });
    group.bench_function("clock_info (x3 clocks)", |bench| {
        bench.iter(|| black_box(device.clock_info(Clock::Graphics)))
    });
    group.bench_function("memory_info", |bench| {
        bench.iter(|| black_box(device.memory_info()))
    });
    group.bench_function("current_throttle_reasons", |bench| {
        bench.iter(|| black_box(device.current_throttle_reasons()))
    });
    group.bench_function("pcie link (x4 calls)", |bench| {
        bench.iter(|| black_box(device.current_pcie_link_gen()))
    });
    group.bench_function("total_energy_consumption", |bench| {
        bench.iter(|| black_box(device.total_energy_consumption()))
    });
    group.finish();
}

criterion_group!(benches, snapshot);
criterion_main!(benches);
