//! A sweep as the window shows it, measured on the simulator in simulated time (no waiting):
//! each setting written through the validation gate, the card read once a second, and the
//! progress a compute-bound job would print (its speed following the SM clock), all through
//! the sweep's own measurement and objective code.

use gputune_core::clock::{Clock, ManualClock};
use gputune_core::device::Backend;
use gputune_core::device::gate::validate;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_core::job::progress::{ProgressReading, ProgressValue};
use gputune_core::sweep::measure::StepMeasurement;
use gputune_core::sweep::objective::{flag_noisy_steps, recommend_in};
use gputune_core::sweep::runner::{SweepPhase, SweepTiming, SweepView};
use gputune_core::sweep::steps::{SweepSpec, sweep_steps};
use gputune_formats::reports::sweep::Objective;
use gputune_formats::reports::sweep::{SweepEnd, SweepOutcome};
use gputune_formats::reports::sweep_step::{MeasuredBy, StepResult};
use gputune_formats::reports::sweep_step::{ProgressSource, WorkUnit};
use gputune_formats::tuning::GpuInfo;

/// Steps per second of the simulated job at 2520 MHz.
const RATE_AT_REFERENCE: f64 = 3.2;

/// A sweep of `power_limits_pct` (the first repeated at the end) with 90 s steps, of which
/// `measured_steps` have ended; the next one is `elapsed_s` in when the sweep is not over.
pub fn simulated_sweep(
    power_limits_pct: &[f64],
    measured_steps: usize,
    elapsed_s: u64,
) -> SweepView {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let mut backend = SimBackend::with_clock(
        &SimOptions {
            scenario: SimScenario::Rtx4090,
            load: LoadPattern::Training,
        },
        Box::new(clock.clone()),
    );
    let gpu = GpuInfo {
        identity: backend
            .identity(0)
            .expect("the simulated card has an identity"),
        constraints: backend
            .constraints(0)
            .expect("the simulated card has limits"),
    };
    let plan = sweep_steps(
        &SweepSpec {
            power_limits_pct: power_limits_pct.to_vec(),
            clock_caps_mhz: Vec::new(),
            undervolt_offset_mhz: None,
        },
        &gpu.constraints,
    )
    .expect("a plan");
    let timing = SweepTiming::new(90.0, 20.0, 120.0).expect("timing");
    let by = MeasuredBy::Progress {
        source: ProgressSource::Tqdm,
        unit: WorkUnit::Step,
    };
    // The card warms up under the job before the sweep starts, as a real one would.
    clock.advance_ms(300_000);
    let started_ms = clock.now_ms();
    let mut steps_done = 0.0;
    let mut results = Vec::new();
    let mut live = None;
    let running = measured_steps < plan.len();
    for (index, step) in plan
        .iter()
        .enumerate()
        .take(measured_steps + usize::from(running))
    {
        for setting in &step.settings {
            let setting = validate(&gpu.constraints, *setting).expect("a valid setting");
            backend.apply(0, &setting).expect("the simulator takes it");
        }
        let step_start = clock.now_ms() - started_ms;
        let mut measurement = StepMeasurement::new(step_start + 20_000, 1);
        let seconds = if index < measured_steps {
            90
        } else {
            elapsed_s
        };
        for _ in 0..seconds {
            clock.advance_ms(1_000);
            let reading = backend.telemetry(0).expect("a reading");
            let at_ms = clock.now_ms() - started_ms;
            let clock_mhz = f64::from(reading.sm_clock_mhz.unwrap_or(0));
            steps_done += RATE_AT_REFERENCE * clock_mhz / 2520.0;
            measurement.progress.push(ProgressReading {
                at_ms,
                value: ProgressValue::Count {
                    units_done: steps_done.floor(),
                },
                unit: WorkUnit::Step,
                source: ProgressSource::Tqdm,
            });
            measurement.samples[0].push((at_ms, reading));
        }
        let end_ms = clock.now_ms() - started_ms + 1;
        let result = measurement.result(step, end_ms, &by, &[0]);
        if index < measured_steps {
            results.push(result);
        } else if seconds > 20 {
            live = Some(result);
        }
    }
    let outcome = (!running).then(|| {
        let mut finished: Vec<StepResult> = results.clone();
        flag_noisy_steps(&mut finished);
        results = finished.clone();
        SweepOutcome {
            gpu_index: 0,
            gpu_name: gpu.identity.name.clone(),
            gpu_uuid: gpu.identity.uuid.clone(),
            objective: Objective::default(),
            measured_by: Some(by.clone()),
            recommendation: recommend_in(&finished, Objective::default(), "step"),
            results: finished,
            ended: SweepEnd::Completed,
            restored: vec!["Put back GPU 0 (power limit 450 W).".to_string()],
            restore_complete: true,
            duration_s: 90.0 * plan.len() as f64,
            cards: Vec::new(),
            card_advice: Vec::new(),
        }
    });
    SweepView {
        gpu_index: 0,
        gpu_indices: vec![0],
        phase: if running {
            SweepPhase::Step {
                index: measured_steps,
                measuring: elapsed_s >= 20,
                elapsed_s: elapsed_s as f64,
            }
        } else {
            SweepPhase::Finished
        },
        plan,
        results,
        timing,
        live,
        measured_by: Some(by),
        progress_from: "/home/ana/runs/llama-lora/train.log".to_string(),
        outcome,
    }
}
