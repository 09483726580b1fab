//! Nothing of the user's job outlives `gputune run`, `gputune sweep` or `gputune plan --measure`:
//! a job whose child calls setsid() (leaving its process group and session) leaves no process
//! when the command ends by itself, on Ctrl-C, and when gputune itself is killed with SIGKILL.
//! Each job's processes carry a marker (a `sleep` length no other test uses) in their command
//! line; /proc is searched for it after gputune ended.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::FakeMachine;
use common::process::PATIENCE;

use crate::common;

/// How long the job's processes may take to go once gputune has ended (generous: only a
/// broken build waits it out).
const GONE_WITHIN: Duration = Duration::from_secs(30);

/// How the test ends gputune.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ending {
    /// The job ends by itself (`run`, `sweep`), or its measuring time is up (`plan --measure`).
    ByItself,
    CtrlC,
    KillNine,
}

/// A job started for one test: its marker, its folder, and what it leaves (killed at the end
/// so a failing test leaves nothing either).
struct MarkedJob {
    marker: String,
    folder: tempfile::TempDir,
}

impl MarkedJob {
    fn new() -> MarkedJob {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let serial = NEXT.fetch_add(1, Ordering::SeqCst);
        // A length of sleep no other process on the machine runs: about 35 to 46 days.
        let seconds = 3_000_000 + (std::process::id() % 1_000) * 1_000 + serial;
        MarkedJob {
            marker: seconds.to_string(),
            folder: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn escaped_pid_file(&self) -> PathBuf {
        self.folder.path().join("escaped.pid")
    }

    /// A shell job that starts a child in a session of its own (setsid), waits until it runs,
    /// then ends after a second (`ends: true`) or runs until it is stopped.
    fn script(&self, ends: bool) -> String {
        let pid_file = self.escaped_pid_file();
        let rest = if ends {
            "sleep 1".to_string()
        } else {
            format!("sleep {}", self.marker)
        };
        format!(
            "setsid sh -c 'echo $$ > {pid}; exec sleep {marker}' </dev/null >/dev/null 2>&1 & \
             while [ ! -s {pid} ]; do sleep 0.05; done; {rest}",
            pid = pid_file.display(),
            marker = self.marker,
        )
    }

    /// Waits until the setsid child has written its pid: the job and its escapee run.
    fn wait_until_started(&self, gputune: &mut Child) {
        let deadline = Instant::now() + PATIENCE;
        while std::fs::read_to_string(self.escaped_pid_file()).map_or(true, |text| text.is_empty())
        {
            if let Ok(Some(status)) = gputune.try_wait() {
                panic!("gputune ended ({status}) before the job started its child");
            }
            assert!(Instant::now() < deadline, "the job never started its child");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The live processes whose command line holds the marker (the job's shells and sleeps).
    fn processes(&self) -> Vec<(u32, String)> {
        crate::common::process::command_lines()
            .into_iter()
            .filter(|(pid, command_line)| command_line.contains(&self.marker) && is_running(*pid))
            .collect()
    }

    /// Asserts that none of the job's processes is left (after a generous wait).
    fn assert_nothing_left(&self, what: &str) {
        let deadline = Instant::now() + GONE_WITHIN;
        loop {
            let left = self.processes();
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!("{what} left the job's processes running: {left:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for MarkedJob {
    fn drop(&mut self) {
        for (pid, _) in self.processes() {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Whether `pid` is a live process (a zombie waiting to be reaped is not).
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Starts gputune with `arguments` then `-- sh -c SCRIPT`, ends it as `ending` says, and
/// checks that nothing of the job is left.
fn check(machine: &FakeMachine, arguments: &[&str], ending: Ending) {
    let job = MarkedJob::new();
    let script = job.script(ending == Ending::ByItself && arguments[0] != "plan");
    let mut words: Vec<&str> = arguments.to_vec();
    words.extend(["--", "sh", "-c", &script]);
    // Nothing piped: a process left holding a pipe must not hang the test instead of failing it.
    let mut gputune = machine
        .command(&words)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gputune starts");
    job.wait_until_started(&mut gputune);
    let signal = match ending {
        Ending::ByItself => None,
        Ending::CtrlC => Some(nix::sys::signal::Signal::SIGINT),
        Ending::KillNine => Some(nix::sys::signal::Signal::SIGKILL),
    };
    if let Some(signal) = signal {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(gputune.id()).expect("a pid"));
        nix::sys::signal::kill(pid, signal).expect("the signal is sent");
    }
    let deadline = Instant::now() + PATIENCE;
    while gputune
        .try_wait()
        .expect("gputune can be waited on")
        .is_none()
    {
        if Instant::now() > deadline {
            let _ = gputune.kill();
            panic!("gputune {arguments:?} did not end ({ending:?})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    job.assert_nothing_left(&format!("gputune {} ({ending:?})", arguments.join(" ")));
}

/// A machine with a saved profile "Run" (315 W) for `gputune run`.
fn machine_with_run_profile() -> FakeMachine {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    for arguments in [
        &["apply", "--power-limit", "315W"][..],
        &["profile", "save", "Run"],
        &["apply", "--power-limit", "450W"],
    ] {
        let output = machine.gputune(arguments);
        assert!(
            output.status.success(),
            "{arguments:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    machine
}

const RUN: [&str; 3] = ["run", "--profile", "Run"];

const SWEEP: [&str; 8] = [
    "sweep",
    "--json",
    "--power-limits",
    "100,60",
    "--step-s",
    "4",
    "--warmup-s",
    "1",
];

fn measure(seconds: &str) -> [&str; 4] {
    ["plan", "--measure", "--seconds", seconds]
}

#[test]
fn run_a_setsid_child_does_not_outlive_a_command_that_ends() {
    check(&machine_with_run_profile(), &RUN, Ending::ByItself);
}

#[test]
fn run_a_setsid_child_does_not_outlive_ctrl_c() {
    check(&machine_with_run_profile(), &RUN, Ending::CtrlC);
}

#[test]
fn run_killed_with_sigkill_leaves_no_process_of_its_command() {
    check(&machine_with_run_profile(), &RUN, Ending::KillNine);
}

#[test]
fn sweep_a_setsid_child_does_not_outlive_a_command_that_ends() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    check(&machine, &SWEEP, Ending::ByItself);
}

#[test]
fn sweep_a_setsid_child_does_not_outlive_ctrl_c() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    check(&machine, &SWEEP, Ending::CtrlC);
}

#[test]
fn sweep_killed_with_sigkill_leaves_no_process_of_its_command() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    check(&machine, &SWEEP, Ending::KillNine);
}

#[test]
fn plan_measure_a_setsid_child_does_not_outlive_the_measurement() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    check(&machine, &measure("2"), Ending::ByItself);
}

#[test]
fn plan_measure_a_setsid_child_does_not_outlive_ctrl_c() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    check(&machine, &measure("120"), Ending::CtrlC);
}

#[test]
fn plan_measure_killed_with_sigkill_leaves_no_process_of_its_job() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    check(&machine, &measure("120"), Ending::KillNine);
}

/// A job of three generations for the one stop policy, each a script whose command line holds
/// the marker: the job notes SIGTERM and goes on, its child (same process group, no setsid)
/// notes SIGTERM and ends, its grandchild ignores SIGTERM.
fn stubborn_job(job: &MarkedJob) -> String {
    let folder = job.folder.path();
    let write = |name: &str, text: String| {
        std::fs::write(folder.join(name), text).expect("a job script is written");
    };
    write(
        "grandchild.sh",
        format!(
            "trap '' TERM\necho $$ > {}/grandchild.pid\nwhile :; do sleep 1; done\n",
            folder.display()
        ),
    );
    write(
        "child.sh",
        format!(
            "trap 'echo term > {dir}/child-got-term; exit 0' TERM\nsh {dir}/grandchild.sh {marker} &\nwait\n",
            dir = folder.display(),
            marker = job.marker
        ),
    );
    format!(
        "trap 'echo term > {dir}/job-got-term' TERM; sh {dir}/child.sh {marker} & \
         while :; do sleep 1; done; : {marker}",
        dir = folder.display(),
        marker = job.marker
    )
}

/// Starts gputune with `arguments` and the stubborn job, sends gputune SIGTERM once the
/// grandchild runs, and checks the policy: SIGTERM to the whole group, SIGKILL after the
/// grace, nothing left. Returns gputune's line that says how the command ended.
fn stopped_by_sigterm(machine: &FakeMachine, arguments: &[&str]) -> String {
    let job = MarkedJob::new();
    let script = stubborn_job(&job);
    let mut words: Vec<&str> = arguments.to_vec();
    words.extend(["--", "sh", "-c", &script]);
    let mut command = machine.command(&words);
    command.stdin(Stdio::null());
    let mut running = common::process::spawn_piped(command);
    let grandchild = job.folder.path().join("grandchild.pid");
    let deadline = Instant::now() + PATIENCE;
    while std::fs::read_to_string(&grandchild).map_or(true, |text| !text.ends_with('\n')) {
        if let Ok(Some(status)) = running.child.try_wait() {
            panic!("gputune ended ({status}) before the job's grandchild ran");
        }
        assert!(Instant::now() < deadline, "the job's grandchild never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    running.signal("TERM");
    let (status, _, stderr) = running.finish();
    for noted in ["job-got-term", "child-got-term"] {
        assert!(
            job.folder.path().join(noted).exists(),
            "SIGTERM went to the job's whole process group ({noted}): {stderr}"
        );
    }
    // The job went on after SIGTERM: the grace ran out and SIGKILL ended it.
    assert_eq!(status.code(), Some(128 + 9), "{stderr}");
    assert!(stderr.contains("stopping the command: SIGTERM"), "{stderr}");
    job.assert_nothing_left(&format!("gputune {} (SIGTERM)", arguments.join(" ")));
    stderr
        .lines()
        .find(|line| line.starts_with("gputune: the command was ended by"))
        .unwrap_or_else(|| panic!("no line says how the command ended: {stderr}"))
        .to_string()
}

#[test]
fn run_and_sweep_stop_the_jobs_whole_group_with_one_policy_and_say_it_in_one_sentence() {
    let ran = stopped_by_sigterm(&machine_with_run_profile(), &RUN);
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let swept = stopped_by_sigterm(&machine, &SWEEP);
    assert_eq!(ran, "gputune: the command was ended by signal 9.");
    assert_eq!(ran, swept);
}

/// Waits until the job's shell, whose pid it wrote to `pid_file`, is stopped (state T).
fn wait_until_stopped(pid_file: &std::path::Path, gputune: &mut Child) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(text) = std::fs::read_to_string(pid_file)
            && text.ends_with('\n')
            && let Ok(pid) = text.trim().parse::<u32>()
            && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    == Some("T")
            })
        {
            return;
        }
        if let Ok(Some(status)) = gputune.try_wait() {
            panic!("gputune ended ({status}) before the job stopped itself");
        }
        assert!(Instant::now() < deadline, "the job never stopped itself");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A job stopped as the terminal stops a background group that reads it (here by its own
/// SIGSTOP) would hold the card at the profile forever: gputune notices, says so in one
/// sentence, stops it by the policy and ends with the job's exit sentence, the card put back.
fn stays_stopped(machine: &FakeMachine, arguments: &[&str]) {
    let power_limit_mw = || machine.state().machine.gpus[0].settings.power_limit_mw;
    let before = power_limit_mw();
    let job = MarkedJob::new();
    let script = format!("kill -STOP $$; sleep {}", job.marker);
    let mut words: Vec<&str> = arguments.to_vec();
    words.extend(["--", "sh", "-c", &script]);
    let mut command = machine.command(&words);
    command.stdin(Stdio::null());
    let (status, _, stderr) = common::process::spawn_piped(command).finish();
    assert!(
        stderr.contains("gputune: the command was stopped: it tried to use the terminal"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("the command was stopped").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("gputune: the command was ended by signal 15."),
        "{stderr}"
    );
    assert!(!status.success(), "{stderr}");
    assert_eq!(power_limit_mw(), before, "the card is put back: {stderr}");
    job.assert_nothing_left(&format!("gputune {} (a stopped job)", arguments[0]));
}

#[test]
fn run_stops_a_job_that_stays_stopped_and_says_why() {
    stays_stopped(&machine_with_run_profile(), &RUN);
}

#[test]
fn sweep_stops_a_job_that_stays_stopped_and_says_why() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    // The card's settings written once, so the test can read them before the sweep.
    let output = machine.gputune(&["apply", "--power-limit", "450W"]);
    assert!(output.status.success(), "{output:?}");
    stays_stopped(&machine, &SWEEP);
}

/// Ctrl-C to gputune while the job is stopped: SIGTERM stays pending on a stopped process, so
/// the stop sends SIGCONT after it and the job's trap runs (a checkpoint) before any SIGKILL.
#[test]
fn run_ctrl_c_reaches_a_stopped_job_with_its_sigterm() {
    let machine = machine_with_run_profile();
    let job = MarkedJob::new();
    let folder = job.folder.path();
    let script = format!(
        "trap 'echo term > {dir}/got-term; exit 3' TERM; echo $$ > {dir}/job.pid; \
         kill -STOP $$; sleep {marker}",
        dir = folder.display(),
        marker = job.marker
    );
    let mut words: Vec<&str> = RUN.to_vec();
    words.extend(["--", "sh", "-c", &script]);
    let mut command = machine.command(&words);
    command.stdin(Stdio::null());
    let mut running = common::process::spawn_piped(command);
    wait_until_stopped(&folder.join("job.pid"), &mut running.child);
    running.signal("INT");
    let (status, _, stderr) = running.finish();
    assert!(
        folder.join("got-term").exists(),
        "the stopped job never got its SIGTERM: {stderr}"
    );
    assert_eq!(status.code(), Some(3), "{stderr}");
    job.assert_nothing_left("gputune run (Ctrl-C to a stopped job)");
}
