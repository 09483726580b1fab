//! What the window's own code costs per frame, without rasterization: the real panels
//! (`AppState::ui`) run in an egui context and their shapes tessellated into meshes, as
//! eframe does before handing them to the renderer. 24 h of history at 1 Hz per GPU; the
//! overview of 1 and 8 GPUs and the graphs of one GPU over 10 minutes and over the whole day.
//! Results are recorded in docs/benchmarks.md ("The window's own cost per frame").
//!
//! Run: `cargo bench --bench panels`. Under `cargo test` (no `--bench` argument) it builds one
//! simulated hour instead of a day and draws each view once, as a smoke test.

#[path = "../common/ui.rs"]
mod ui_common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use eframe::egui;
use gputune::ui::app::AppState;
use gputune_core::device::sim::{LoadPattern, SimScenario};
use gputune_formats::window::TimeWindow;

const DAY_AT_1_HZ: usize = 86_400;
const HOUR_AT_1_HZ: usize = 3_600;
const WINDOW_SIZE: [f32; 2] = [1280.0, 720.0];

fn benchmarking() -> bool {
    std::env::args().any(|argument| argument == "--bench")
}

/// A machine that has sampled every second for `samples` seconds, as the window holds it.
fn state(scenario: SimScenario, samples: usize) -> AppState {
    ui_common::app_state_with_history(
        scenario,
        LoadPattern::StopAndGo,
        None,
        samples,
        1_000,
        samples,
    )
}

/// One frame of the window's content: the panels' own work and the tessellation of what they
/// drew. Returns the number of vertices handed to the renderer.
fn frame(context: &egui::Context, state: &mut AppState) -> usize {
    let input = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(WINDOW_SIZE[0], WINDOW_SIZE[1]),
        )),
        ..Default::default()
    };
    let mut output = context.run_ui(input, |ui| {
        egui::CentralPanel::default().show(ui, |ui| {
            black_box(state.ui(ui));
        });
    });
    // No renderer here to upload the font texture to.
    output.textures_delta.clear();
    let meshes = context.tessellate(output.shapes, output.pixels_per_point);
    meshes
        .iter()
        .map(|mesh| match &mesh.primitive {
            egui::epaint::Primitive::Mesh(mesh) => mesh.vertices.len(),
            egui::epaint::Primitive::Callback(_) => 0,
        })
        .sum()
}

fn views(samples: usize) -> Vec<(String, AppState)> {
    let mut views = Vec::new();
    for (label, scenario) in [
        ("1 GPU", SimScenario::Rtx4090),
        ("8 GPUs", SimScenario::EightRtx4090),
    ] {
        let overview = state(scenario, samples);
        views.push((format!("overview, {label}"), overview));
    }
    for window in [TimeWindow::TenMinutes, TimeWindow::Day] {
        let mut graphs = state(SimScenario::Rtx4090, samples);
        graphs.selected_gpu = Some(0);
        graphs.monitor.set_window(window);
        views.push((format!("graphs, 1 GPU, {} window", window.label()), graphs));
    }
    views
}

fn panels(criterion: &mut Criterion) {
    let samples = if benchmarking() {
        DAY_AT_1_HZ
    } else {
        HOUR_AT_1_HZ
    };
    let mut group = criterion.benchmark_group("window frame without rasterization");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for (label, mut state) in views(samples) {
        let context = egui::Context::default();
        // The first frames lay out and load fonts; measure a frame in steady state.
        for _ in 0..3 {
            frame(&context, &mut state);
        }
        let vertices = frame(&context, &mut state);
        println!("{label}: {vertices} vertices per frame");
        group.bench_function(label, |bencher| {
            bencher.iter(|| frame(&context, &mut state));
        });
    }
    group.finish();
}

criterion_group!(benches, panels);
criterion_main!(benches);
