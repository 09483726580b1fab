//! The first window: the GPU overview lists every GPU with its readings, says "n/a" for what a
//! card does not report, and shows the simulated-GPU banner.

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gputune::device::sim::{LoadPattern, ManualClock, SimBackend, SimOptions, SimScenario};
use gputune::device::{Backend, DeviceError};
use gputune::telemetry::sampler::{Event, connected_event, samples_event};
use gputune::ui::overview::OverviewState;

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

fn harness(overview: OverviewState) -> Harness<'static, OverviewState> {
    Harness::builder()
        .with_size([1200.0, 900.0])
        .build_ui_state(
            |ui, overview: &mut OverviewState| overview.overview_ui(ui),
            overview,
        )
}

#[test]
fn overview_lists_every_gpu_of_an_eight_gpu_box() {
    let harness = harness(overview_of(SimScenario::EightRtx4090, None));
    for index in 0..8 {
        harness.get_by_label(&format!("GPU {index} · NVIDIA GeForce RTX 4090"));
    }
    assert_eq!(harness.query_all_by_label("Temperature").count(), 8);
    assert_eq!(
        harness.query_all_by_label_contains(" of 450 W").count(),
        8,
        "power against its limit"
    );
}

#[test]
fn simulated_banner_says_why() {
    let harness = harness(overview_of(
        SimScenario::Rtx4090,
        Some("The NVIDIA driver found no GPU."),
    ));
    harness.get_by_label("Simulated GPU");
    harness.get_by_label_contains("The NVIDIA driver found no GPU.");
}

#[test]
fn fanless_card_shows_na_for_fans() {
    let harness = harness(overview_of(SimScenario::DatacenterFanless, None));
    harness.get_by_label("GPU 0 · NVIDIA H100 80GB HBM3");
    harness.get_by_label("Fans");
    // The fan row's value is "n/a", never 0 %.
    assert_eq!(harness.query_all_by_label("n/a").count(), 1);
}

#[test]
fn a_gpu_that_fails_to_read_shows_its_error_and_the_others_still_show() {
    let mut overview = overview_of(SimScenario::EightRtx4090, None);
    let mut samples: Vec<_> = overview
        .gpus
        .iter()
        .map(|view| view.latest.clone().unwrap_or(Err(DeviceError::NoGpus)))
        .collect();
    samples[2] = Err(DeviceError::GpuLost { index: 2 });
    overview.apply(Event::Samples(samples));
    let harness = harness(overview);
    harness.get_by_label_contains("GPU 2 stopped answering");
    assert_eq!(harness.query_all_by_label("Temperature").count(), 7);
}

#[test]
fn before_the_backend_opens_it_says_so() {
    let harness = harness(OverviewState::default());
    harness.get_by_label("Looking for GPUs…");
}

#[test]
fn a_backend_that_cannot_open_explains_what_to_do() {
    let mut overview = OverviewState::default();
    overview.apply(Event::Failed(DeviceError::NoGpus));
    let harness = harness(overview);
    harness.get_by_label("No GPU could be opened");
    harness.get_by_label_contains("--backend sim");
}
