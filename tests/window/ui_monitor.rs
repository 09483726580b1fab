//! The window as a user drives it (egui_kittest): the overview shows every GPU, clicking one
//! opens its graphs, the time-window picker and pause work, a fanless GPU shows "n/a" for fans,
//! and the simulated-GPU banner says why.

use common_ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::common_ui;
use gputune::ui::app::{AppCommand, AppState};
use gputune::ui::model::WindowModel;
use gputune_core::device::sim::{LoadPattern, SimScenario};
use gputune_core::link::LinkEvent;
use gputune_formats::card::DeviceError;
use gputune_formats::window::RememberedWindow;
use gputune_formats::window::TimeWindow;

fn harness(state: AppState) -> Harness<'static, Window> {
    window_harness(state, [1280.0, 1000.0])
}

fn training(scenario: SimScenario) -> AppState {
    app_state(scenario, LoadPattern::Training, None, 120, 500)
}

#[test]
fn overview_shows_every_gpu_of_an_eight_gpu_box() {
    let harness = harness(training(SimScenario::EightRtx4090));
    for index in 0..8 {
        harness.get_by_label(&format!("GPU {index} · NVIDIA GeForce RTX 4090"));
    }
    assert_eq!(
        harness.query_all_by_label_contains(" of 450 W").count(),
        8,
        "power against its limit"
    );
    assert_eq!(harness.query_all_by_label("Temperature").count(), 8);
}

#[test]
fn eight_gpus_fit_at_1120x720_and_1280x720_in_four_columns_with_no_row_cut() {
    for size in [[1120.0, 720.0], [1280.0, 720.0]] {
        let harness = window_harness(training(SimScenario::EightRtx4090), size);
        let titles: Vec<_> = (0..8)
            .map(|index| {
                harness
                    .get_by_label(&format!("GPU {index} · NVIDIA GeForce RTX 4090"))
                    .rect()
            })
            .collect();
        let columns: std::collections::BTreeSet<i32> =
            titles.iter().map(|rect| rect.left() as i32).collect();
        assert_eq!(columns.len(), 4, "{size:?}: four columns, two rows");
        let last_rows: Vec<_> = harness.query_all_by_label("Processes").collect();
        assert_eq!(last_rows.len(), 8);
        for row in last_rows {
            assert!(
                row.rect().bottom() <= size[1],
                "{size:?}: every card's last row is inside the window ({:?})",
                row.rect()
            );
        }
    }
}

#[test]
fn box_totals_on_an_eight_gpu_box_and_none_on_one_gpu() {
    let state = training(SimScenario::EightRtx4090);
    let expected = gputune::ui::monitor::box_totals::box_totals(&state.model.gpus);
    let Some(totals) = expected else {
        panic!("an eight-GPU box has totals")
    };
    assert_eq!(totals.reporting_count, 8);
    assert_eq!(totals.power_limit_mw, 8 * 450_000);
    assert!(totals.energy_since_open_mj.is_some_and(|mj| mj > 0));
    let harness = harness(state);
    harness.get_by_label("All 8 GPUs");
    harness.get_by_label_contains(" of 3600 W");
    harness.get_by_label_contains("since the window opened");
    let Some(hottest) = totals.hottest else {
        panic!("the simulated cards report temperatures")
    };
    harness.get_by_label(&format!(
        "Hottest GPU {} at {} °C",
        hottest.gpu_index, hottest.temperature_c
    ));
    harness.get_by_label(&format!(
        "VRAM {} of {}",
        gputune_formats::units::gib(totals.memory_used_bytes),
        gputune_formats::units::gib(totals.memory_total_bytes)
    ));

    let one = window_harness(training(SimScenario::Rtx4090), [1280.0, 1000.0]);
    assert!(one.query_by_label_contains("All 1 GPUs").is_none());
    assert!(one.query_by_label_contains("Hottest GPU").is_none());
}

#[test]
fn clicking_a_gpu_opens_its_graphs_and_back_returns() {
    let mut harness = harness(training(SimScenario::EightRtx4090));
    harness
        .get_by_label("GPU 3 · NVIDIA GeForce RTX 4090")
        .click();
    harness.run();
    assert_eq!(harness.state().state.selected_gpu, Some(3));
    harness.get_by_label("Back to all GPUs");
    for title in [
        "Power (W)",
        "Temperature (°C)",
        "Fans (%)",
        "GPU clocks (MHz)",
        "Memory clock (MHz)",
        "Utilization (%)",
        "VRAM (GiB)",
        "Throttle reasons",
    ] {
        harness.get_by_label(title);
    }
    harness.get_by_label("Back to all GPUs").click();
    harness.run();
    assert_eq!(harness.state().state.selected_gpu, None);
    harness.get_by_label("GPU 7 · NVIDIA GeForce RTX 4090");
}

#[test]
fn the_gpu_switcher_opens_another_gpus_graphs_in_the_same_time_window() {
    let mut state = training(SimScenario::EightRtx4090);
    state.selected_gpu = Some(3);
    state.monitor.set_window(TimeWindow::OneHour);
    let mut harness = harness(state);
    let switchers: Vec<_> = harness.query_all_by_label("Show").collect();
    let Some(switcher) = switchers.last() else {
        panic!("the graphs of an eight-GPU box have a GPU switcher")
    };
    switcher.click();
    harness.run();
    harness
        .get_by_label("GPU 5 · NVIDIA GeForce RTX 4090")
        .click();
    harness.run();
    assert_eq!(harness.state().state.selected_gpu, Some(5));
    assert_eq!(harness.state().state.monitor.window, TimeWindow::OneHour);
    harness.get_by_label("Power (W)");
    harness.get_by_label("Back to all GPUs");

    let mut one = training(SimScenario::Rtx4090);
    one.selected_gpu = Some(0);
    let one = window_harness(one, [1280.0, 1000.0]);
    assert!(
        one.query_by_label("Show").is_none(),
        "one GPU: nothing to switch to"
    );
    one.get_by_label("GPU 0 · NVIDIA GeForce RTX 4090");
}

#[test]
fn time_window_picker_and_pause_follow() {
    let mut state = training(SimScenario::Rtx4090);
    state.selected_gpu = Some(0);
    let mut harness = harness(state);
    assert_eq!(harness.state().state.monitor.window, TimeWindow::TenMinutes);
    harness.get_by_label("1 h").click();
    harness.run();
    assert_eq!(harness.state().state.monitor.window, TimeWindow::OneHour);
    harness.get_by_label("24 h").click();
    harness.run();
    assert_eq!(harness.state().state.monitor.window, TimeWindow::Day);

    assert!(harness.state().state.monitor.is_following());
    harness.get_by_label("Pause").click();
    harness.run();
    let paused_at = harness.state().state.monitor.paused_at_ms;
    let last_sample = harness.state().state.model.gpus[0].history.last_time_ms();
    assert_eq!(paused_at, last_sample, "paused at the newest sample");
    harness.get_by_label("Follow").click();
    harness.run();
    assert!(harness.state().state.monitor.is_following());
    harness.get_by_label("Pause");
}

#[test]
fn choosing_a_sampling_interval_tells_the_sampler() {
    let mut state = training(SimScenario::Rtx4090);
    state.selected_gpu = Some(0);
    let mut harness = harness(state);
    harness.get_by_label("sampling").click();
    harness.run();
    harness.get_by_label("every 2 s").click();
    harness.run();
    assert_eq!(harness.state().state.interval_ms, 2_000);
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::SetInterval { interval_ms: 2_000 })
    );
}

#[test]
fn export_button_asks_the_app_to_export_this_gpu() {
    let mut state = training(SimScenario::EightRtx4090);
    state.selected_gpu = Some(5);
    let mut harness = harness(state);
    harness.get_by_label("Export CSV…").click();
    harness.run();
    assert!(
        harness
            .state()
            .commands
            .contains(&AppCommand::ExportCsv { gpu_index: 5 })
    );
}

#[test]
fn fanless_gpu_shows_na_for_fans_in_overview_and_graphs() {
    let mut harness = harness(training(SimScenario::DatacenterFanless));
    harness.get_by_label("GPU 0 · NVIDIA H100 80GB HBM3");
    assert_eq!(harness.query_all_by_label("n/a").count(), 1, "the fans row");
    harness
        .get_by_label("GPU 0 · NVIDIA H100 80GB HBM3")
        .click();
    harness.run();
    harness.get_by_label_contains("Fans: n/a");
    assert!(harness.query_by_label("Fans (%)").is_none());
}

#[test]
fn simulated_banner_says_why() {
    let state = app_state(
        SimScenario::Rtx4090,
        LoadPattern::Training,
        Some("The NVIDIA driver found no GPU."),
        10,
        500,
    );
    let harness = harness(state);
    harness.get_by_label("Simulated GPU");
    harness.get_by_label_contains("The NVIDIA driver found no GPU.");
}

#[test]
fn starving_data_loader_shows_a_hint_in_the_graphs() {
    let mut state = app_state(SimScenario::Rtx4090, LoadPattern::StopAndGo, None, 240, 250);
    state.selected_gpu = Some(0);
    let harness = harness(state);
    harness.get_by_label_contains("GPU utilization dropped to 0 %");
}

#[test]
fn a_gpu_that_fails_to_read_shows_its_error_and_the_others_still_show() {
    let mut state = training(SimScenario::EightRtx4090);
    let mut samples: Vec<_> = (0..8).map(|_| Err(DeviceError::NoGpus)).collect();
    for (index, gpu) in state.model.gpus.iter().enumerate() {
        if let Some(Ok(reading)) = &gpu.latest {
            samples[index] = Ok(reading.clone());
        }
    }
    samples[2] = Err(DeviceError::GpuLost { index: 2 });
    state.take_event(LinkEvent::Samples(samples), common_ui::START_MS + 120 * 500);
    let harness = harness(state);
    harness.get_by_label_contains("GPU 2 stopped answering");
    assert_eq!(harness.query_all_by_label("Temperature").count(), 7);
}

#[test]
fn before_the_backend_opens_and_when_it_cannot() {
    let connecting = harness(AppState::new(
        WindowModel::with_history_capacity(10),
        RememberedWindow::default(),
    ));
    connecting.get_by_label("Looking for GPUs…");

    let mut state = AppState::new(
        WindowModel::with_history_capacity(10),
        RememberedWindow::default(),
    );
    state.take_event(LinkEvent::Failed(DeviceError::NoGpus.to_string()), 0);
    let harness = harness(state);
    harness.get_by_label("No GPU could be reached");
    harness.get_by_label_contains("--backend sim");
}

#[test]
fn the_window_remembers_the_gpu_window_and_interval() {
    let mut state = training(SimScenario::EightRtx4090);
    state.selected_gpu = Some(6);
    state.monitor.set_window(TimeWindow::SixHours);
    let remembered = state.remembered();
    let uuid = state.model.gpus[6].info.identity.uuid.clone();
    assert_eq!(remembered.selected_gpu_uuid.as_deref(), Some(uuid.as_str()));

    let (_, restored) = through_eframe_storage(&remembered);
    assert_eq!(restored.monitor.window, TimeWindow::SixHours);
    let mut next_run = AppState::new(WindowModel::with_history_capacity(10), restored);
    let fresh = training(SimScenario::EightRtx4090);
    let connected = LinkEvent::Connected {
        backend: gputune_formats::card::BackendKind::Sim,
        simulated_because: None,
        gpus: fresh
            .model
            .gpus
            .iter()
            .map(|gpu| gpu.info.clone())
            .collect(),
        daemon: false,
        notices: Vec::new(),
    };
    next_run.take_event(connected, 0);
    assert_eq!(
        next_run.selected_gpu,
        Some(6),
        "the same GPU opens again, found by UUID"
    );
    assert_eq!(next_run.monitor.window, TimeWindow::SixHours);
}

#[test]
fn a_setting_changed_by_another_program_is_marked_in_the_graphs_with_who_and_what() {
    let mut state = training(SimScenario::Rtx4090);
    let latest_ms = match &state.model.gpus[0].latest {
        Some(Ok(reading)) => reading.sampled_at_ms,
        _ => panic!("the simulated card has a reading"),
    };
    let Some(mut tuning) = state.model.gpus[0].tuning.clone() else {
        panic!("the engine told the window what the card runs")
    };
    // Reported twice (every Tuning event carries the last change): kept once.
    tuning.last_change = Some(gputune_formats::tuning::ChangeNote {
        at_ms: latest_ms - 20_000,
        by: "another program".to_string(),
        what: "power limit changed".to_string(),
    });
    for _ in 0..2 {
        state.take_event(LinkEvent::Tuning(Box::new(tuning.clone())), latest_ms);
    }
    assert_eq!(state.model.gpus[0].changes.len(), 1);
    state.selected_gpu = Some(0);
    let window = harness(state);
    window.get_by_label_contains("power limit changed (another program)");

    // Outside the time window: not listed.
    let mut state = training(SimScenario::Rtx4090);
    if let Some(mut tuning) = state.model.gpus[0].tuning.clone() {
        tuning.last_change = Some(gputune_formats::tuning::ChangeNote {
            at_ms: latest_ms - 3_600_000,
            by: "another program".to_string(),
            what: "power limit changed".to_string(),
        });
        state.take_event(LinkEvent::Tuning(Box::new(tuning)), latest_ms);
    }
    state.selected_gpu = Some(0);
    let window = harness(state);
    assert!(
        window
            .query_by_label_contains("Settings changed:")
            .is_none()
    );
}

#[test]
fn the_graphs_say_where_their_past_comes_from() {
    use gputune::ui::model::EarlierHistory;
    let label_for = |earlier: Option<EarlierHistory>| {
        let mut state = training(SimScenario::Rtx4090);
        if let Some(earlier) = earlier {
            state.model.gpus[0].earlier = earlier;
        }
        state.selected_gpu = Some(0);
        harness(state)
    };
    // A simulated card lives only as long as the window: nothing to say.
    let window = label_for(None);
    assert!(window.query_by_label_contains("gputune daemon").is_none());
    let window = label_for(Some(EarlierHistory::NotKept));
    window.get_by_label_contains("Graphs start when this window opened");
    let window = label_for(Some(EarlierHistory::Loading));
    window.get_by_label_contains("Reading the history the gputune daemon kept");
    let window = label_for(Some(EarlierHistory::Loaded {
        samples: 86_400,
        from_ms: Some(1_700_000_000_000),
    }));
    window.get_by_label_contains("Includes 86400 samples the gputune daemon kept");
}

/// A node's text as the accessibility tree has it.
fn text_of(node: &egui_kittest::Node<'_>) -> String {
    use egui_kittest::kittest::NodeT;
    let node = node.accesskit_node();
    node.label().or_else(|| node.value()).unwrap_or_default()
}

/// The detail view of a simulated RTX 4090 at 1280×720, following live data.
fn detail_at_1280x720(samples: usize) -> Harness<'static, Window> {
    let mut state = app_state(
        SimScenario::Rtx4090,
        LoadPattern::Training,
        None,
        samples,
        500,
    );
    state.selected_gpu = Some(0);
    let mut harness = window_harness(state, [1280.0, 720.0]);
    harness.run();
    harness
}

/// A point inside the power graph: below its title, near its right end (the newest
/// readings).
fn inside_the_power_graph(harness: &Harness<'static, Window>) -> eframe::egui::Pos2 {
    let title = harness.get_by_label("Power (W)").rect();
    eframe::egui::pos2(1_180.0, title.bottom() + 60.0)
}

fn wheel(harness: &mut Harness<'static, Window>, modifiers: eframe::egui::Modifiers) {
    harness.event(eframe::egui::Event::MouseWheel {
        unit: eframe::egui::MouseWheelUnit::Line,
        delta: eframe::egui::vec2(0.0, -3.0),
        phase: eframe::egui::TouchPhase::Move,
        source: eframe::egui::MouseWheelSource::Unknown,
        modifiers,
    });
    harness.run();
}

#[test]
fn the_wheel_over_a_graph_scrolls_the_page_and_ctrl_wheel_zooms_time() {
    let mut harness = detail_at_1280x720(240);
    let title_before = harness.get_by_label("Power (W)").rect().top();
    let inside = inside_the_power_graph(&harness);
    harness.hover_at(inside);
    harness.run();
    wheel(&mut harness, eframe::egui::Modifiers::NONE);
    assert!(
        harness.state().state.monitor.is_following(),
        "a plain wheel scrolls the page; the graphs keep following"
    );
    let title_after = harness.get_by_label("Power (W)").rect().top();
    assert!(
        title_after < title_before,
        "the page scrolled: the power graph's title moved up ({title_before} -> {title_after})"
    );

    // Ctrl + wheel over a graph zooms its time axis, which holds the view still there.
    let mut harness = detail_at_1280x720(240);
    let inside = inside_the_power_graph(&harness);
    harness.hover_at(inside);
    harness.run();
    wheel(&mut harness, eframe::egui::Modifiers::COMMAND);
    assert!(
        !harness.state().state.monitor.is_following(),
        "Ctrl + wheel zoomed the time axis, so the graphs stopped following"
    );
}

#[test]
fn hovering_a_graph_reads_every_line_at_the_nearest_sample_and_says_what_the_wheel_does() {
    let mut harness = detail_at_1280x720(240);
    let inside = inside_the_power_graph(&harness);
    harness.hover_at(inside);
    harness.run();
    // Both lines of the power graph, whichever is drawn on top, with their units.
    let tooltip = harness.get_by_label_contains("Enforced limit: 450 W");
    let text = text_of(&tooltip);
    assert!(text.contains("\nPower draw: "), "{text}");
    assert!(text.contains("Ctrl + wheel zooms time"), "{text}");
    // The time of a sample the window holds, with seconds.
    let gpu = &harness.state().state.model.gpus[0];
    let sample_times: Vec<String> = (0..gpu.history.len())
        .filter_map(|index| gpu.history.time_ms(index))
        .map(|time_ms| gputune_formats::units::local_time(time_ms, "%H:%M:%S"))
        .collect();
    assert!(
        sample_times
            .iter()
            .any(|time| text.starts_with(time.as_str())),
        "{text}"
    );
}

#[test]
fn hovering_a_setting_mark_says_when_what_and_who() {
    let mut state = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 240, 500);
    let latest_ms = state.model.gpus[0]
        .history
        .last_time_ms()
        .unwrap_or_default();
    let Some(mut tuning) = state.model.gpus[0].tuning.clone() else {
        panic!("the engine told the window what the card runs")
    };
    // Ten seconds before the newest reading.
    tuning.last_change = Some(gputune_formats::tuning::ChangeNote {
        at_ms: latest_ms - 10_000,
        by: "gputune apply (pid 77, user ana)".to_string(),
        what: "power limit 315 W".to_string(),
    });
    state.take_event(LinkEvent::Tuning(Box::new(tuning)), latest_ms);
    state.selected_gpu = Some(0);
    state.monitor.set_window(TimeWindow::OneMinute);
    state.monitor.pause(latest_ms + 20_000);
    let mut harness = window_harness(state, [1280.0, 720.0]);
    harness.run();
    // The mark is somewhere across the graph: sweep the pointer until the hover names it.
    let title = harness.get_by_label("Power (W)").rect();
    let found = (0..600).step_by(3).find_map(|dx| {
        harness.hover_at(eframe::egui::pos2(
            title.left() + 60.0 + dx as f32,
            title.bottom() + 60.0,
        ));
        harness.run();
        harness
            .query_by_label_contains("Setting changed at ")
            .map(|node| text_of(&node))
    });
    let Some(text) = found else {
        panic!("no hover over the power graph names the setting change")
    };
    let when = gputune_formats::units::local_time(latest_ms - 10_000, "%H:%M:%S");
    assert!(
        text.contains(&format!(
            "Setting changed at {when}: power limit 315 W (by gputune apply (pid 77, user ana))"
        )),
        "{text}"
    );
}

/// What hovering the power graph says at every third pixel across it, at the 1-minute view
/// of samples 500 ms apart (about ten pixel columns between samples).
fn hover_across_the_power_graph_at_one_minute(state: AppState) -> Vec<String> {
    let mut state = state;
    let latest_ms = state.model.gpus[0]
        .history
        .last_time_ms()
        .unwrap_or_default();
    state.selected_gpu = Some(0);
    state.monitor.set_window(TimeWindow::OneMinute);
    state.monitor.pause(latest_ms);
    let mut harness = window_harness(state, [1280.0, 720.0]);
    harness.run();
    let title = harness.get_by_label("Power (W)").rect();
    // From just right of the y axis to just left of the newest reading.
    (0..1_100)
        .step_by(3)
        .map(|dx| {
            harness.hover_at(eframe::egui::pos2(
                title.left() + 70.0 + dx as f32,
                title.bottom() + 60.0,
            ));
            harness.run();
            harness
                .query_by_label_contains("Wheel scrolls the page")
                .map(|node| text_of(&node))
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn hovering_at_the_one_minute_view_reads_a_sample_wherever_a_line_is_drawn() {
    let hovers = hover_across_the_power_graph_at_one_minute(app_state(
        SimScenario::Rtx4090,
        LoadPattern::Training,
        None,
        240,
        500,
    ));
    assert!(hovers.len() > 300);
    let empty: Vec<&String> = hovers
        .iter()
        .filter(|text| !text.contains("Power draw: "))
        .collect();
    assert!(
        empty.is_empty(),
        "{} of {} hovers over drawn data read nothing, e.g. {:?}",
        empty.len(),
        hovers.len(),
        empty.first()
    );

    // Ten seconds without a reading is a gap in the line: the hover says so there, and
    // nowhere else.
    let mut state = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 240, 500);
    let history = &state.model.gpus[0].history;
    let latest_ms = history.last_time_ms().unwrap_or_default();
    let gap = latest_ms - 30_000..latest_ms - 20_000;
    let mut gapped =
        gputune_core::telemetry::history::GpuHistory::with_capacity(history.capacity());
    for row in (0..history.len()).filter_map(|index| history.row(index)) {
        if !gap.contains(&row.time_ms) {
            gapped.push_row(&row);
        }
    }
    state.model.gpus[0].history = gapped;
    // The samples either side are 500 ms from its ends: a second of slack each way.
    let in_the_gap: Vec<String> = (gap.start / 1_000 - 1..=gap.end / 1_000 + 1)
        .map(|second| gputune_formats::units::local_time(second * 1_000, "%H:%M:%S"))
        .collect();
    let hovers = hover_across_the_power_graph_at_one_minute(state);
    let no_reading: Vec<&String> = hovers
        .iter()
        .filter(|text| text.contains("No reading here"))
        .collect();
    assert!(no_reading.len() > 20, "the gap reads as no reading");
    for text in no_reading {
        assert!(
            in_the_gap
                .iter()
                .any(|time| text.starts_with(time.as_str())),
            "\"No reading here\" outside the gap: {text}"
        );
    }
}

#[test]
fn a_scans_twenty_changes_read_as_one_group_in_an_hours_view() {
    let mut state = app_state(
        SimScenario::Rtx4090,
        LoadPattern::Training,
        None,
        3_600,
        1_000,
    );
    let latest_ms = state.model.gpus[0]
        .history
        .last_time_ms()
        .unwrap_or_default();
    let scan = "gputune stability --scan (pid 4242, user ana)";
    let scan_started_ms = latest_ms - 40 * 60_000;
    state.model.gpus[0].changes = (0..20)
        .map(|step| gputune_formats::tuning::ChangeNote {
            at_ms: scan_started_ms + step * 60_000,
            by: scan.to_string(),
            what: format!("GPU clock offset {:+} MHz", 15 * step),
        })
        .collect();
    state.selected_gpu = Some(0);
    state.monitor.set_window(TimeWindow::OneHour);
    state.monitor.pause(latest_ms);
    let mut harness = window_harness(state, [1120.0, 720.0]);
    harness.run();
    // The line over the graphs: one entry, how many, by whom, from what to what.
    let line = text_of(&harness.get_by_label_contains("Settings changed: "));
    assert!(
        line.contains(&format!(
            "20 changes ({scan}): GPU clock offset +0 MHz … GPU clock offset +285 MHz"
        )),
        "{line}"
    );
    assert_eq!(line.matches("GPU clock offset").count(), 2, "{line}");
    // Hovering the group lists its changes.
    let title = harness.get_by_label("Power (W)").rect();
    let found = (0..1_000).step_by(4).find_map(|dx| {
        harness.hover_at(eframe::egui::pos2(
            title.left() + 70.0 + dx as f32,
            title.bottom() + 60.0,
        ));
        harness.run();
        harness
            .query_by_label_contains("20 setting changes from ")
            .map(|node| text_of(&node))
    });
    let Some(hover) = found else {
        panic!("no hover over the power graph names the group")
    };
    assert!(hover.contains(&format!("({scan}):")), "{hover}");
    assert!(hover.contains(" GPU clock offset +15 MHz\n"), "{hover}");
    assert!(hover.contains("… and 8 more"), "{hover}");

    // Ten minutes of the scan: each step a minute (over 100 pixel columns) apart, each its own.
    let state = &mut harness.state_mut().state;
    state.monitor.set_window(TimeWindow::TenMinutes);
    state.monitor.pause(scan_started_ms + 19 * 60_000 + 30_000);
    harness.run();
    let line = text_of(&harness.get_by_label_contains("Settings changed: "));
    assert!(!line.contains(" changes ("), "{line}");
    assert!(
        line.contains(&format!("GPU clock offset +285 MHz ({scan})")),
        "{line}"
    );
}

#[test]
fn a_pause_is_not_remembered_by_the_next_run() {
    let mut state = training(SimScenario::Rtx4090);
    state.selected_gpu = Some(0);
    state.monitor.set_window(TimeWindow::OneHour);
    state.monitor.pause(common_ui::START_MS);
    let (stored, restored) = through_eframe_storage(&state.remembered());
    let next_run = AppState::new(WindowModel::with_history_capacity(10), restored);
    assert_eq!(
        next_run.monitor.window,
        TimeWindow::OneHour,
        "the window is kept"
    );
    assert!(
        next_run.monitor.is_following(),
        "the next run follows live data: {stored}"
    );
}

/// eframe's storage in memory: the value `save` hands it, as text and as the next run reads it.
fn through_eframe_storage(remembered: &RememberedWindow) -> (String, RememberedWindow) {
    #[derive(Default)]
    struct InMemory(std::collections::HashMap<String, String>);
    impl eframe::Storage for InMemory {
        fn get_string(&self, key: &str) -> Option<String> {
            self.0.get(key).cloned()
        }
        fn set_string(&mut self, key: &str, value: String) {
            self.0.insert(key.to_string(), value);
        }
        fn remove_string(&mut self, key: &str) {
            self.0.remove(key);
        }
        fn flush(&mut self) {}
    }
    use eframe::Storage as _;
    let mut storage = InMemory::default();
    eframe::set_value(&mut storage, "gputune-window", remembered);
    let stored = storage.get_string("gputune-window").unwrap_or_default();
    let restored = eframe::get_value(&storage, "gputune-window");
    assert!(restored.is_some(), "eframe could not read back {stored}");
    (stored, restored.unwrap_or_default())
}

#[test]
fn a_gpu_with_no_reading_yet_shows_sane_axes() {
    // Connected, no sample yet: the remembered GPU opens at once.
    let mut harness = detail_at_1280x720(0);
    harness.get_by_label("Waiting for the first reading…");
    harness.get_by_label("Power (W)");
    // The time axis ends when the window heard from the service (not at 1970, and not a
    // span of nothing, which egui_plot refuses): hovering reads a time in the last 10 min.
    harness.hover_at(inside_the_power_graph(&harness));
    harness.run();
    let hovered = harness.get_by_label_contains("No reading here");
    let text = text_of(&hovered);
    let minutes_in_view: Vec<String> = (0..=10)
        .map(|minute| {
            gputune_formats::units::local_time(common_ui::START_MS - minute * 60_000, "%H:%M")
        })
        .collect();
    assert!(
        minutes_in_view
            .iter()
            .any(|minute| text.starts_with(minute.as_str())),
        "{text}"
    );
}

#[test]
fn hovering_a_card_in_the_overview_says_it_opens_the_graphs() {
    let mut harness = harness(training(SimScenario::EightRtx4090));
    // Over a card's readings, not its title.
    let temperature = harness
        .query_all_by_label("Temperature")
        .nth(2)
        .map(|node| node.rect().center())
        .unwrap_or_else(|| panic!("GPU 2's temperature row"));
    harness.hover_at(temperature);
    // A tooltip shows once the pointer rests (egui waits half a second of its time).
    for _ in 0..60 {
        harness.step();
    }
    assert!(
        harness
            .query_all_by_label(gputune::ui::monitor::overview::CARD_HINT)
            .next()
            .is_some(),
        "the hint shows over the card"
    );
}
