//! Renders the PNGs in screenshots/ that the README shows, headless (wgpu on lavapipe).
//! Regenerate them with: `cargo test --test screenshots -- --ignored`

use std::path::{Path, PathBuf};

use egui_kittest::Harness;
use gputune::device::Backend;
use gputune::device::sim::{LoadPattern, ManualClock, SimBackend, SimOptions, SimScenario};
use gputune::telemetry::sampler::{connected_event, samples_event};
use gputune::ui::overview::OverviewState;

fn screenshot_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("screenshots")
        .join(name)
}

/// An overview fed the way the device-owner thread feeds it, from a simulated machine.
fn overview_of(scenario: SimScenario, simulated_because: Option<&str>) -> OverviewState {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let mut backend = SimBackend::with_clock(
        &SimOptions {
            scenario,
            load: LoadPattern::Training,
        },
        Box::new(clock),
    );
    let connected = connected_event(&mut backend, simulated_because.map(str::to_string))
        .unwrap_or_else(|error| panic!("{error}"));
    let gpu_count = backend.gpu_count().unwrap_or(0) as usize;
    let mut overview = OverviewState::default();
    overview.apply(connected);
    overview.apply(samples_event(&mut backend, gpu_count));
    overview
}

fn render(overview: OverviewState, size: [f32; 2], name: &str) {
    let mut harness = Harness::builder().with_size(size).wgpu().build_ui_state(
        |ui, overview: &mut OverviewState| {
            eframe::egui::CentralPanel::default().show(ui, |ui| overview.overview_ui(ui));
        },
        overview,
    );
    harness.run();
    let image = harness
        .render()
        .unwrap_or_else(|error| panic!("rendering {name}: {error}"));
    assert_eq!(
        (image.width(), image.height()),
        (size[0] as u32, size[1] as u32)
    );
    let distinct_colours: std::collections::HashSet<_> =
        image.pixels().map(|pixel| pixel.0).collect();
    assert!(
        distinct_colours.len() > 50,
        "{name} rendered something, not a blank frame"
    );
    let path = screenshot_path(name);
    image
        .save(&path)
        .unwrap_or_else(|error| panic!("saving {}: {error}", path.display()));
}

#[test]
#[ignore = "writes screenshots/; run with --ignored (needs Vulkan: mesa-vulkan-drivers)"]
fn overview_screenshots() {
    render(
        overview_of(
            SimScenario::Rtx4090,
            Some(
                "The NVIDIA management library could not be loaded (libnvidia-ml.so.1: cannot open shared object file).",
            ),
        ),
        [1120.0, 560.0],
        "overview-rtx4090-sim.png",
    );
    render(
        overview_of(SimScenario::EightRtx4090, None),
        [1120.0, 1180.0],
        "overview-8x-rtx4090.png",
    );
}
