//! The job's energy in its Slurm record: at the step's end, `scontrol update JobId=N
//! AdminComment=…` (run as root by slurmstepd; the admin comment, because users may overwrite
//! a job's plain comment and not this one). SPANK has no call that writes a job's record, so
//! this is scontrol's, with a deadline; a failure is logged, never fails the job.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long scontrol may take.
const SCONTROL_DEADLINE: Duration = Duration::from_secs(10);

/// Sets job `job_id`'s AdminComment to `text`; the sentence saying why not otherwise.
pub fn set_admin_comment(scontrol: &Path, job_id: &str, text: &str) -> Result<(), String> {
    let mut child = Command::new(scontrol)
        .arg("update")
        .arg(format!("JobId={job_id}"))
        .arg(format!("AdminComment={text}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("{} could not be started: {error}", scontrol.display()))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                let mut said = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut said);
                }
                return Err(format!(
                    "scontrol update AdminComment failed ({status}): {}",
                    said.trim()
                ));
            }
            Ok(None) if started.elapsed() > SCONTROL_DEADLINE => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "scontrol did not finish within {} s",
                    SCONTROL_DEADLINE.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => return Err(format!("waiting for scontrol: {error}")),
        }
    }
}
