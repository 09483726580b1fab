//! The Tune tab's "Check stability" view as a user drives it: the inputs become the check or
//! the scan the link runs, a running check shows where it stands and can be stopped, a
//! finished one shows its verdict, a finished scan its steps and what it saves, and saves its
//! result as a profile; a card without clock offsets says there is no undervolt to find.

use common_ui::{Window, app_state, window_harness};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::common_ui;
use gputune::ui::app::{AppCommand, TuneView};
use gputune::ui::tune::stability_panel::StabilityAction;
use gputune_core::device::sim::{LoadPattern, SimScenario};
use gputune_core::link::LinkEvent;
use gputune_core::link::stability::{StabilityKind, StabilityView};
use gputune_core::stability::check::CheckProgress;
use gputune_formats::reports::scan::{ScanOptions, ScanOutcome, ScanStep};
use gputune_formats::reports::stability::LoadShape;
use gputune_formats::reports::stability::{Checked, Prepared};
use gputune_formats::reports::stability::{Ending, Finding, RunResult, Tally};
use gputune_formats::reports::stability_watched::Watched;
use gputune_formats::tuning::{ClockLockInForce, Hold};
use gputune_formats::tuning::{GpuTuning, Holder, SessionPurpose};
use gputune_formats::window::Tab;
use gputune_formats::{profile::Verdict, reports::stability::CheckReport};

fn harness(scenario: SimScenario) -> Harness<'static, Window> {
    let mut state = app_state(scenario, LoadPattern::Training, None, 5, 500);
    state.tab = Tab::Tune;
    state.tune_view = TuneView::Stability;
    window_harness(state, [1280.0, 900.0])
}

fn actions(harness: &Harness<'static, Window>) -> Vec<StabilityAction> {
    harness
        .state()
        .commands
        .iter()
        .filter_map(|command| match command {
            AppCommand::Stability(action) => Some(action.clone()),
            _ => None,
        })
        .collect()
}

fn show(harness: &mut Harness<'static, Window>, view: StabilityView) {
    harness
        .state_mut()
        .state
        .take_event(LinkEvent::Stability(Box::new(view)), 0);
    harness.run();
}

fn view() -> StabilityView {
    StabilityView {
        gpu_index: 0,
        scanning: false,
        running: true,
        progress: None,
        scan_progress: None,
        scan_steps: Vec::new(),
        scan_stock: None,
        report: None,
        scan_outcome: None,
    }
}

fn tally(wrong: u64) -> Tally {
    Tally {
        gemm: Checked {
            results: 2_684_354_560,
            wrong,
            flop: 21.9e12,
            bytes: 0,
            elapsed_s: 0.14,
        },
        fma: Checked {
            results: 8_388_608,
            ..Checked::default()
        },
        vram: Checked {
            results: 5_905_580_032,
            bytes: 47_244_640_256,
            elapsed_s: 0.05,
            ..Checked::default()
        },
        vram_patterns: 7,
    }
}

fn report(ending: Ending) -> CheckReport {
    let mut watched = Watched::default();
    watched.take(&gputune_formats::card::Telemetry {
        sampled_at_ms: 0,
        sm_clock_mhz: Some(2745),
        temperature_c: Some(71),
        power_draw_mw: Some(441_000),
        power_limit_mw: Some(450_000),
        ..gputune_formats::card::Telemetry::default()
    });
    CheckReport {
        gpu_index: 0,
        gpu_uuid: "GPU-1".to_string(),
        gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
        settings: "+250 MHz offset / 2520 MHz lock".to_string(),
        pattern: LoadShape::Both,
        duration_asked_s: 600.0,
        verdict: Verdict::of(&ending),
        result: RunResult {
            ending,
            ran_s: 192.0,
            tally: tally(14),
            watched,
            prepared: Some(Prepared {
                device_name: "NVIDIA GeForce RTX 4090".to_string(),
                runtime: "simulated".to_string(),
                vram_tested_bytes: 22 << 30,
            }),
        },
        gemm_tflops: Some(156.4),
        vram_gib_per_s: Some(880.0),
        reached_power_limit: true,
        put_back: vec!["Put back GPU 0 (GPU clock offset 0 MHz).".to_string()],
        put_back_complete: true,
        ended_at_ms: 0,
        driver_version: None,
        gputune_version: "0.1.0".to_string(),
    }
}

#[test]
fn the_inputs_become_the_check_or_the_scan_the_link_runs() {
    let mut harness = harness(SimScenario::Rtx4090);
    harness.get_by_label_contains("The card runs: stock settings");
    harness.get_by_label("Check stability").click();
    harness.run();
    harness.get_by_label("Find my undervolt").click();
    harness.run();
    let actions = actions(&harness);
    let [StabilityAction::Start(check), StabilityAction::Start(scan)] = actions.as_slice() else {
        panic!("{actions:?}");
    };
    assert_eq!(
        check.kind,
        StabilityKind::Check {
            duration_s: 600.0,
            shape: LoadShape::Both
        }
    );
    assert_eq!(check.gpu_index, 0);
    // The scan locks the card's rated boost clock unless told otherwise.
    assert_eq!(
        scan.kind,
        StabilityKind::Scan {
            lock_mhz: Some(2520),
            step_mhz: 15,
            step_s: 60.0,
            margin_steps: 2,
            confirm_s: 600.0,
        }
    );
    harness.get_by_label_contains("at most");
}

#[test]
fn a_running_check_shows_where_it_stands_and_can_be_stopped() {
    let mut harness = harness(SimScenario::Rtx4090);
    show(
        &mut harness,
        StabilityView {
            progress: Some(CheckProgress {
                gpu_index: 0,
                elapsed_s: 192.0,
                duration_s: 600.0,
                activity: "GEMM pulsed at 40 %".to_string(),
                // Every superscript digit the count can use must have a glyph.
                results: 4_567_890_123_456_789_012,
                wrong: 0,
                readings: "2415–2745 MHz, 71 °C peak".to_string(),
            }),
            ..view()
        },
    );
    harness.get_by_label_contains("3 min 12 s of 10 min: GEMM pulsed at 40 %");
    harness.get_by_label_contains("4.6 × 10¹⁸ results checked, 0 wrong");
    harness.get_by_label("Stop").click();
    harness.run();
    assert_eq!(
        actions(&harness),
        vec![StabilityAction::Stop { gpu_index: 0 }]
    );
    // While it runs, nothing else starts.
    harness.get_by_label("Check stability").click();
    harness.run();
    assert_eq!(actions(&harness).len(), 1);
}

#[test]
fn a_finished_check_shows_its_verdict_and_what_was_put_back() {
    let mut harness = harness(SimScenario::Rtx4090);
    show(
        &mut harness,
        StabilityView {
            running: false,
            report: Some(report(Ending::Unstable {
                finding: Finding::WrongResults {
                    part: "GEMM".to_string(),
                    wrong: 14,
                    clock_mhz: Some(2745),
                },
            })),
            ..view()
        },
    );
    harness.get_by_label_contains(
        "Unstable after 3 min 12 s at +250 MHz offset / 2520 MHz lock: 14 wrong GEMM results at 2745 MHz; put back.",
    );
    harness.get_by_label_contains(
        "GEMM 156.4 TFLOP/s (bf16, fp32 accumulate; simulated), VRAM 880 GiB/s",
    );
    harness.get_by_label_contains("Put back GPU 0");
}

#[test]
fn a_short_checks_stable_verdict_says_it_is_short_and_is_not_the_thorough_green() {
    let mut harness = harness(SimScenario::Rtx4090);
    let mut short = report(Ending::Completed);
    short.duration_asked_s = 30.0;
    short.result.ran_s = 30.0;
    show(
        &mut harness,
        StabilityView {
            running: false,
            report: Some(short),
            ..view()
        },
    );
    harness.get_by_label_contains(
        "This was a short check (30 s): it finds only gross instability; a thorough one runs 10 min.",
    );
    // A thorough check reads without the caveat.
    show(
        &mut harness,
        StabilityView {
            running: false,
            report: Some(report(Ending::Completed)),
            ..view()
        },
    );
    assert_eq!(
        harness.query_all_by_label_contains("short check").count(),
        0,
        "a 10 min check is not called short"
    );
}

fn step(offset_mhz: Option<i32>, power_w: f64, finding: Option<&str>) -> ScanStep {
    ScanStep {
        offset_mhz,
        verdict: if finding.is_some() {
            Verdict::Unstable
        } else {
            Verdict::Stable
        },
        finding: finding.map(str::to_string),
        clock_min_mhz: Some(2520),
        clock_max_mhz: Some(if offset_mhz.is_none() { 2745 } else { 2520 }),
        power_mean_w: Some(power_w),
        temperature_peak_c: Some(70),
        wrong: u64::from(finding.is_some()) * 3,
        results: 11_000_000_000,
        gemm_tflops: Some(150.0),
        joules_per_tflop: Some(power_w / 150.0),
        ran_s: 60.0,
    }
}

#[test]
fn a_finished_scan_shows_its_steps_and_savings_and_saves_a_profile() {
    let mut harness = harness(SimScenario::Rtx4090);
    let stock = step(None, 431.0, None);
    let steps = vec![
        step(Some(0), 402.0, None),
        step(Some(15), 396.0, None),
        step(Some(30), 391.0, None),
        step(Some(45), 388.0, Some("3 wrong GEMM results at 2520 MHz")),
    ];
    let savings = gputune_formats::reports::scan::savings("Against stock", &stock, &steps[0]);
    let outcome = ScanOutcome {
        gpu_index: 0,
        gpu_uuid: "GPU-1".to_string(),
        gpu_name: "NVIDIA GeForce RTX 4090".to_string(),
        options: ScanOptions {
            lock_mhz: 2520,
            step_mhz: 15,
            step_s: 60.0,
            margin_steps: 2,
            confirm_s: 600.0,
            max_offset_mhz: 1000,
        },
        stock: Some(stock),
        steps: steps.clone(),
        first_unstable_mhz: Some(45),
        stable_offset_mhz: Some(0),
        confirmation: Some(report(Ending::Completed)),
        summary: "The largest stable offset at the 2520 MHz lock is +0 MHz (confirmed for 10 min)."
            .to_string(),
        savings: Some(savings),
        put_back: Vec::new(),
        put_back_complete: true,
        ran_s: 900.0,
    };
    show(
        &mut harness,
        StabilityView {
            scanning: true,
            running: false,
            scan_steps: steps,
            scan_outcome: Some(outcome),
            ..view()
        },
    );
    harness.get_by_label_contains("The largest stable offset at the 2520 MHz lock is +0 MHz");
    harness.get_by_label_contains("Against stock: power 431 to 402 W (-7 %)");
    harness.get_by_label_contains("unstable: 3 wrong GEMM results at 2520 MHz");
    harness.get_by_label("Save").click();
    harness.run();
    assert_eq!(
        actions(&harness),
        vec![StabilityAction::SaveScanProfile {
            gpu_index: 0,
            name: "Undervolt".to_string()
        }]
    );
}

/// A scan's outcome from a real run on the fake library (tests/data/stability/).
fn recorded_scan() -> ScanOutcome {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/stability/scan-rtx4090.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn a_finished_scan_scrolls_to_save_as_profile_in_a_720_px_window() {
    for size in [[1120.0, 720.0], [1280.0, 720.0]] {
        let mut state = app_state(SimScenario::Rtx4090, LoadPattern::Training, None, 5, 500);
        state.tab = Tab::Tune;
        state.tune_view = TuneView::Stability;
        let mut harness = window_harness(state, size);
        let scan = recorded_scan();
        show(
            &mut harness,
            StabilityView {
                scanning: true,
                running: false,
                scan_steps: scan.steps.clone(),
                scan_outcome: Some(scan),
                ..view()
            },
        );
        let below = harness.get_by_label("Save").rect().bottom();
        assert!(below > size[1], "the result runs past the window: {below}");
        // The user scrolls the view with the wheel, as on a laptop screen.
        harness.hover_at(eframe::egui::pos2(size[0] / 2.0, size[1] / 2.0));
        harness.run();
        for _ in 0..30 {
            harness.event(eframe::egui::Event::MouseWheel {
                unit: eframe::egui::MouseWheelUnit::Line,
                delta: eframe::egui::vec2(0.0, -3.0),
                phase: eframe::egui::TouchPhase::Move,
                source: eframe::egui::MouseWheelSource::Unknown,
                modifiers: eframe::egui::Modifiers::NONE,
            });
            harness.run();
        }
        let save = harness.get_by_label("Save");
        assert!(
            save.rect().bottom() <= size[1],
            "{size:?}: Save is inside the window after scrolling: {:?}",
            save.rect()
        );
        harness.get_by_label("Save as profile");
        save.click();
        harness.run();
        assert_eq!(
            actions(&harness),
            vec![StabilityAction::SaveScanProfile {
                gpu_index: 0,
                name: "Undervolt".to_string()
            }],
            "{size:?}"
        );
    }
}

#[test]
fn a_scan_step_that_was_stopped_reads_stopped_not_unstable() {
    let mut harness = harness(SimScenario::Rtx4090);
    let mut stopped = step(Some(15), 396.0, Some("stopped from the window"));
    stopped.verdict = Verdict::Stopped;
    show(
        &mut harness,
        StabilityView {
            scanning: true,
            running: true,
            scan_steps: vec![step(Some(0), 402.0, None), stopped],
            ..view()
        },
    );
    harness.get_by_label("stopped: stopped from the window");
    assert!(harness.query_by_label_contains("unstable").is_none());
}

#[test]
fn a_card_without_clock_offsets_has_no_undervolt_to_find() {
    let mut harness = harness(SimScenario::DatacenterFanless);
    harness.get_by_label_contains("takes no graphics clock offset");
    assert!(harness.query_by_label("Find my undervolt").is_none());
    harness.get_by_label("Check stability").click();
    harness.run();
    assert_eq!(actions(&harness).len(), 1);
}

fn set_tuning(harness: &mut Harness<'static, Window>, change: impl FnOnce(&mut GpuTuning)) {
    let gpu = &mut harness.state_mut().state.model.gpus[0];
    let tuning = gpu.tuning.as_mut().expect("the card's tuning is known");
    change(tuning);
    harness.run();
}

#[test]
fn unstable_at_settings_the_card_still_runs_offers_put_back() {
    let mut harness = harness(SimScenario::Rtx4090);
    set_tuning(&mut harness, |tuning| {
        tuning.in_force.gpu_clock_offset_mhz = Some(300);
        tuning.in_force.gpu_clock_lock = ClockLockInForce::Locked {
            min_mhz: 210,
            max_mhz: 2520,
        };
    });
    let mut unstable = report(Ending::Unstable {
        finding: Finding::WrongResults {
            part: "GEMM".to_string(),
            wrong: 14,
            clock_mhz: Some(2745),
        },
    });
    // The check changed nothing: nothing was put back.
    unstable.put_back.clear();
    show(
        &mut harness,
        StabilityView {
            running: false,
            report: Some(unstable),
            ..view()
        },
    );
    harness.get_by_label_contains("The card still runs +300 MHz offset");
    harness.get_by_label("Put back").click();
    harness.run();
    assert_eq!(
        actions(&harness),
        vec![StabilityAction::PutBack { gpu_index: 0 }]
    );
    // Once the card is back at stock, there is nothing to put back.
    set_tuning(&mut harness, |tuning| {
        tuning.in_force.gpu_clock_offset_mhz = Some(0);
        tuning.in_force.gpu_clock_lock = ClockLockInForce::Unlocked;
    });
    assert!(harness.query_by_label("Put back").is_none());
}

#[test]
fn another_clients_scan_is_shown_with_its_holder_and_nothing_else_starts() {
    let mut harness = harness(SimScenario::Rtx4090);
    set_tuning(&mut harness, |tuning| {
        tuning.holders.push(Holder {
            session: 9,
            controls: vec![Hold::GpuClockLock, Hold::GpuClockOffset],
            purpose: SessionPurpose::Scan,
            by: "gputune scan --step-s 30 (pid 77, user bob)".to_string(),
            client: 5,
            since_ms: gputune_core::clock::wall_clock_ms(),
            trial_ends_at_ms: None,
            job_pid: None,
            energy_at_start_mj: None,
            job: None,
        });
    });
    harness.get_by_label_contains(
        "GPU 0 is busy: an undervolt scan of gputune scan --step-s 30 (pid 77, user bob) since",
    );
    harness.get_by_label_contains("Check and Find are off until it ends.");
    harness.get_by_label("Check stability").click();
    harness.run();
    harness.get_by_label("Find my undervolt").click();
    harness.run();
    assert_eq!(actions(&harness), Vec::new());
    // When it ends, both are back.
    set_tuning(&mut harness, |tuning| tuning.holders.clear());
    harness.get_by_label("Check stability").click();
    harness.run();
    assert_eq!(actions(&harness).len(), 1);
}
