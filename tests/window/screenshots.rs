//! Renders the PNGs in screenshots/ that the README shows, headless (wgpu on lavapipe).
//! Regenerate them with: `cargo test --test window screenshots:: -- --ignored`

use std::path::Path;

use common_ui::app_state;
use egui_kittest::Harness;

use crate::common;
use crate::common_ui;
use gputune::ui::app::AppState;
use gputune_core::device::sim::{LoadPattern, SimScenario};

fn render(state: AppState, size: [f32; 2], name: &str) {
    let mut harness = Harness::builder().with_size(size).wgpu().build_ui_state(
        |ui, state: &mut AppState| {
            eframe::egui::CentralPanel::default().show(ui, |ui| {
                let _ = state.ui(ui);
            });
        },
        state,
    );
    harness.run();
    let image = harness
        .render()
        .unwrap_or_else(|error| panic!("rendering {name}: {error}"));
    assert_eq!(
        (image.width(), image.height()),
        (size[0] as u32, size[1] as u32)
    );
    let colours: std::collections::HashSet<_> = image.pixels().map(|pixel| pixel.0).collect();
    assert!(
        colours.len() > 50,
        "{name} rendered something, not a blank frame"
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("screenshots")
        .join(name);
    image
        .save(&path)
        .unwrap_or_else(|error| panic!("saving {}: {error}", path.display()));
}

#[test]
#[ignore = "writes screenshots/; run with --ignored (needs Vulkan: mesa-vulkan-drivers)"]
fn screenshots() {
    let no_driver = "The NVIDIA management library could not be loaded (libnvidia-ml.so.1: cannot open shared object file).";
    render(
        app_state(
            SimScenario::Rtx4090,
            LoadPattern::Training,
            Some(no_driver),
            60,
            500,
        ),
        [1120.0, 520.0],
        "overview-rtx4090-sim.png",
    );
    // The window's default size, and a 1280×720 screen: the eight cards reflow, no row cut.
    for (size, name) in [
        ([1120.0, 720.0], "overview-8x-rtx4090.png"),
        ([1280.0, 720.0], "overview-8x-rtx4090-1280x720.png"),
    ] {
        render(
            app_state(
                SimScenario::EightRtx4090,
                LoadPattern::Training,
                None,
                60,
                500,
            ),
            size,
            name,
        );
    }
    // Ten minutes of a job whose data loader starves the GPU: hints, gaps in utilization,
    // power-cap bursts in the throttle strip.
    let mut detail = app_state(
        SimScenario::Rtx4090,
        LoadPattern::StopAndGo,
        Some(no_driver),
        2_400,
        250,
    );
    detail.selected_gpu = Some(0);
    render(detail, [1280.0, 1570.0], "detail-rtx4090-stop-and-go.png");

    // The window, through the daemon, trying 70 % for a minute, 25 s in.
    let mut tune = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
    tune.tab = gputune_formats::window::Tab::Tune;
    if let gputune::ui::model::Connection::Connected { daemon, .. } = &mut tune.model.connection {
        *daemon = true;
    }
    let trial = common_ui::running_trial(25, 60);
    let this_window = format!("the gputune window (pid {}, user you)", std::process::id());
    if let Some(tuning) = tune.model.gpus[0].tuning.as_mut() {
        tuning.in_force.power_limit_mw = Some(315_000);
        tuning.holders = vec![trial_of_this_window(trial.session, &this_window)];
        tuning.last_change = Some(gputune_formats::tuning::ChangeNote {
            at_ms: common_ui::START_MS,
            by: this_window,
            what: "trying power limit 315 W".to_string(),
        });
    }
    tune.model.gpus[0].trial = Some(trial);
    render(tune, [1280.0, 900.0], "tune-rtx4090.png");

    // "All 8 GPUs": one trial of 70 % over every card, 25 s in.
    render(
        all_gpus_trying(),
        [1280.0, 720.0],
        "tune-all-8x-rtx4090.png",
    );
    // The same trial ended (reverted at the user's word): each card's numbers and the box's.
    let mut ended = all_gpus_trying();
    for (index, gpu) in ended.model.gpus.iter_mut().enumerate() {
        // Each card a few seconds apart, so that their numbers differ as real cards' do.
        let mut trial = common_ui::running_trial(40 + 3 * index as u64, 60);
        trial.gpu_index = index as u32;
        trial.phase = gputune_formats::tuning::TrialPhase::Ended;
        trial.message = Some("Reverted: put back power limit 450 W.".to_string());
        if let Some(tuning) = gpu.tuning.as_mut() {
            tuning.in_force.power_limit_mw = Some(450_000);
            tuning.holders.clear();
        }
        gpu.trial = Some(trial);
    }
    render(ended, [1280.0, 720.0], "tune-all-8x-rtx4090-result.png");

    // "Find the efficient setting": a finished sweep of the default power limits, and one
    // half-way (its live point moving).
    for (name, measured_steps, elapsed_s) in [
        ("tune-sweep-rtx4090.png", 6, 0),
        ("tune-sweep-running-rtx4090.png", 3, 55),
    ] {
        let mut sweep = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
        sweep.tab = gputune_formats::window::Tab::Tune;
        sweep.tune_view = gputune::ui::app::TuneView::Sweep;
        sweep.sweep.progress_file = "/home/ana/runs/llama-lora/train.log".to_string();
        let view = common::sweep_view::simulated_sweep(
            &[100.0, 90.0, 80.0, 70.0, 60.0],
            measured_steps,
            elapsed_s,
        );
        sweep.take_event(
            gputune_core::link::LinkEvent::Sweep {
                view: Box::new(view),
                notes: Vec::new(),
            },
            common_ui::START_MS,
        );
        render(sweep, [1280.0, 720.0], name);
    }

    // "Check stability": a scan's result and a check found unstable, from real runs on the
    // fake library (tests/data/stability/).
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/stability");
    let read = |name: &str| {
        std::fs::read_to_string(data.join(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
    };
    let scan: gputune_formats::reports::scan::ScanOutcome =
        serde_json::from_str(&read("scan-rtx4090.json")).expect("the scan's outcome reads");
    let checks: Vec<gputune_formats::reports::stability::CheckReport> =
        serde_json::from_str(&read("check-unstable-rtx4090.json")).expect("the check reads");
    let views = [
        (
            "tune-stability-scan-rtx4090.png",
            gputune_core::link::stability::StabilityView {
                gpu_index: 0,
                scanning: true,
                running: false,
                progress: None,
                scan_progress: None,
                scan_steps: scan.steps.clone(),
                scan_stock: None,
                report: None,
                scan_outcome: Some(scan),
            },
        ),
        (
            "tune-stability-unstable-rtx4090.png",
            gputune_core::link::stability::StabilityView {
                gpu_index: 0,
                scanning: false,
                running: false,
                progress: None,
                scan_progress: None,
                scan_steps: Vec::new(),
                scan_stock: None,
                report: checks.into_iter().next(),
                scan_outcome: None,
            },
        ),
    ];
    for (name, view) in views {
        let mut state = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
        state.tab = gputune_formats::window::Tab::Tune;
        state.tune_view = gputune::ui::app::TuneView::Stability;
        state.take_event(
            gputune_core::link::LinkEvent::Stability(Box::new(view)),
            common_ui::START_MS,
        );
        render(state, [1280.0, 720.0], name);
    }

    let mut profiles = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
    profiles.tab = gputune_formats::window::Tab::Profiles;
    let Some(mut quiet) = gputune::ui::profiles::profile_from_card(
        "quiet-70",
        "nights",
        &profiles.model.gpus[0],
        None,
    ) else {
        panic!("the engine said what the card runs")
    };
    quiet.power_limit = Some(gputune_formats::profile::PowerLimit {
        percent_of_default: 70.0,
        watts: 315.0,
    });
    quiet.default_for_card = true;
    let Some(mut undervolt) =
        gputune::ui::profiles::profile_from_card("undervolt", "", &profiles.model.gpus[0], None)
    else {
        panic!("the engine said what the card runs")
    };
    undervolt.gpu_clock_lock = Some(gputune_formats::profile::ProfileClockLock {
        min_mhz: 210,
        max_mhz: 2_520,
    });
    undervolt.gpu_clock_offset_mhz = Some(150);
    profiles.profiles.profiles = [quiet, undervolt]
        .into_iter()
        .map(|profile| gputune_core::profiles::store::StoredProfile {
            path: format!("/home/you/.config/gputune/profiles/{}.toml", profile.name).into(),
            profile,
        })
        .collect();
    render(profiles, [1300.0, 600.0], "profiles-rtx4090.png");

    let mut plan = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
    plan.tab = gputune_formats::window::Tab::Plan;
    render(plan, [1400.0, 1250.0], "plan-llama-3.1-8b-qlora.png");

    let mut training = app_state(
        SimScenario::Rtx4090,
        LoadPattern::Training,
        None,
        1_200,
        500,
    );
    training.selected_gpu = Some(0);
    render(training, [1280.0, 1570.0], "detail-rtx4090-training.png");
}

/// The holder of a card the window is trying a setting on: a minute's trial from the start.
fn trial_of_this_window(session: u64, this_window: &str) -> gputune_formats::tuning::Holder {
    gputune_formats::tuning::Holder {
        session,
        controls: vec![gputune_formats::tuning::Hold::PowerLimit],
        purpose: gputune_formats::tuning::SessionPurpose::Trial,
        by: this_window.to_string(),
        client: 1,
        since_ms: common_ui::START_MS,
        trial_ends_at_ms: Some(common_ui::START_MS + 60_000),
        job_pid: None,
        energy_at_start_mj: None,
        job: None,
    }
}

/// The "All 8 GPUs" view, through the daemon, trying 70 % on every card, 25 s in.
fn all_gpus_trying() -> gputune::ui::app::AppState {
    let mut all = app_state(
        SimScenario::EightRtx4090,
        LoadPattern::Training,
        None,
        5,
        500,
    );
    all.tab = gputune_formats::window::Tab::Tune;
    all.tune_all = true;
    all.tune.power_limit_pct = 70.0;
    if let gputune::ui::model::Connection::Connected { daemon, .. } = &mut all.model.connection {
        *daemon = true;
    }
    let this_window = format!("the gputune window (pid {}, user you)", std::process::id());
    for (index, gpu) in all.model.gpus.iter_mut().enumerate() {
        let mut trial = common_ui::running_trial(25, 60);
        trial.gpu_index = index as u32;
        if let Some(tuning) = gpu.tuning.as_mut() {
            tuning.in_force.power_limit_mw = Some(315_000);
            tuning.holders = vec![trial_of_this_window(trial.session, &this_window)];
        }
        gpu.trial = Some(trial);
    }
    all
}
