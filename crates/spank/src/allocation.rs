//! Which cards Slurm gave a job on this node, from a source the job's user cannot write.
//!
//! A step's environment is the user's: `SLURM_STEP_GPUS` and `SLURM_JOB_GPUS` are overwritten
//! by Slurm's gres plugin only where the step has GPUs, so a job without `--gres` (or a batch
//! step, for `SLURM_STEP_GPUS`) passes the user's own values through — seen on Slurm 22.05:
//! `SLURM_JOB_GPUS=0,1,2,3 srun true` reaches slurmstepd unchanged. Believing it would let any
//! user tune and hold other jobs' cards. The job prolog's environment is slurmd's own (the
//! user's variables are not in it), so the plugin's `job_prolog` (root, in slurmd) records the
//! job's cards there, in a folder only root may write, and each step's cards must be among
//! them; the `job_epilog` removes the record.

use std::path::{Path, PathBuf};

use gputune_core::fsafe;

/// A job's record is a short list of numbers.
const MAX_RECORD_BYTES: u64 = 4096;

fn record_path(folder: &Path, job_id: &str) -> PathBuf {
    folder.join(format!("job-{job_id}.gpus"))
}

/// Records the job's cards (`minors`, from the prolog's own environment).
pub fn record(folder: &Path, job_id: &str, minors: &[u32]) -> Result<(), String> {
    fsafe::ensure_private_folder(folder, 0o700)
        .map_err(|error| format!("gputune: the job records' folder: {error}"))?;
    let text = minors
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    fsafe::write_atomically(
        &record_path(folder, job_id),
        format!("{text}\n").as_bytes(),
        0o600,
    )
    .map_err(|error| format!("gputune: job {job_id}'s record of its GPUs: {error}"))
}

/// Forgets the job's cards (its epilog).
pub fn forget(folder: &Path, job_id: &str) {
    let _ = std::fs::remove_file(record_path(folder, job_id));
}

/// The cards the prolog recorded for the job (an empty list: a job without GPUs here), or
/// `None` when it recorded nothing (it did not run the plugin: slurmd not restarted since the
/// plugin was installed, or its record could not be written).
pub fn recorded(folder: &Path, job_id: &str) -> Result<Option<Vec<u32>>, String> {
    let path = record_path(folder, job_id);
    match fsafe::read_private(&path, MAX_RECORD_BYTES) {
        Ok(bytes) => crate::gpus::parse_slurm_gpus(&String::from_utf8_lossy(&bytes)).map(Some),
        Err(fsafe::FileError::NotFound { .. }) => Ok(None),
        Err(error) => Err(format!(
            "gputune: job {job_id}'s record of its GPUs: {error}"
        )),
    }
}

/// The step's cards: what its environment names, each of which Slurm must have given the job
/// (the batch step, or a step whose environment names none: the job's own cards on this
/// node). Without the prolog's record no named card can be believed.
pub fn step_cards(
    job_id: &str,
    batch: bool,
    named: &[u32],
    allocated: Option<&[u32]>,
) -> Result<Vec<u32>, String> {
    let Some(allocated) = allocated else {
        if named.is_empty() {
            return Ok(Vec::new());
        }
        return Err(format!(
            "gputune: job {job_id}'s GPUs on this node were not recorded by its prolog, so the GPUs this step names cannot be checked; nothing was changed. The plugin's job prolog runs in slurmd: restart slurmd after installing the plugin (and see slurmd's log for a record that could not be written)."
        ));
    };
    if batch || named.is_empty() {
        return Ok(allocated.to_vec());
    }
    match named.iter().find(|minor| !allocated.contains(minor)) {
        Some(minor) => Err(format!(
            "gputune: this step names /dev/nvidia{minor}, which Slurm did not give job {job_id} on this node (its GPUs here: {}); nothing was changed.",
            if allocated.is_empty() {
                "none".to_string()
            } else {
                allocated
                    .iter()
                    .map(|minor| format!("/dev/nvidia{minor}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )),
        None => Ok(named.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_gets_only_cards_slurm_gave_its_job() {
        assert_eq!(step_cards("7", false, &[1], Some(&[0, 1])), Ok(vec![1]));
        assert_eq!(
            step_cards("7", true, &[2, 3], Some(&[0, 1])),
            Ok(vec![0, 1])
        );
        // A step whose environment names no GPU (a user who unset it) gets the job's own.
        assert_eq!(step_cards("7", false, &[], Some(&[0, 1])), Ok(vec![0, 1]));
        let said = step_cards("7", false, &[0, 1, 2, 3], Some(&[])).expect_err("none given");
        assert!(
            said.contains("/dev/nvidia0, which Slurm did not give job 7"),
            "{said}"
        );
        assert!(said.contains("its GPUs here: none"), "{said}");
        assert!(step_cards("7", false, &[2], Some(&[0, 1])).is_err());
        // No record: nothing named can be believed, and nothing named is nothing to do.
        let said = step_cards("7", true, &[0], None).expect_err("unverifiable");
        assert!(said.contains("not recorded by its prolog"), "{said}");
        assert_eq!(step_cards("7", false, &[], None), Ok(vec![]));
    }

    #[test]
    fn the_record_is_root_only_and_a_planted_one_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let folder = dir.path().join("slurm");
        record(&folder, "42", &[3, 1]).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(recorded(&folder, "42"), Ok(Some(vec![3, 1])));
        assert_eq!(recorded(&folder, "43"), Ok(None), "no record");
        record(&folder, "44", &[]).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            recorded(&folder, "44"),
            Ok(Some(vec![])),
            "a job without GPUs here"
        );
        forget(&folder, "42");
        assert_eq!(recorded(&folder, "42"), Ok(None));
        // A link planted in place of a record is not believed.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "0,1,2,3\n").unwrap_or_else(|error| panic!("{error}"));
        std::os::unix::fs::symlink(&elsewhere, folder.join("job-45.gpus"))
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(recorded(&folder, "45").is_err());
    }
}
