//! `gputune plan --measure --json` pinned: a measurement of three runs (one out of memory, one
//! failed), its fit and the plan beside it, and one without `{mb}` that has neither.

use gputune_formats::reports::measure::{
    FitReport, JobReport, JobRun, MeasureReport, PlanComparison, PlanVersusMeasured, RunResult,
};

use super::{golden, json_lines, read_json_lines};

const MIB: u64 = 1024 * 1024;

fn with_fit_and_plan() -> MeasureReport {
    MeasureReport {
        job: JobReport {
            card: Some("NVIDIA GeForce RTX 4090".to_string()),
            gpu_memory_bytes: Some(24_564 * MIB),
            runs: vec![
                JobRun {
                    micro_batch: Some(1),
                    result: RunResult::Measured,
                    peak_bytes: Some(6_144 * MIB),
                    gpu_index: Some(0),
                    steps_read: 20,
                    seconds: 12.5,
                },
                JobRun {
                    micro_batch: Some(2),
                    result: RunResult::Measured,
                    peak_bytes: Some(8_192 * MIB),
                    gpu_index: Some(0),
                    steps_read: 20,
                    seconds: 14.25,
                },
                JobRun {
                    micro_batch: Some(16),
                    result: RunResult::OutOfMemory {
                        because: "its output says CUDA ran out of memory".to_string(),
                    },
                    peak_bytes: Some(24_000 * MIB),
                    gpu_index: Some(0),
                    steps_read: 3,
                    seconds: 6.0,
                },
            ],
            fit: Some(FitReport {
                fixed_bytes: 4_096 * MIB,
                per_sample_bytes: 2_048 * MIB,
                max_micro_batch: 9,
                limited_by_out_of_memory: None,
                predicted_peak_bytes: 22_528 * MIB,
            }),
            no_fit: None,
            confirmed: Some(true),
            summary: "The largest micro-batch that fits the card is 9 (a run at that size ran its steps): 22528 MiB predicted.".to_string(),
            interrupted: false,
        },
        plan: Some(PlanVersusMeasured {
            model: "llama-3-8b".to_string(),
            runs: vec![PlanComparison {
                micro_batch: 1,
                measured_bytes: 6_144 * MIB,
                planned_bytes: 6_451 * MIB,
                difference_pct: 5.0,
            }],
            planned_fixed_bytes: Some(4_300 * MIB),
            planned_per_sample_bytes: Some(2_151 * MIB),
            planned_cuda_context_bytes: 500 * MIB,
            differences: vec![
                "The plan assumed a 500 MiB CUDA context; it differs per card and driver, and the measurement holds this card's.".to_string(),
            ],
        }),
    }
}

fn once_interrupted() -> MeasureReport {
    MeasureReport {
        job: JobReport {
            card: None,
            gpu_memory_bytes: None,
            runs: vec![JobRun {
                micro_batch: None,
                result: RunResult::Failed {
                    because: "interrupted".to_string(),
                },
                peak_bytes: None,
                gpu_index: None,
                steps_read: 0,
                seconds: 1.5,
            }],
            fit: None,
            no_fit: None,
            confirmed: None,
            summary: "The job could not be measured: interrupted.".to_string(),
            interrupted: true,
        },
        plan: None,
    }
}

#[test]
fn a_plan_measure_report_writes_its_bytes_and_reads_back() {
    let reports = vec![with_fit_and_plan(), once_interrupted()];
    golden(
        "reports/plan-measure.jsonl",
        json_lines(&reports).as_bytes(),
    );
    let read: Vec<MeasureReport> = read_json_lines("reports/plan-measure.jsonl");
    assert_eq!(read, reports);
}
