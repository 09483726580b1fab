//! The Plan tab's "Measure my job" end to end: the window's runner (`MeasureRunner`) runs the
//! engine `gputune plan --measure` runs (`plan_measure.rs`) on a thread of its own, on the
//! fake libnvidia-ml loaded in this process; these tests take turns.

use common::FakeMachine;

use crate::common;
use crate::plan_measure::{
    FIXED_MIB, LARGEST_THAT_FITS, MIB, PER_SAMPLE_MIB, assert_nothing_left_running, fake_job,
};

/// The Plan tab's runner (what the window's glue starts for "Measure my job") runs the same
/// engine on its own thread: it starts the example job on the fake library, tells the panel
/// which run is going and its peak so far, and delivers the report.
#[test]
fn the_windows_runner_measures_the_job_off_the_ui_thread_and_delivers_the_report() {
    use gputune::ui::plan::measure_runner::MeasureRunner;
    use gputune::ui::plan::{MeasureNews, MeasureSection, MeasureState};
    use gputune_core::device::{BackendChoice, BackendOptions};
    use gputune_core::measure_job::JobSpec;
    use gputune_formats::reports::measure::RunResult;
    use std::time::{Duration, Instant};

    // This process loads the fake library itself (the runner's own NVML handle).
    let machine = FakeMachine::with_load("rtx4090", "", "idle");
    let mut runner = MeasureRunner::new(BackendOptions {
        choice: BackendChoice::Nvml,
        nvml_library_path: Some(machine.library.clone()),
        ..BackendOptions::default()
    });
    let job = fake_job().display().to_string();
    let section = MeasureSection {
        command: format!("'{job}' --micro-batch {{mb}} --rate 50"),
        steps: 5,
        micro_batches: "2,4".to_string(),
        ..MeasureSection::default()
    };
    let spec: JobSpec = section.spec().expect("the inputs are valid");
    let repaints = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&repaints);
    runner
        .start(spec, move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
        .expect("the runner starts");
    let mut panel = MeasureSection::default();
    let mut news_seen = Vec::new();
    // Generous: two runs of 5 steps at 50 steps a second; a hang fails here, not forever.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !matches!(panel.state, MeasureState::Done(_) | MeasureState::Failed(_)) {
        assert!(Instant::now() < deadline, "no report came: {news_seen:?}");
        for news in runner.drain() {
            news_seen.push(news.clone());
            panel.take(news);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let MeasureState::Done(report) = &panel.state else {
        panic!("the measurement failed: {:?}", panel.state);
    };
    assert_eq!(
        report
            .runs
            .iter()
            .map(|run| (run.micro_batch, run.result.clone(), run.peak_bytes))
            .collect::<Vec<_>>(),
        vec![
            (
                Some(2),
                RunResult::Measured,
                Some((FIXED_MIB + 2 * PER_SAMPLE_MIB) * MIB)
            ),
            (
                Some(4),
                RunResult::Measured,
                Some((FIXED_MIB + 4 * PER_SAMPLE_MIB) * MIB)
            ),
        ]
    );
    let fit = report.fit.as_ref().expect("two sizes ran: a fit");
    assert_eq!(fit.max_micro_batch, LARGEST_THAT_FITS);
    assert_eq!(fit.per_sample_bytes, PER_SAMPLE_MIB * MIB);
    // The panel heard which run was going and its peak as it grew.
    assert!(news_seen.iter().any(|news| matches!(
        news,
        MeasureNews::Starting {
            run: 2,
            runs_planned: 2,
            micro_batch: Some(4)
        }
    )));
    assert!(news_seen.iter().any(|news| matches!(
        news,
        MeasureNews::Progress(progress)
            if progress.run == 1 && progress.peak_bytes == Some((FIXED_MIB + 2 * PER_SAMPLE_MIB) * MIB)
    )));
    assert!(repaints.load(std::sync::atomic::Ordering::SeqCst) >= news_seen.len());
    assert!(!runner.running());
    assert_nothing_left_running(&machine);
}

/// Stop in the window stops the job as Ctrl-C does: the report comes, says it was
/// interrupted, and nothing the job started is left running.
#[test]
fn the_windows_stop_ends_the_job_and_still_delivers_a_report() {
    use gputune::ui::plan::MeasureNews;
    use gputune::ui::plan::measure_runner::MeasureRunner;
    use gputune_core::device::{BackendChoice, BackendOptions};
    use gputune_core::measure_job::JobSpec;
    use std::ffi::OsString;
    use std::time::{Duration, Instant};

    let machine = FakeMachine::with_load("rtx4090", "", "idle");
    let mut runner = MeasureRunner::new(BackendOptions {
        choice: BackendChoice::Nvml,
        nvml_library_path: Some(machine.library.clone()),
        ..BackendOptions::default()
    });
    let command: Vec<OsString> = [
        fake_job().display().to_string().as_str(),
        "--micro-batch",
        "{mb}",
        "--rate",
        "50",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    // 600 s per run: only Stop ends it in time.
    let spec = JobSpec::new(command, &[1, 2], None, Some(600.0), false).expect("valid");
    runner.start(spec, || {}).expect("the runner starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut stopped = false;
    let report = loop {
        assert!(Instant::now() < deadline, "no report came");
        let mut finished = None;
        for news in runner.drain() {
            match news {
                // Stop once the job's memory is seen.
                MeasureNews::Progress(progress) if progress.peak_bytes.is_some() && !stopped => {
                    runner.stop();
                    stopped = true;
                }
                MeasureNews::Finished(result) => finished = Some(result),
                _ => {}
            }
        }
        if let Some(result) = finished {
            break result.expect("a report");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(stopped);
    assert!(report.interrupted);
    assert_eq!(report.runs.len(), 1, "the second size never started");
    assert_nothing_left_running(&machine);
}
