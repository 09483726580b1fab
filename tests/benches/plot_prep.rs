//! What one monitor frame costs to plot 24 h of 10 Hz history: six series at 1000 px, from
//! min/max-decimated points, against handing egui_plot every raw point. Results are recorded in
//! docs/benchmarks.md ("Plot preparation").
//!
//! Run: `cargo bench --bench plot_prep`. Under `cargo test` (no `--bench` argument) it builds
//! one simulated hour instead of a day and runs each routine once, as a smoke test.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use eframe::egui;
use egui_plot::{Line, Plot};
use gputune_core::clock::ManualClock;
use gputune_core::device::Backend;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_core::telemetry::decimate::{all_points, decimate};
use gputune_core::telemetry::history::{DAY_AT_10_HZ, GpuHistory, Metric};

/// 2023-11-14, a realistic Unix time in ms.
const START_MS: u64 = 1_700_000_000_000;
const SAMPLE_INTERVAL_MS: u64 = 100;
const PLOT_WIDTH_PX: usize = 1000;
/// A line breaks where samples are further apart than this (a paused sampler).
const GAP_AFTER_MS: u64 = 1_000;
const SERIES: [Metric; 6] = [
    Metric::PowerDrawW,
    Metric::TemperatureC,
    Metric::GpuClockMhz,
    Metric::SmClockMhz,
    Metric::MemoryClockMhz,
    Metric::UtilizationGpuPct,
];

/// A simulated RTX 4090 running a stop-and-go training job, sampled every 100 ms.
fn simulated_history(samples: usize) -> GpuHistory {
    let clock = ManualClock::starting_at(START_MS);
    let options = SimOptions {
        scenario: SimScenario::Rtx4090,
        load: LoadPattern::StopAndGo,
    };
    let mut backend = SimBackend::with_clock(&options, Box::new(clock.clone()));
    let mut history = GpuHistory::with_capacity(DAY_AT_10_HZ);
    let mut now_ms = START_MS;
    for _ in 0..samples {
        clock.advance_ms(SAMPLE_INTERVAL_MS);
        now_ms += SAMPLE_INTERVAL_MS;
        match backend.telemetry(0) {
            Ok(reading) => history.push(reading.sampled_at_ms, Some(&reading)),
            Err(_) => history.push(now_ms, None),
        }
    }
    history
}

type Series = Vec<(Metric, Vec<Vec<[f64; 2]>>)>;

fn decimated_series(history: &GpuHistory, from_ms: u64, to_ms: u64) -> Series {
    SERIES
        .iter()
        .map(|&metric| {
            let lines = decimate(history, metric, from_ms, to_ms, PLOT_WIDTH_PX, GAP_AFTER_MS);
            (metric, lines)
        })
        .collect()
}

fn raw_series(history: &GpuHistory, from_ms: u64, to_ms: u64) -> Series {
    SERIES
        .iter()
        .map(|&metric| {
            (
                metric,
                all_points(history, metric, from_ms, to_ms, GAP_AFTER_MS),
            )
        })
        .collect()
}

/// One headless egui frame with a plot of `series`, tessellated as eframe does before painting.
/// Returns the vertex count, so nothing is optimized away.
fn plot_frame(context: &egui::Context, series: Series) -> usize {
    let raw_input = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(PLOT_WIDTH_PX as f32, 700.0),
        )),
        ..Default::default()
    };
    let mut series = Some(series);
    let mut output = context.run_ui(raw_input, |ui| {
        let Some(series) = series.take() else {
            return;
        };
        egui::CentralPanel::default().show(ui, |ui| {
            Plot::new("plot_prep")
                .width(PLOT_WIDTH_PX as f32)
                .height(600.0)
                .show(ui, |plot_ui| {
                    for (metric, lines) in series {
                        for line in lines {
                            plot_ui.line(Line::new(metric.label(), line));
                        }
                    }
                });
        });
    });
    let shapes = std::mem::take(&mut output.shapes);
    let pixels_per_point = output.pixels_per_point;
    // No renderer here to upload the font atlas to.
    output.drop_without_applying_deltas();
    let primitives = context.tessellate(shapes, pixels_per_point);
    primitives
        .iter()
        .map(|primitive| match &primitive.primitive {
            egui::epaint::Primitive::Mesh(mesh) => mesh.vertices.len(),
            egui::epaint::Primitive::Callback(_) => 0,
        })
        .sum()
}

fn plot_prep(criterion: &mut Criterion) {
    let full_run = std::env::args().any(|argument| argument == "--bench");
    let samples = if full_run { DAY_AT_10_HZ } else { 36_000 };
    let history = simulated_history(samples);
    let (Some(from_ms), Some(to_ms)) = (history.first_time_ms(), history.last_time_ms()) else {
        eprintln!("The simulated history is empty.");
        return;
    };
    let decimated_points: usize = decimated_series(&history, from_ms, to_ms)
        .iter()
        .flat_map(|(_, lines)| lines.iter().map(Vec::len))
        .sum();
    eprintln!(
        "history: {} samples ({:.1} h at 10 Hz), memory_bytes {} ({:.1} MB)",
        history.len(),
        history.len() as f64 / 36_000.0,
        history.memory_bytes(),
        history.memory_bytes() as f64 / 1e6,
    );
    eprintln!(
        "per frame: {decimated_points} decimated points vs {} raw points, six series at {PLOT_WIDTH_PX} px",
        history.len() * SERIES.len()
    );

    let context = egui::Context::default();
    // Fonts load on the first frame; a running app has paid that long before.
    black_box(plot_frame(
        &context,
        decimated_series(&history, from_ms, to_ms),
    ));

    let mut group = criterion.benchmark_group("plot prep, 6 series, 1000 px");
    group.bench_function("a: decimate", |bench| {
        bench.iter(|| black_box(decimated_series(&history, from_ms, to_ms)))
    });
    group.bench_function("b: decimate + egui_plot frame + tessellate", |bench| {
        bench.iter(|| {
            black_box(plot_frame(
                &context,
                decimated_series(&history, from_ms, to_ms),
            ))
        })
    });
    group.finish();

    let mut group = criterion.benchmark_group("plot prep, 6 series, 1000 px, every point");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    group.bench_function("c: all points + egui_plot frame + tessellate", |bench| {
        bench.iter(|| black_box(plot_frame(&context, raw_series(&history, from_ms, to_ms))))
    });
    group.finish();
}

criterion_group!(benches, plot_prep);
criterion_main!(benches);
