//! What to measure, checked before any run starts.

use std::ffi::OsString;

use crate::job::progress::ProgressParser;
use crate::plan::measure::has_placeholder;

/// Progress steps a run is given when neither a step count nor seconds are given.
pub const DEFAULT_STEPS: u64 = 20;
/// Micro-batches measured when none are given.
pub const DEFAULT_MICRO_BATCHES: [u64; 2] = [1, 2];
/// A run counting steps is stopped after this long even if it printed no readable progress.
pub(super) const MAX_SECONDS_COUNTING_STEPS: f64 = 900.0;

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunLimit {
    pub steps: Option<u64>,
    pub seconds: f64,
}

/// What to measure, checked: [`JobSpec::new`] refuses what could not run before any run.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub command: Vec<OsString>,
    /// The sizes put where `{mb}` is; empty when the command has no `{mb}` (one run).
    pub micro_batches: Vec<u64>,
    pub limit: RunLimit,
    /// Run once more at the largest micro-batch the fit finds.
    pub confirm: bool,
    /// The user's regex for the job's progress, where the known formats do not match.
    pub progress_regex: Option<String>,
}

impl JobSpec {
    /// Checks the front end's inputs (`micro_batches` empty: the default 1 and 2; `steps` and
    /// `seconds` both `None`: [`DEFAULT_STEPS`]); the error names the input to change.
    pub fn new(
        command: Vec<OsString>,
        micro_batches: &[u64],
        steps: Option<u64>,
        seconds: Option<f64>,
        confirm: bool,
    ) -> Result<JobSpec, String> {
        if command.is_empty() {
            return Err("There is no training command to measure: give it with {mb} where its micro-batch goes (python train.py --batch-size {mb}).".to_string());
        }
        let with_placeholder = has_placeholder(&command);
        if micro_batches.contains(&0) {
            return Err("The micro-batches must be 1 or more.".to_string());
        }
        if !with_placeholder && !micro_batches.is_empty() {
            return Err("Micro-batches need {mb} in the command where its micro-batch goes (e.g. --batch-size {mb}).".to_string());
        }
        let mut sizes: Vec<u64> = if !with_placeholder {
            Vec::new()
        } else if micro_batches.is_empty() {
            DEFAULT_MICRO_BATCHES.to_vec()
        } else {
            micro_batches.to_vec()
        };
        sizes.dedup();
        if steps == Some(0) {
            return Err("The steps per run must be 1 or more.".to_string());
        }
        let limit = match seconds {
            Some(seconds) if seconds.is_finite() && seconds > 0.0 => RunLimit {
                steps: None,
                seconds,
            },
            Some(seconds) => {
                return Err(format!(
                    "The seconds per run must be more than 0, not {seconds}."
                ));
            }
            None => RunLimit {
                steps: Some(steps.unwrap_or(DEFAULT_STEPS)),
                seconds: MAX_SECONDS_COUNTING_STEPS,
            },
        };
        Ok(JobSpec {
            command,
            micro_batches: sizes,
            limit,
            confirm,
            progress_regex: None,
        })
    }

    /// Reads the job's steps with `regex` (the sweep's `--progress-regex`: a named group
    /// `count` for the steps done); a regex that cannot read steps is refused here.
    pub fn with_progress_regex(mut self, regex: Option<String>) -> Result<JobSpec, String> {
        if let Some(regex) = &regex {
            ProgressParser::new(Some(regex))?;
        }
        self.progress_regex = regex;
        Ok(self)
    }

    /// How many runs the measurement starts (without the confirming one).
    pub fn runs_planned(&self) -> usize {
        self.micro_batches.len().max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inputs_are_checked_before_any_run() {
        let command = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let spec =
            JobSpec::new(command(&["train", "--bs", "{mb}"]), &[], None, None, false).unwrap();
        assert_eq!(spec.micro_batches, DEFAULT_MICRO_BATCHES.to_vec());
        assert_eq!(spec.limit.steps, Some(DEFAULT_STEPS));
        let once = JobSpec::new(command(&["train"]), &[], None, Some(5.0), false).unwrap();
        assert!(once.micro_batches.is_empty());
        assert_eq!(once.limit.steps, None);
        assert!(JobSpec::new(command(&["train"]), &[1, 2], None, None, false).is_err());
        assert!(JobSpec::new(command(&["t", "{mb}"]), &[0, 2], None, None, false).is_err());
        assert!(JobSpec::new(command(&["t", "{mb}"]), &[], Some(0), None, false).is_err());
        assert!(JobSpec::new(command(&["t", "{mb}"]), &[], None, Some(-1.0), false).is_err());
        assert!(JobSpec::new(Vec::new(), &[], None, None, false).is_err());
        let counted = spec
            .clone()
            .with_progress_regex(Some(r"batch (?P<count>\d+)".to_string()))
            .unwrap();
        assert_eq!(
            counted.progress_regex.as_deref(),
            Some(r"batch (?P<count>\d+)")
        );
        assert!(
            spec.with_progress_regex(Some("batch (".to_string()))
                .is_err()
        );
    }
}
