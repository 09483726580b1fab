//! The metrics' own cost: rendering the scrape body once per sample, for one simulated GPU and
//! for an eight-GPU box (what the feed thread does after each reading; a scrape only copies the
//! bytes). Results are recorded in docs/metrics.md.
//!
//! Run: `cargo bench --bench metrics`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gputune_core::device::sim::{SimOptions, SimScenario};
use gputune_core::device::{BackendChoice, BackendOptions, open_backend};
use gputune_core::metrics::families::{Context, render};
use gputune_core::tuning::in_force::ControlsInForce;
use gputune_formats::card::BackendKind;
use gputune_formats::protocol::Snapshot;
use gputune_formats::tuning::SettingsInForce;
use gputune_formats::tuning::{GpuInfo, GpuTuning};

/// A snapshot of the simulated `scenario`, as the service gives it to the feed.
fn snapshot(scenario: SimScenario) -> Option<Snapshot> {
    let options = BackendOptions {
        choice: BackendChoice::Sim,
        nvml_library_path: None,
        sim: SimOptions {
            scenario,
            ..SimOptions::default()
        },
    };
    let mut backend = open_backend(&options).ok()?.backend;
    let mut snapshot = Snapshot {
        gpus: Vec::new(),
        tunings: Vec::new(),
        latest: Vec::new(),
    };
    for index in 0..backend.gpu_count().ok()? {
        let identity = backend.identity(index).ok()?;
        let current = backend.current_settings(index).ok()?;
        snapshot.tunings.push(GpuTuning {
            gpu_index: index,
            gpu_uuid: identity.uuid.clone(),
            in_force: SettingsInForce::from_card(&current, Default::default()),
            fan_curve: None,
            fan_safety_engaged: false,
            holders: Vec::new(),
            last_change: None,
            last_critical: None,
            temperature_hold: None,
        });
        snapshot.gpus.push(GpuInfo {
            constraints: backend.constraints(index).ok()?,
            identity,
        });
        snapshot.latest.push(Some(backend.telemetry(index)));
    }
    Some(snapshot)
}

fn rendering(criterion: &mut Criterion) {
    let context = Context {
        hostname: "gpu-box".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend: BackendKind::Sim,
        daemon: false,
    };
    for (label, scenario) in [
        ("1 GPU", SimScenario::Rtx4090),
        ("8 GPUs", SimScenario::EightRtx4090),
    ] {
        let Some(snapshot) = snapshot(scenario) else {
            eprintln!("the simulator could not be read");
            return;
        };
        let bytes = render(&snapshot, &context, true).len();
        eprintln!("{label}: a scrape body of {bytes} bytes");
        criterion.bench_function(&format!("render the scrape body, {label}"), |bench| {
            bench.iter(|| black_box(render(black_box(&snapshot), &context, true)))
        });
    }
}

criterion_group!(benches, rendering);
criterion_main!(benches);
