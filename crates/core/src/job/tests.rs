//! The job room's own tests: the start's sentence, and the stop policy with a stopped job.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use super::*;

/// Far more than a job under test takes to end: only a broken build waits it out.
const MUST_END_WITHIN: Duration = Duration::from_secs(60);

fn shell(script: &str) -> JobCommand {
    JobCommand {
        words: vec!["sh".into(), "-c".into(), script.into()],
        run_as: None,
        output: JobOutput::Inherited,
        reads_stdin: false,
    }
}

/// Polls `job` until it ends; the notices it gave on the way.
fn wait_for(job: &mut Job) -> (ExitStatus, Vec<&'static str>) {
    let deadline = Instant::now() + MUST_END_WITHIN;
    let mut notices = Vec::new();
    loop {
        let polled = job.poll().expect("the job can be waited on");
        notices.extend(job.take_notice());
        if let Some(status) = polled {
            return (status, notices);
        }
        assert!(Instant::now() < deadline, "the job never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the process in `pid_file` is stopped (state T).
fn wait_until_stopped(pid_file: &std::path::Path) {
    let deadline = Instant::now() + MUST_END_WITHIN;
    loop {
        if let Ok(text) = std::fs::read_to_string(pid_file)
            && text.ends_with('\n')
            && let Ok(pid) = text.trim().parse::<u32>()
            && stop::is_stopped(pid)
        {
            return;
        }
        assert!(Instant::now() < deadline, "the job never stopped itself");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_program_that_is_not_there_is_told_to_check_its_path() {
    let error = Job::start(&JobCommand {
        words: vec!["/nonexistent/gputune-job".into()],
        ..shell("")
    })
    .err()
    .expect("a missing program does not start");
    assert!(
        error.ends_with(": check its path and that it is executable."),
        "{error}"
    );
    let sentence = start_failure(
        "train",
        &std::io::Error::from_raw_os_error(nix::libc::ENOENT),
    );
    assert!(sentence.ends_with("check its path and that it is executable."));
}

#[test]
fn a_program_that_may_not_be_executed_is_told_to_check_its_mode() {
    let folder = tempfile::tempdir().unwrap();
    let script = folder.path().join("train.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let error = Job::start(&JobCommand {
        words: vec![script.into_os_string()],
        ..shell("")
    })
    .err()
    .expect("a file without the x bit does not start");
    assert!(
        error.ends_with(": check its path and that it is executable."),
        "{error}"
    );
    let sentence = start_failure(
        "train",
        &std::io::Error::from_raw_os_error(nix::libc::EACCES),
    );
    assert!(sentence.ends_with("check its path and that it is executable."));
}

#[test]
fn a_failure_before_the_exec_is_not_blamed_on_the_programs_path() {
    for errno in [nix::libc::EPERM, nix::libc::EAGAIN, nix::libc::ENOMEM] {
        let sentence = start_failure("train", &std::io::Error::from_raw_os_error(errno));
        assert!(
            sentence.starts_with("train could not be started ("),
            "{sentence}"
        );
        assert!(sentence.ends_with(")."), "{sentence}");
        assert!(!sentence.contains("check its path"), "{sentence}");
    }
    let sentence = start_failure("train", &std::io::Error::other("its guard process ended"));
    assert!(!sentence.contains("check its path"), "{sentence}");
}

#[test]
fn a_job_that_stays_stopped_is_stopped_by_the_policy_and_said_once() {
    let mut job = Job::start(&shell("kill -STOP $$; exec sleep 300")).unwrap();
    let (status, notices) = wait_for(&mut job);
    assert_eq!(notices, vec![stop::STOPPED_SENTENCE]);
    // SIGTERM then SIGCONT: the shell ends by SIGTERM, not by the grace's SIGKILL.
    assert_eq!(status.signal(), Some(nix::libc::SIGTERM), "{status:?}");
}

#[test]
fn a_stopped_job_receives_its_sigterm_before_it_is_killed() {
    let folder = tempfile::tempdir().unwrap();
    let pid_file = folder.path().join("job.pid");
    let noted = folder.path().join("got-term");
    let script = format!(
        "trap 'echo term > {noted}; exit 3' TERM; echo $$ > {pid}; kill -STOP $$; exec sleep 300",
        noted = noted.display(),
        pid = pid_file.display()
    );
    let mut job = Job::start(&shell(&script)).unwrap();
    wait_until_stopped(&pid_file);
    assert_eq!(job.stop(), Stopping::Terminating);
    let (status, _) = wait_for(&mut job);
    assert!(noted.exists(), "the stopped job never got its SIGTERM");
    assert_eq!(status.code(), Some(3), "{status:?}");
}
