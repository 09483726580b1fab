//! One span of checked work (`CheckRun`) on the simulated device, as the CLI and the window run
//! it: a clean check runs every part; a wrong value injected into the results ends it, counted
//! exactly, in the part it was in; a CUDA-style fault is instability; a kernel that never
//! returns ends it past its deadline. Each prints how long the fault took to be seen
//! (docs/stability.md records the figures; nothing here asserts a time).

use std::time::{Duration, Instant};

use gputune_core::device::Backend;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_core::stability::rounds::CheckOptions;
use gputune_core::stability::run::{CheckRun, SettingsSeen};
use gputune_core::stability::simulated::{SimFaults, SimulatedDevice};
use gputune_core::stability::worker::ComputeWorker;
use gputune_formats::card::Telemetry;
use gputune_formats::reports::stability::LoadShape;
use gputune_formats::reports::stability::{Ending, Finding, RunResult};

/// Long enough that only a fault ends the check.
const LONG_S: f64 = 60.0;

fn start(duration_s: f64, shape: LoadShape) -> (CheckRun, SimFaults) {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::Rtx4090,
        load: LoadPattern::Training,
    });
    let identity = backend
        .identity(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let device = SimulatedDevice::for_gpu(&identity).expect("the simulator's card");
    let faults = device.faults();
    let worker =
        ComputeWorker::start(Box::new(device), "0").unwrap_or_else(|error| panic!("{error}"));
    let options = CheckOptions::new(duration_s, shape).unwrap_or_else(|error| panic!("{error}"));
    let mut run = CheckRun::start(worker, options, None);
    // Stock settings at a boost clock, warm: nothing goes wrong by itself.
    run.take_settings(SettingsSeen {
        gpu_clock_offset_mhz: Some(0),
        memory_clock_offset_mhz: Some(0),
        locked_max_mhz: None,
    });
    run.take_reading(&Telemetry {
        sampled_at_ms: 1,
        sm_clock_mhz: Some(2700),
        temperature_c: Some(70),
        power_draw_mw: Some(440_000),
        power_limit_mw: Some(450_000),
        ..Telemetry::default()
    });
    (run, faults)
}

/// Ticks the run until `ready` says so (then calls `then`), and on to its end.
fn drive(
    run: &mut CheckRun,
    mut ready: impl FnMut(&CheckRun) -> bool,
    then: impl FnOnce(),
) -> (RunResult, Option<Instant>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut then = Some(then);
    let mut fired_at = None;
    loop {
        if let Some(result) = run.tick() {
            return (result.clone(), fired_at);
        }
        if then.is_some() && ready(run) {
            if let Some(then) = then.take() {
                then();
            }
            fired_at = Some(Instant::now());
        }
        assert!(Instant::now() < deadline, "the check did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn activity_is(text: &'static str) -> impl FnMut(&CheckRun) -> bool {
    move |run: &CheckRun| run.activity().contains(text) && run.elapsed_s() > 0.3
}

#[test]
fn a_clean_check_runs_every_part_and_completes() {
    let (mut run, _) = start(2.0, LoadShape::Both);
    let (result, _) = drive(&mut run, |_| false, || {});
    assert_eq!(result.ending, Ending::Completed, "{result:?}");
    let tally = result.tally;
    assert!(tally.gemm.results > 0 && tally.fma.results > 0 && tally.vram.results > 0);
    assert_eq!(tally.wrong(), 0);
    assert_eq!(tally.vram_patterns, 7, "one pass of every pattern");
    assert!(result.ran_s >= 2.0, "{}", result.ran_s);
    println!(
        "simulated RTX 4090: GEMM {:.1} TFLOP/s, VRAM {:.0} GiB/s",
        tally.gemm_tflops().unwrap_or(0.0),
        tally.vram_gib_per_s().unwrap_or(0.0)
    );
}

#[test]
fn wrong_values_injected_in_each_part_end_the_check_counted_exactly() {
    type Inject = fn(&SimFaults);
    let cases: [(&str, &str, Inject, u64); 3] = [
        ("full GEMM", "GEMM", |faults| faults.wrong_gemm_values(3), 3),
        ("FMA", "FMA-chain", |faults| faults.wrong_fma_values(2), 2),
        ("VRAM", "VRAM", |faults| faults.wrong_vram_words(5), 5),
    ];
    for (activity, part_name, inject, count) in cases {
        // The FMA and VRAM parts close each round: a short check reaches them soon.
        let duration_s = if activity == "full GEMM" { LONG_S } else { 3.0 };
        let (mut run, faults) = start(duration_s, LoadShape::Full);
        let (result, fired_at) = drive(&mut run, activity_is(activity), || inject(&faults));
        let Ending::Unstable {
            finding: Finding::WrongResults { part, wrong, .. },
        } = &result.ending
        else {
            panic!("{activity}: {:?}", result.ending);
        };
        assert_eq!((part.as_str(), *wrong), (part_name, count), "{activity}");
        assert_eq!(
            result.tally.wrong(),
            count,
            "{activity}: counted once, exactly"
        );
        let seen_after = fired_at.map(|at| at.elapsed());
        println!("{activity}: {count} wrong values injected, seen after {seen_after:?}");
    }
}

#[test]
fn a_fault_on_the_card_is_instability() {
    let (mut run, faults) = start(LONG_S, LoadShape::Full);
    let (result, fired_at) = drive(&mut run, activity_is("full GEMM"), || {
        faults.fail_next_call()
    });
    assert!(
        matches!(
            &result.ending,
            Ending::Unstable {
                finding: Finding::Fault { .. }
            }
        ),
        "{:?}",
        result.ending
    );
    println!(
        "a CUDA-style fault, seen after {:?}",
        fired_at.map(|at| at.elapsed())
    );
}

#[test]
fn a_kernel_that_never_returns_ends_the_check_past_its_deadline() {
    let (mut run, faults) = start(LONG_S, LoadShape::Full);
    let hang = faults.clone();
    let (result, fired_at) = drive(&mut run, activity_is("full GEMM"), move || {
        hang.hang_next_call()
    });
    faults.release();
    let Ending::Unstable {
        finding: Finding::Hung { waited_s },
    } = result.ending
    else {
        panic!("{:?}", result.ending);
    };
    assert!(
        waited_s >= 10.0,
        "the shortest deadline is 10 s: {waited_s}"
    );
    println!(
        "a hung kernel, seen after {:?} (waited {waited_s:.1} s)",
        fired_at.map(|at| at.elapsed())
    );
}

#[test]
fn peak_power_is_taken_only_from_readings_under_the_limit_in_force() {
    use gputune_formats::reports::stability_watched::Watched;
    let reading = |at_ms: u64, power_w: u32, limit_w: u32| Telemetry {
        sampled_at_ms: at_ms,
        sm_clock_mhz: Some(2520),
        power_draw_mw: Some(power_w * 1000),
        power_limit_mw: Some(limit_w * 1000),
        ..Telemetry::default()
    };
    let mut watched = Watched::default();
    // Sampled before the profile's 350 W limit was in force, delivered after.
    watched.take(&reading(0, 449, 450));
    watched.take(&reading(500, 341, 350));
    watched.take(&reading(1000, 339, 350));
    assert_eq!(watched.power_peak_w, Some(341.0));
    assert_eq!(watched.power_mean_w, Some(340.0));
    let summary = watched.summary();
    assert!(
        summary.contains("341 W peak of a 350 W limit") && !summary.contains("449"),
        "{summary}"
    );
}
