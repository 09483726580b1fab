//! The SPANK plugin against a real Slurm (Debian's slurmctld, slurmd, munge): a one-node
//! cluster whose gres.conf names four GPUs by device file, the gputune daemon on the fake
//! library with eight cards whose device numbers are not in NVML's order, and
//! `gputune_spank.so` in plugstack.conf with a site policy. Through real `sbatch`, `srun`,
//! `scancel` and signals: jobs see exactly their cards tuned and the others untouched, two and
//! three jobs at once on disjoint cards, a batch job's srun step joining its session, every
//! card put back exactly at every kind of job end (normal, scancel, time limit, the task
//! killed, slurmstepd killed), refusals by the policy at submission and on the node, the node
//! default for a job that asks nothing. Prints the put-back times and the plugin's start
//! latency for docs/cluster.md.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::FakeMachine;
use common::daemon::{Daemon, wait_within};
use common::metrics::Exporter;
use common::slurm::{Slurm, unavailable};

use crate::common;
use gputune_core::device::sim::SimSettings;
use gputune_formats::jobs::JobRecord;

/// NVML index i's device file is /dev/nvidia{MINORS[i]}: gres.conf's order is not NVML's.
const MINORS: &str = "3,2,1,0,4,5,6,7";
const DEFAULT_MW: u32 = 450_000;

/// The NVML index of the card whose device file is /dev/nvidia{minor}.
fn index_of_minor(minor: u32) -> usize {
    MINORS
        .split(',')
        .position(|m| m.parse::<u32>().ok() == Some(minor))
        .unwrap_or_else(|| panic!("no card has minor {minor}"))
}

/// `percent` of the default limit as gputune rounds it (whole watts).
fn percent_mw(percent: f64) -> u32 {
    ((percent / 100.0 * f64::from(DEFAULT_MW) / 1000.0).round() * 1000.0) as u32
}

fn spank_library() -> PathBuf {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_gputune"));
    let path = binary
        .parent()
        .map(|dir| dir.join("libgputune_spank.so"))
        .unwrap_or_default();
    assert!(
        path.exists(),
        "{} is built by `cargo build --workspace --lib` (crates/spank's cdylib; .ci/run does it)",
        path.display()
    );
    path
}

/// The site's profile "quiet": 70 % and an undervolt found on another machine's card, checked
/// on this node only on the card whose device file is /dev/nvidia{CHECKED_MINOR} (-60 MHz there).
fn site_profiles(dir: &Path, machine: &FakeMachine) -> PathBuf {
    let folder = dir.join("profiles");
    std::fs::create_dir_all(&folder).expect("the site's profiles folder");
    std::fs::write(
        folder.join("quiet.toml"),
        format!(
            "schema_version = 1\nname = \"quiet\"\ngpu_clock_offset_mhz = -100\n\n\
             [card]\nuuid = \"GPU-00000000-0000-4000-8000-000000000000\"\n\
             name = \"NVIDIA GeForce RTX 4090\"\npci_bus_id = \"\"\n\n\
             [power_limit]\npercent_of_default = 70.0\nwatts = 315.0\n\n\
             [[checked_cards]]\ngpu_uuid = \"{}\"\ngpu_name = \"NVIDIA GeForce RTX 4090\"\n\
             gpu_clock_offset_mhz = -60\nchecked_at_ms = 1764100000000\nran_s = 600.0\nby = \"check\"\nverdict = \"stable\"\n",
            machine.uuid(index_of_minor(CHECKED_MINOR))
        ),
    )
    .expect("a site profile");
    folder
}

/// The card the site's profile was checked on.
const CHECKED_MINOR: u32 = 1;

/// Waits until `condition` holds; how long it took. Fails after `patience`.
fn wait(what: &str, patience: Duration, condition: impl Fn() -> bool) -> Duration {
    wait_within(what, patience, Duration::from_millis(5), condition)
}

/// The GPU device numbers a batch job printed ("gpus=0,2"), once it has.
fn job_gpus(slurm: &Slurm, output: &Path) -> Vec<u32> {
    let started = Instant::now();
    while !std::fs::read_to_string(output).is_ok_and(|text| text.contains("gpus=")) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the job never printed its GPUs into {}: {:?}\nslurmd's log ends:\n{}",
            output.display(),
            std::fs::read_to_string(output),
            slurm
                .log("slurmd.log")
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = std::fs::read_to_string(output).unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix("gpus="))
        .map(|list| {
            list.split(',')
                .filter_map(|m| m.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

struct Cards<'a> {
    machine: &'a FakeMachine,
    before: Vec<SimSettings>,
}

impl Cards<'_> {
    fn power_mw(&self, index: usize) -> u32 {
        self.machine.settings(index).power_limit_mw
    }

    fn is_back(&self, index: usize) -> bool {
        self.machine.settings(index) == self.before[index]
    }

    /// Waits until every card of `minors` is exactly as before; how long that took.
    fn wait_back(&self, what: &str, minors: &[u32]) -> Duration {
        wait(what, Duration::from_secs(30), || {
            minors
                .iter()
                .all(|&minor| self.is_back(index_of_minor(minor)))
        })
    }

    fn wait_power(&self, what: &str, minors: &[u32], power_limit_mw: u32) {
        wait(what, Duration::from_secs(30), || {
            minors
                .iter()
                .all(|&minor| self.power_mw(index_of_minor(minor)) == power_limit_mw)
        });
    }
}

fn batch_script(sleep_s: u32) -> String {
    format!("echo gpus=$SLURM_JOB_GPUS; echo \"$GPUTUNE_SETTINGS\"; sleep {sleep_s}")
}

fn kill_process(command_line: &str) {
    let status = std::process::Command::new("pkill")
        .args(["-KILL", "-f", &format!("^{command_line}$")])
        .status()
        .expect("pkill runs");
    assert!(status.success(), "no process \"{command_line}\" to kill");
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}

fn median_ms(times: &mut [Duration]) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1000.0
}

#[test]
fn slurm_jobs_hold_exactly_their_gpus_and_put_them_back_at_every_ending() {
    if let Some(reason) = unavailable() {
        eprintln!("skipped: {reason}");
        return;
    }
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    // The site's electricity price, where the test's daemon reads it (Daemon::start_with's
    // --cost-config, beside its runtime folder).
    let daemon_dir = machine.state_dir().with_file_name("daemon");
    std::fs::create_dir_all(&daemon_dir).expect("the daemon's folder");
    std::fs::write(
        daemon_dir.join("cost.toml"),
        "price_per_kwh = 0.30\ncurrency = \"€\"\nco2_grams_per_kwh = 400\n",
    )
    .expect("the site's electricity price");
    let daemon = Daemon::start_with(&machine, &[], &[("FAKE_NVML_MINORS", MINORS)]);
    let dir = tempfile::tempdir().expect("a cluster folder");
    let profiles = site_profiles(dir.path(), &machine);
    let plugstack = format!(
        "required {} socket={} profiles={} records={} allow_profiles=quiet power_min=60% power_max=100% default_power=80%",
        spank_library().display(),
        daemon.socket.display(),
        profiles.display(),
        dir.path().join("records").display()
    );
    let slurm = Slurm::start(&dir.path().join("slurm"), 4, &plugstack);
    let mut exporter_command = machine.command(&["exporter", "--listen", "127.0.0.1:0"]);
    exporter_command.env("GPUTUNE_SOCKET", &daemon.socket);
    let exporter = Exporter::start(exporter_command, "serving http://");
    let cards = Cards {
        machine: &machine,
        before: (0..8).map(|index| machine.settings(index)).collect(),
    };
    let out = |name: &str| dir.path().join(name);
    let mut put_back = Vec::new();

    // A job over its time limit (a minute: Slurm's least) holds one card meanwhile.
    let timed = slurm.sbatch(&[
        "--time=1",
        "--gres=gpu:1",
        "--gputune-power-limit=65%",
        "-o",
        out("timed.out").to_str().expect("UTF-8"),
        "--wrap",
        &batch_script(401),
    ]);
    let timed_gpus = job_gpus(&slurm, &out("timed.out"));
    cards.wait_power(
        "the timed job's card at 65 %",
        &timed_gpus,
        percent_mw(65.0),
    );

    // Three jobs at once on the other three cards: a site profile on two, the node's default
    // on the one that asks nothing.
    let profiled = slurm.sbatch(&[
        "--gres=gpu:2",
        "--gputune-profile=quiet",
        "-o",
        out("profiled.out").to_str().expect("UTF-8"),
        "--wrap",
        &batch_script(402),
    ]);
    let defaulted = slurm.sbatch(&[
        "--gres=gpu:1",
        "-o",
        out("defaulted.out").to_str().expect("UTF-8"),
        "--wrap",
        &batch_script(403),
    ]);
    let profiled_gpus = job_gpus(&slurm, &out("profiled.out"));
    let defaulted_gpus = job_gpus(&slurm, &out("defaulted.out"));
    cards.wait_power(
        "the profiled job's cards at 70 %",
        &profiled_gpus,
        percent_mw(70.0),
    );
    cards.wait_power(
        "the default job's card at 80 %",
        &defaulted_gpus,
        percent_mw(80.0),
    );
    // Each card of the profiled job has its own checked offset, or none and a line saying so.
    for &minor in &profiled_gpus {
        let offset_mhz = machine
            .settings(index_of_minor(minor))
            .gpu_clock_offset_in(2);
        let expected = if minor == CHECKED_MINOR { -60 } else { 0 };
        assert_eq!(offset_mhz, expected, "/dev/nvidia{minor}'s offset");
    }
    let told = std::fs::read_to_string(out("profiled.out")).unwrap_or_default();
    assert!(
        told.contains("was never checked with this profile's undervolt"),
        "the job is told which card gets no offset: {told}"
    );
    let mut all: Vec<u32> = [&timed_gpus[..], &profiled_gpus, &defaulted_gpus].concat();
    all.sort();
    assert_eq!(
        all,
        [0, 1, 2, 3],
        "four jobs' cards are disjoint and are gres.conf's four"
    );
    for index in 0..8 {
        let minor = MINORS
            .split(',')
            .nth(index)
            .and_then(|m| m.parse::<u32>().ok());
        if minor.is_some_and(|minor| minor >= 4) {
            assert!(cards.is_back(index), "GPU {index} is no job's: untouched");
        }
    }
    let told = std::fs::read_to_string(out("defaulted.out")).unwrap_or_default();
    assert!(
        told.contains("from the node's default, a power limit of 80%"),
        "the job is told what it runs with: {told}"
    );

    // The exporter labels the job's cards with its id and user while it holds them.
    let uuids: Vec<String> = profiled_gpus
        .iter()
        .map(|&minor| machine.uuid(index_of_minor(minor)))
        .collect();
    exporter.scrape_until("the profiled job's labels", |samples| {
        let labelled: std::collections::BTreeSet<&str> = samples
            .iter()
            .filter(|sample| sample.name == "DCGM_FI_DEV_POWER_USAGE")
            .filter(|sample| sample.label("hpc_job") == profiled)
            .map(|sample| sample.label("UUID"))
            .collect();
        labelled.len() == 2
            && uuids.iter().all(|uuid| labelled.contains(uuid.as_str()))
            && samples
                .iter()
                .filter(|sample| sample.label("hpc_job") == profiled)
                .all(|sample| sample.label("hpc_user") == "root")
    });

    // The jobs run a few of the daemon's readings (one a second here) before they end, so
    // their records have energy to count.
    std::thread::sleep(Duration::from_millis(2_500));

    // scancel of a running batch job.
    let asked = Instant::now();
    let output = slurm.output("scancel", &[&profiled]);
    assert!(output.status.success());
    cards.wait_back("the cancelled job's cards back", &profiled_gpus);
    put_back.push(("scancel", asked.elapsed()));
    exporter.scrape_until("no label of the cancelled job", |samples| {
        samples
            .iter()
            .all(|sample| sample.label("hpc_job") != profiled)
    });

    // The job's task killed with SIGKILL.
    let asked = Instant::now();
    kill_process("sleep 403");
    cards.wait_back("the killed task's card back", &defaulted_gpus);
    put_back.push(("task SIGKILL", asked.elapsed()));
    wait(
        "the job whose task was killed has failed",
        Duration::from_secs(30),
        || slurm.job_field(&defaulted, "JobState") == "FAILED",
    );

    // slurmstepd itself killed: the connection drops, the daemon puts the card back.
    let orphaned = slurm.sbatch(&[
        "--gres=gpu:1",
        "--gputune-power-limit=70%",
        "-o",
        out("orphaned.out").to_str().expect("UTF-8"),
        "--wrap",
        &batch_script(404),
    ]);
    let orphaned_gpus = job_gpus(&slurm, &out("orphaned.out"));
    cards.wait_power("the job's card at 70 %", &orphaned_gpus, percent_mw(70.0));
    std::thread::sleep(Duration::from_millis(2_500));
    let stepd = slurm
        .slurmstepd_of(&orphaned, "batch")
        .expect("the batch step's slurmstepd");
    let asked = Instant::now();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(stepd as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    cards.wait_back(
        "the card of the job whose slurmstepd died back",
        &orphaned_gpus,
    );
    put_back.push(("slurmstepd SIGKILL", asked.elapsed()));
    // Its task outlives it (no slurmstepd to end it): the test ends it.
    kill_process("sleep 404");
    let _ = slurm.output("scancel", &[&orphaned]);

    // A batch job's srun step joins the job's session; the job ends normally.
    let nested = slurm.sbatch(&[
        "--gres=gpu:2",
        "--gputune-power-limit=75%",
        "-o",
        out("nested.out").to_str().expect("UTF-8"),
        "--wrap",
        "echo gpus=$SLURM_JOB_GPUS; srun --gres=gpu:1 bash -c 'echo step: $GPUTUNE_SETTINGS'; sleep 2; date +%s%N > ended; true",
    ]);
    let nested_gpus = job_gpus(&slurm, &out("nested.out"));
    let ended_at = slurm.dir.join("ended");
    wait("the nested job ends", Duration::from_secs(30), || {
        ended_at.exists()
    });
    cards.wait_back("the nested job's cards back", &nested_gpus);
    // From the job's last line to the cards seen back (at most that: they may have been back
    // before the test looked).
    let back_ns = now_ns();
    let ended_ns: u128 = std::fs::read_to_string(&ended_at)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    let normal = Duration::from_nanos(back_ns.saturating_sub(ended_ns) as u64);
    put_back.push(("normal end", normal));
    let told = std::fs::read_to_string(out("nested.out")).unwrap_or_default();
    assert!(
        told.contains("step: gputune: the job's settings, held since its first step on this node"),
        "the srun step joined the batch step's session: {told}"
    );
    wait("the nested job completes", Duration::from_secs(30), || {
        slurm.job_field(&nested, "JobState") == "COMPLETED"
    });
    let comment = slurm.job_field(&nested, "AdminComment");
    assert!(
        comment.starts_with("gputune:"),
        "the job's record: {comment:?}"
    );

    // An Xid on a job's card (GPU 0 of NVML's order: /dev/nvidia3) ends the job's session at
    // once, its cards all back; the job runs on, and its end still writes the daemon's record
    // into the job's Slurm record.
    let crashed = slurm.sbatch(&[
        "--gres=gpu:3",
        "--gputune-power-limit=70%",
        "-o",
        out("crashed.out").to_str().expect("UTF-8"),
        "--wrap",
        "echo gpus=$SLURM_JOB_GPUS; sleep 4; true",
    ]);
    let crashed_gpus = job_gpus(&slurm, &out("crashed.out"));
    assert!(
        crashed_gpus.contains(&3),
        "the job has NVML's GPU 0: {crashed_gpus:?}"
    );
    cards.wait_power("the job's cards at 70 %", &crashed_gpus, percent_mw(70.0));
    let asked = Instant::now();
    machine.set_shared_faults("xid_after_ms=0");
    cards.wait_back("the cards of the job an Xid ended back", &crashed_gpus);
    put_back.push(("Xid 13", asked.elapsed()));
    machine.set_shared_faults("");
    wait("the crashed job completes", Duration::from_secs(30), || {
        slurm.job_field(&crashed, "JobState") == "COMPLETED"
    });
    let crashed_comment = slurm.job_field(&crashed, "AdminComment");
    assert!(
        crashed_comment.starts_with("gputune: 3 GPUs"),
        "the daemon's record reaches the job's Slurm record: {crashed_comment:?}"
    );

    // Refusals: at submission, with the policy's sentence; on the node, on the job's stderr.
    for (arguments, says) in [
        (
            vec!["--gres=gpu:1", "--gputune-profile=loud", "true"],
            "profile \"loud\" is not one this cluster lets jobs use; allowed: quiet.",
        ),
        (
            vec!["--gres=gpu:1", "--gputune-power-limit=50%", "true"],
            "is below this cluster's floor of 60 %",
        ),
        (
            vec!["--gres=gpu:1", "--gputune-power-limit=200W", "true"],
            "a power limit of 200 W on GPU",
        ),
    ] {
        let output = slurm.output("srun", &arguments);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{arguments:?} is refused");
        assert!(stderr.contains(says), "{arguments:?}: {stderr}");
    }
    // A step's environment is the user's: GPUs named there that Slurm did not give the job
    // (this one has none) are refused, never tuned.
    let spoofed = slurm
        .command("srun")
        .env("SLURM_JOB_GPUS", "0,1,2,3")
        .env("SLURM_STEP_GPUS", "0,1,2,3")
        .args(["--gputune-power-limit=70%", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("srun runs");
    let stderr = String::from_utf8_lossy(&spoofed.stderr);
    assert!(
        !spoofed.status.success(),
        "a step naming GPUs its job lacks fails"
    );
    assert!(
        stderr.contains("which Slurm did not give job") && stderr.contains("its GPUs here: none"),
        "{stderr}"
    );
    for index in 0..8 {
        if index != index_of_minor(timed_gpus[0]) {
            assert!(
                cards.is_back(index),
                "GPU {index}: nothing changed by a refusal"
            );
        }
    }

    // The job over its time limit is ended by Slurm, and its card goes back.
    wait(
        "Slurm ends the job at its time limit",
        Duration::from_secs(120),
        || slurm.job_field(&timed, "JobState") == "TIMEOUT",
    );
    cards.wait_back("the timed-out job's card back", &timed_gpus);
    for index in 0..8 {
        assert!(cards.is_back(index), "GPU {index} exactly as before");
    }

    // Every job that held cards left a record with the daemon: its energy, at the site's price,
    // and the one the job's Slurm record got.
    let listed: Vec<JobRecord> = serde_json::from_str(&daemon.ok(&machine, &["jobs", "--json"]))
        .unwrap_or_else(|error| panic!("gputune jobs --json: {error}"));
    for job in [&timed, &profiled, &defaulted, &orphaned, &nested, &crashed] {
        let record = listed
            .iter()
            .find(|record| record.job.job_id == *job)
            .unwrap_or_else(|| panic!("job {job}'s record among {listed:?}"));
        assert_eq!(record.job.scheduler, "slurm");
        assert_eq!(record.job.user, "root");
        assert!(record.energy_j > 0.0, "job {job} used energy: {record:?}");
        assert!(
            record.cost.as_ref().and_then(|cost| cost.cost).is_some(),
            "priced"
        );
    }
    let nested_record = listed
        .iter()
        .find(|record| record.job.job_id == nested)
        .expect("the nested job's record");
    assert_eq!(nested_record.gpus.len(), 2);
    let line = gputune_core::job_energy::cost::cost_line(
        nested_record.energy_j,
        nested_record.cost.as_ref(),
    );
    assert!(
        comment.contains(&line),
        "the job's Slurm record carries the daemon's figures: {comment:?} vs {line:?}"
    );

    let mut times: Vec<Duration> = put_back.iter().map(|(_, time)| *time).collect();
    let starts: Vec<f64> = slurm
        .log("slurmd.log")
        .lines()
        .filter_map(|line| line.split("the step's start took ").nth(1))
        .filter_map(|rest| rest.trim_end_matches(" ms").parse().ok())
        .collect();
    let mut sorted = starts.clone();
    sorted.sort_by(f64::total_cmp);
    eprintln!(
        "put back after: {}; median {:.0} ms, worst {:.0} ms",
        put_back
            .iter()
            .map(|(how, time)| format!("{how} {:.0} ms", time.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(", "),
        median_ms(&mut times),
        times
            .iter()
            .max()
            .map_or(0.0, |time| time.as_secs_f64() * 1000.0),
    );
    eprintln!(
        "the plugin's start in slurmstepd over {} steps: median {:.1} ms, worst {:.1} ms",
        sorted.len(),
        sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
        sorted.last().copied().unwrap_or(0.0)
    );
    drop(exporter);
    drop(slurm);
    drop(daemon);
}
