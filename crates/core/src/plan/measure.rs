//! The arithmetic of measuring the user's own job (the first piece of `gputune plan
//! --measure`): the micro-batch placeholder put into the command, and the fit of two measured
//! peaks to a fixed cost plus a cost per sample, giving the largest micro-batch that fits the
//! card. An out-of-memory run is a result: no micro-batch at or above it is recommended.
//! Pure: `crate::measure_job` (the runner) runs the job at each micro-batch, through `crate::job`.

use std::ffi::{OsStr, OsString};

use super::PlanError;

/// What the command line holds where the micro-batch goes.
pub const MICRO_BATCH_PLACEHOLDER: &str = "{mb}";

/// One run of the job at a micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeasuredRun {
    /// It ran its steps; its process's largest GPU memory as NVML showed it.
    Peak { micro_batch: u64, peak_bytes: u64 },
    /// It ran out of GPU memory.
    OutOfMemory { micro_batch: u64 },
}

impl MeasuredRun {
    pub fn micro_batch(self) -> u64 {
        match self {
            MeasuredRun::Peak { micro_batch, .. } | MeasuredRun::OutOfMemory { micro_batch } => {
                micro_batch
            }
        }
    }
}

/// The job's memory as a line through its measured peaks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredFit {
    /// What the job holds whatever its micro-batch: CUDA context, weights, optimizer states.
    pub fixed_bytes: f64,
    pub per_sample_bytes: f64,
    /// The largest micro-batch whose predicted peak is within the card's memory and below
    /// every run that ran out of memory; 0 when not even 1 fits.
    pub max_micro_batch: u64,
    /// The smallest micro-batch that ran out of memory, when it lowered the answer.
    pub limited_by_out_of_memory: Option<u64>,
}

impl MeasuredFit {
    /// The peak the line predicts at `micro_batch`.
    pub fn predicted_bytes(&self, micro_batch: u64) -> f64 {
        self.fixed_bytes + self.per_sample_bytes * micro_batch as f64
    }
}

/// The command with every `{mb}` replaced by `micro_batch`; an error when no argument holds
/// the placeholder (the runs could not differ).
pub fn with_micro_batch(
    command: &[OsString],
    micro_batch: u64,
) -> Result<Vec<OsString>, PlanError> {
    let mut found = false;
    let substituted = command
        .iter()
        .map(|argument| match argument.to_str() {
            Some(text) if text.contains(MICRO_BATCH_PLACEHOLDER) => {
                found = true;
                OsString::from(text.replace(MICRO_BATCH_PLACEHOLDER, &micro_batch.to_string()))
            }
            _ => argument.clone(),
        })
        .collect();
    if found {
        Ok(substituted)
    } else {
        Err(PlanError::InvalidInput(format!(
            "The command has no {MICRO_BATCH_PLACEHOLDER} where its micro-batch goes: write it as the value of your script's batch-size argument (e.g. --per_device_train_batch_size {MICRO_BATCH_PLACEHOLDER})."
        )))
    }
}

/// Whether `command` holds the micro-batch placeholder.
pub fn has_placeholder(command: &[OsString]) -> bool {
    command
        .iter()
        .filter_map(|argument| OsStr::to_str(argument))
        .any(|text| text.contains(MICRO_BATCH_PLACEHOLDER))
}

/// Fits the runs that completed (at least two micro-batches) to fixed + per-sample bytes and
/// answers the largest micro-batch that fits `card_bytes`, below any that ran out of memory.
pub fn fit_runs(runs: &[MeasuredRun], card_bytes: u64) -> Result<MeasuredFit, PlanError> {
    let mut peaks: Vec<(u64, u64)> = runs
        .iter()
        .filter_map(|run| match *run {
            MeasuredRun::Peak {
                micro_batch,
                peak_bytes,
            } => Some((micro_batch, peak_bytes)),
            MeasuredRun::OutOfMemory { .. } => None,
        })
        .collect();
    peaks.sort_unstable();
    peaks.dedup_by_key(|(micro_batch, _)| *micro_batch);
    let smallest_out_of_memory = runs
        .iter()
        .filter(|run| matches!(run, MeasuredRun::OutOfMemory { .. }))
        .map(|run| run.micro_batch())
        .min();
    let (Some(&(small_batch, small_peak)), Some(&(large_batch, large_peak))) =
        (peaks.first(), peaks.last())
    else {
        return Err(PlanError::InvalidInput(
            "No run finished its steps, so there is nothing to fit: try smaller micro-batches."
                .to_string(),
        ));
    };
    if small_batch == large_batch {
        return Err(PlanError::InvalidInput(format!(
            "Only micro-batch {small_batch} ran: a second size that runs is needed to tell the cost per sample; try a smaller one."
        )));
    }
    let per_sample_bytes =
        (large_peak as f64 - small_peak as f64) / (large_batch - small_batch) as f64;
    if per_sample_bytes <= 0.0 {
        return Err(PlanError::InvalidInput(format!(
            "The job's memory did not grow from micro-batch {small_batch} to {large_batch}: check that {MICRO_BATCH_PLACEHOLDER} is the argument that sets its batch size."
        )));
    }
    let fixed_bytes = small_peak as f64 - per_sample_bytes * small_batch as f64;
    let room = card_bytes as f64 - fixed_bytes;
    let by_memory = if room < per_sample_bytes {
        0
    } else {
        (room / per_sample_bytes).floor().min(1e9) as u64
    };
    let (max_micro_batch, limited_by_out_of_memory) = match smallest_out_of_memory {
        Some(failed) if failed <= by_memory => (failed.saturating_sub(1), Some(failed)),
        _ => (by_memory, None),
    };
    Ok(MeasuredFit {
        fixed_bytes,
        per_sample_bytes,
        max_micro_batch,
        limited_by_out_of_memory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn two_peaks_give_the_cost_per_sample_and_the_largest_micro_batch() {
        let runs = [
            MeasuredRun::Peak {
                micro_batch: 1,
                peak_bytes: 6 * GIB,
            },
            MeasuredRun::Peak {
                micro_batch: 3,
                peak_bytes: 10 * GIB,
            },
        ];
        let fit = fit_runs(&runs, 24 * GIB).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(fit.per_sample_bytes, 2.0 * GIB as f64);
        assert_eq!(fit.fixed_bytes, 4.0 * GIB as f64);
        // 4 + 2 × 10 = 24 GiB: exactly full still fits.
        assert_eq!(fit.max_micro_batch, 10);
        assert_eq!(fit.limited_by_out_of_memory, None);
        assert_eq!(fit.predicted_bytes(10), 24.0 * GIB as f64);
    }

    #[test]
    fn an_out_of_memory_run_caps_the_answer_below_it() {
        let runs = [
            MeasuredRun::Peak {
                micro_batch: 1,
                peak_bytes: 6 * GIB,
            },
            MeasuredRun::Peak {
                micro_batch: 3,
                peak_bytes: 10 * GIB,
            },
            MeasuredRun::OutOfMemory { micro_batch: 9 },
        ];
        let fit = fit_runs(&runs, 24 * GIB).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            (fit.max_micro_batch, fit.limited_by_out_of_memory),
            (8, Some(9))
        );
        // One above the answer is no limit.
        let runs = [
            runs[0],
            runs[1],
            MeasuredRun::OutOfMemory { micro_batch: 11 },
        ];
        let fit = fit_runs(&runs, 24 * GIB).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            (fit.max_micro_batch, fit.limited_by_out_of_memory),
            (10, None)
        );
    }

    #[test]
    fn fits_that_cannot_be_made_say_why() {
        let one = MeasuredRun::Peak {
            micro_batch: 2,
            peak_bytes: 6 * GIB,
        };
        for (runs, words) in [
            (vec![], "No run finished"),
            (
                vec![MeasuredRun::OutOfMemory { micro_batch: 1 }],
                "No run finished",
            ),
            (vec![one, one], "a second size"),
            (
                vec![
                    one,
                    MeasuredRun::Peak {
                        micro_batch: 4,
                        peak_bytes: 6 * GIB,
                    },
                ],
                "did not grow",
            ),
        ] {
            let error = fit_runs(&runs, 24 * GIB).expect_err("no fit");
            assert!(error.to_string().contains(words), "{error}");
        }
        // A job larger than the card at micro-batch 1: 0, not an underflow.
        let runs = [
            MeasuredRun::Peak {
                micro_batch: 1,
                peak_bytes: 30 * GIB,
            },
            MeasuredRun::Peak {
                micro_batch: 2,
                peak_bytes: 32 * GIB,
            },
        ];
        let fit = fit_runs(&runs, 24 * GIB).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(fit.max_micro_batch, 0);
    }

    #[test]
    fn the_placeholder_is_substituted_in_every_argument() {
        let command: Vec<OsString> = [
            "python",
            "train.py",
            "--bs={mb}",
            "--grad-accum",
            "{mb}{mb}",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert!(has_placeholder(&command));
        let run = with_micro_batch(&command, 12).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(run[2], "--bs=12");
        assert_eq!(run[4], "1212");
        assert_eq!(run[1], "train.py");
        let error = with_micro_batch(&command[..2], 4).expect_err("no placeholder");
        assert!(error.to_string().contains("{mb}"), "{error}");
    }
}
