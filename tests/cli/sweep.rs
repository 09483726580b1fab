//! `gputune sweep` end to end, on the fake libnvidia-ml, with a stand-in training job
//! (tests/examples/fake_training.rs) whose speed follows the fake card's SM clock: the sweep
//! recovers the simulator's curve and each objective picks the setting the simulator's own
//! numbers say; attach mode with a log file; the proxy fallback; an Xid mid-step; the job
//! failing mid-sweep; the client killed mid-sweep. Each test has its own machine and runs
//! beside the others.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use common::FakeMachine;
use common::daemon::{Daemon, wait_until};
use common::process::spawn_piped;

use crate::common;
use gputune_core::sweep::objective::recommend;
use gputune_formats::reports::sweep::Objective;
use gputune_formats::reports::sweep::{SweepEnd, SweepOutcome};
use gputune_formats::reports::sweep_step::{MeasuredBy, StepResult, Throughput};

/// Steps per second of the stand-in job at 2520 MHz.
const RATE_AT_REFERENCE: f64 = 20.0;
const REFERENCE_CLOCK_MHZ: f64 = 2520.0;

fn fake_training() -> PathBuf {
    let examples = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("examples")))
        .expect("the test binary is in target/*/deps");
    let path = examples.join("fake_training");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it, `cargo test --all-targets` does not (run `cargo build --examples` first, as .ci/run does)",
        path.display()
    );
    path
}

/// The stand-in job's command line.
fn job(machine: &FakeMachine, format: &str, seconds: u32, extra: &[&str]) -> Vec<String> {
    let mut words = vec![
        fake_training().display().to_string(),
        "--nvml-lib".to_string(),
        machine.library.display().to_string(),
        "--format".to_string(),
        format.to_string(),
        "--seconds".to_string(),
        seconds.to_string(),
        "--rate".to_string(),
        RATE_AT_REFERENCE.to_string(),
    ];
    words.extend(extra.iter().map(|word| word.to_string()));
    words
}

/// `gputune sweep ARGS -- JOB` (no `--` when `job` is empty).
fn sweep(
    machine: &FakeMachine,
    daemon: Option<&Daemon>,
    arguments: &[&str],
    job: &[String],
) -> Command {
    let mut words: Vec<String> = vec!["sweep".to_string()];
    words.extend(arguments.iter().map(|word| word.to_string()));
    if !job.is_empty() {
        words.push("--".to_string());
        words.extend(job.iter().cloned());
    }
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match daemon {
        Some(daemon) => daemon.client(machine, &words),
        None => machine.command(&words),
    }
}

/// A short sweep of `power_limits` (4 s a setting, 1 s warm-up) with its result as JSON.
fn short_json(power_limits: &str) -> [&str; 7] {
    [
        "--json",
        "--power-limits",
        power_limits,
        "--step-s",
        "4",
        "--warmup-s",
        "1",
    ]
}

fn outcome(output: &Output) -> SweepOutcome {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "the JSON result reads ({error}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The job's real speed over a step: its rate at the SM clock the card ran (as read by the
/// sweep from the same fake driver).
fn true_throughput(result: &StepResult) -> f64 {
    let clock = result
        .stats
        .average_sm_clock_mhz
        .expect("the fake card reports its SM clock");
    RATE_AT_REFERENCE * clock / REFERENCE_CLOCK_MHZ
}

/// The results with the job's real speed in place of the measured one.
fn truth(results: &[StepResult]) -> Vec<StepResult> {
    results
        .iter()
        .map(|result| {
            let units_per_s = true_throughput(result);
            StepResult {
                throughput: Some(Throughput {
                    units_per_s,
                    spread_pct: None,
                }),
                energy_per_unit_j: result.average_power_w.map(|watts| watts / units_per_s),
                ..result.clone()
            }
        })
        .collect()
}

fn assert_card_is_back(machine: &FakeMachine) {
    let settings = machine.state().machine.gpus[0].settings.clone();
    assert_eq!(settings.power_limit_mw, 450_000, "the stock limit is back");
    assert_eq!(settings.gpu_locked_clocks, None);
    assert_eq!(settings.gpu_clock_offset_mhz, 0);
    assert!(!machine.journal(0).exists(), "no journal is left");
}

#[test]
fn the_sweep_recovers_the_simulators_curve_and_each_objective_picks_its_setting() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let csv = machine.state_dir().with_file_name("sweep.csv");
    let started = Instant::now();
    let output = sweep(
        &machine,
        None,
        &[
            "--json",
            "--power-limits",
            "100,90,80,70,60",
            "--step-s",
            "4",
            "--warmup-s",
            "1",
            "--objective",
            "energy",
            "--csv",
            csv.to_str().expect("a UTF-8 path"),
            "--save-profile",
            "Sweet spot",
        ],
        &job(&machine, "tqdm", 27, &[]),
    )
    .output()
    .expect("gputune runs");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let outcome = outcome(&output);
    eprintln!(
        "a 6-step sweep of 4 s steps took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(outcome.ended, SweepEnd::Completed, "{stderr}");
    assert_eq!(outcome.results.len(), 6);
    assert!(matches!(
        outcome.measured_by,
        Some(MeasuredBy::Progress { .. })
    ));
    // The curve, point by point, against the simulator's own clock.
    eprintln!("setting: measured step/s, simulator's step/s, error");
    let mut worst_error_pct: f64 = 0.0;
    for result in &outcome.results {
        let measured = result.throughput.expect("every step measured").units_per_s;
        let expected = true_throughput(result);
        let error_pct = (measured - expected).abs() / expected * 100.0;
        eprintln!(
            "{}: {measured:.2}, {expected:.2}, {error_pct:.1} %",
            result.step.label
        );
        assert!(error_pct < 5.0, "{}: {error_pct:.1} %", result.step.label);
        worst_error_pct = worst_error_pct.max(error_pct);
    }
    // A slowdown compares two measured speeds, so it is off by at most twice the worst error of
    // one (a bar redrawn every 0.1 s counts whole steps: about 1 step in 60 at each end).
    let slowdown_noise_pct = 2.0 * worst_error_pct + 0.5;
    // Lower limits: slower, and less energy per step.
    let speeds: Vec<f64> = outcome.results[..5]
        .iter()
        .map(|result| {
            result
                .throughput
                .map_or(0.0, |throughput| throughput.units_per_s)
        })
        .collect();
    assert!(
        speeds.windows(2).all(|pair| pair[1] <= pair[0] * 1.01),
        "{speeds:?}"
    );
    // Each objective picks what the simulator's own numbers pick, or, where two settings are
    // closer than the measurement can tell apart, one of those.
    let truth = truth(&outcome.results);
    let cli_pick = outcome.recommendation.as_ref().expect("a recommendation");
    let expected = recommend(&truth, Objective::LeastEnergy).expect("a pick");
    let true_energy = |label: &str| {
        truth
            .iter()
            .find(|result| result.step.label == label)
            .and_then(|result| result.energy_per_unit_j)
            .expect("every setting has a true energy per step")
    };
    let energy_margin = 1.0 + 2.0 * worst_error_pct / 100.0;
    for (pick, objective) in [
        (cli_pick.label.clone(), "--objective energy"),
        (
            recommend(&outcome.results, Objective::PerfPerWatt)
                .expect("a pick")
                .label,
            "perf per watt",
        ),
    ] {
        eprintln!("{objective}: {pick} (expected {})", expected.label);
        assert!(
            true_energy(&pick) <= true_energy(&expected.label) * energy_margin,
            "{objective} picked {pick}, whose true energy per step is more than the measurement's error above {}'s",
            expected.label
        );
    }
    // Within a slowdown: a threshold half-way between two of the simulator's own slowdowns. The
    // pick must be the simulator's own pick for some threshold within the measurement's error of
    // this one; where no setting's slowdown lies that close, that is exactly one setting.
    let reference = truth[0]
        .throughput
        .map_or(1.0, |throughput| throughput.units_per_s);
    let mut slowdowns: Vec<f64> = truth[1..5]
        .iter()
        .map(|result| (1.0 - result.throughput.map_or(0.0, |t| t.units_per_s) / reference) * 100.0)
        .collect();
    slowdowns.sort_by(f64::total_cmp);
    let pick_at = |max_slowdown_pct: f64| {
        recommend(&truth, Objective::EnergyWithinSlowdown { max_slowdown_pct })
            .expect("a pick")
            .label
    };
    let mut checked = 0;
    for pair in slowdowns.windows(2) {
        let threshold = (pair[0] + pair[1]) / 2.0;
        let objective = Objective::EnergyWithinSlowdown {
            max_slowdown_pct: threshold,
        };
        let measured = recommend(&outcome.results, objective).expect("a pick");
        let (low, high) = (
            threshold - slowdown_noise_pct,
            threshold + slowdown_noise_pct,
        );
        let mut acceptable = vec![pick_at(threshold), pick_at(low), pick_at(high)];
        acceptable.extend(
            slowdowns
                .iter()
                .filter(|slowdown| (low..=high).contains(*slowdown))
                .map(|slowdown| pick_at(*slowdown)),
        );
        acceptable.sort();
        acceptable.dedup();
        eprintln!(
            "{}: {} (the simulator's: {})",
            objective.describe(),
            measured.label,
            acceptable.join(" or ")
        );
        assert!(
            acceptable.contains(&measured.label),
            "{}: picked {}, the simulator's numbers allow {acceptable:?}",
            objective.describe(),
            measured.label
        );
        checked += 1;
    }
    assert_eq!(checked, 3, "the curve has distinct points: {slowdowns:?}");
    // CSV, the profile and the card.
    let written = std::fs::read_to_string(&csv).expect("the CSV is written");
    assert_eq!(written.lines().count(), 7, "{written}");
    assert!(written.starts_with("step,label,power_limit_pct"));
    let profiles = machine.config_dir().join("profiles");
    let profile = std::fs::read_to_string(profiles.join("sweet-spot.toml"))
        .expect("the recommended setting is saved");
    assert!(
        profile.contains(&format!(
            "watts = {}",
            cli_pick
                .label
                .split('(')
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .unwrap_or("?")
        )),
        "{profile}"
    );
    assert_card_is_back(&machine);
}

#[test]
fn attached_to_a_running_job_the_sweep_follows_its_log_file() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let log = machine.state_dir().with_file_name("train.log");
    let log_file = std::fs::File::create(&log).expect("the log is created");
    // A job in "another terminal": Hugging Face Trainer's log dicts, every 5 steps.
    let words = job(
        &machine,
        "hf",
        30,
        &["--log-every", "5", "--steps-per-epoch", "200"],
    );
    let mut training = Command::new(&words[0]);
    training
        .args(&words[1..])
        .stdout(log_file)
        .stderr(Stdio::null());
    for (name, value) in machine.environment() {
        training.env(name, value);
    }
    let mut training = training.spawn().expect("the job starts");
    let output = sweep(
        &machine,
        None,
        &[
            "--json",
            "--progress-file",
            log.to_str().expect("a UTF-8 path"),
            "--power-limits",
            "100,60",
            "--step-s",
            "5",
            "--warmup-s",
            "1",
        ],
        &[],
    )
    .output()
    .expect("gputune runs");
    let _ = training.kill();
    let _ = training.wait();
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let outcome = outcome(&output);
    assert_eq!(outcome.ended, SweepEnd::Completed, "{stderr}");
    assert_eq!(
        outcome.measured_by,
        Some(MeasuredBy::Progress {
            source: gputune_formats::reports::sweep_step::ProgressSource::HuggingFace,
            unit: gputune_formats::reports::sweep_step::WorkUnit::Epoch,
        })
    );
    let full = outcome.results[0].throughput.expect("measured").units_per_s;
    let low = outcome.results[1].throughput.expect("measured").units_per_s;
    // 20 steps/s at 2520 MHz, 200 steps an epoch: about 0.1 epoch/s.
    assert!((0.07..0.14).contains(&full), "{full}");
    assert!(low < full * 0.97, "60 % is slower: {low} vs {full}");
    for result in &outcome.results {
        let error_pct = (result.throughput.expect("measured").units_per_s * 200.0
            - true_throughput(result))
        .abs()
            / true_throughput(result)
            * 100.0;
        assert!(error_pct < 8.0, "{}: {error_pct:.1} %", result.step.label);
    }
    assert_card_is_back(&machine);
}

#[test]
fn a_job_that_prints_no_progress_is_measured_by_the_proxy_and_says_so() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let output = sweep(
        &machine,
        None,
        &[
            "--json",
            "--power-limits",
            "100,60",
            "--step-s",
            "4",
            "--warmup-s",
            "1",
            "--wait-s",
            "1",
        ],
        &job(&machine, "quiet", 16, &[]),
    )
    .output()
    .expect("gputune runs");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let outcome = outcome(&output);
    assert_eq!(outcome.measured_by, Some(MeasuredBy::Proxy));
    assert!(
        stderr.contains("GPU-side proxy (SM clock × utilization)"),
        "{stderr}"
    );
    let full = outcome.results[0].throughput.expect("measured").units_per_s;
    let low = outcome.results[1].throughput.expect("measured").units_per_s;
    assert!(low < full, "{low} vs {full}");
    assert_card_is_back(&machine);
}

#[test]
fn a_progress_format_only_the_users_regex_reads_is_how_the_sweep_measures() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let mut arguments = short_json("100,60").to_vec();
    arguments.extend([
        "--wait-s",
        "30",
        "--progress-regex",
        r"speed (?P<rate>[0-9.]+) (?P<unit>b)/s",
    ]);
    let output = sweep(
        &machine,
        None,
        &arguments,
        &job(&machine, "custom", 16, &[]),
    )
    .output()
    .expect("gputune runs");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let outcome = outcome(&output);
    assert!(
        matches!(
            outcome.measured_by,
            Some(MeasuredBy::Progress {
                source: gputune_formats::reports::sweep_step::ProgressSource::Custom,
                ..
            })
        ),
        "{:?}\n{stderr}",
        outcome.measured_by
    );
    let full = outcome.results[0].throughput.expect("measured").units_per_s;
    let low = outcome.results[1].throughput.expect("measured").units_per_s;
    assert!(low < full, "{low} vs {full}");
    assert_card_is_back(&machine);
}

#[test]
fn an_xid_during_a_step_restores_at_once_and_marks_the_setting_unstable() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    let mut running = spawn_piped(sweep(
        &machine,
        Some(&daemon),
        &short_json("100,80,60"),
        &job(&machine, "lightning", 21, &[]),
    ));
    running.wait_for_line("[2/4] 80 % (360 W)");
    wait_until("80 % is applied", || machine.power_limit_mw(0) == 360_000);
    machine.set_shared_faults("xid_after_ms=0");
    let restored = wait_until("the card is put back at once", || {
        machine.power_limit_mw(0) == 450_000
    });
    eprintln!("Xid mid-sweep: put back after {} ms", restored.as_millis());
    machine.set_shared_faults("");
    let (status, stdout, stderr) = running.finish();
    assert!(status.success(), "{stderr}");
    let outcome: SweepOutcome = serde_json::from_str(&stdout).expect("the JSON result reads");
    assert_eq!(outcome.ended, SweepEnd::Completed, "{stderr}");
    let unstable = outcome.results[1]
        .unstable
        .as_deref()
        .expect("80 % is unstable");
    assert!(unstable.contains("Xid 13"), "{unstable}");
    assert!(stderr.contains("marked unstable"), "{stderr}");
    // The sweep went on in a new session: 60 % and the repeat were measured.
    assert!(outcome.results[2].throughput.is_some(), "{stderr}");
    assert!(outcome.results[3].throughput.is_some(), "{stderr}");
    let pick = outcome.recommendation.expect("a recommendation");
    assert_ne!(
        pick.step_index, 1,
        "an unstable setting is never recommended"
    );
    assert_card_is_back(&machine);
}

#[test]
fn a_job_failing_mid_sweep_stops_it_restores_and_passes_its_status_on() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let output = sweep(
        &machine,
        None,
        &short_json("100,80,60"),
        &job(&machine, "tqdm", 60, &["--fail-after-s", "6"]),
    )
    .output()
    .expect("gputune runs");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("illegal memory access"),
        "the job's output is passed on"
    );
    let outcome = outcome(&output);
    assert_eq!(
        outcome.ended,
        SweepEnd::JobFailed {
            exit_code: 3,
            message: "the command exited with status 3.".to_string()
        }
    );
    assert_eq!(outcome.results.len(), 1, "only the first setting ended");
    assert!(stderr.contains("was not measured to its end"), "{stderr}");
    assert_card_is_back(&machine);
}

#[test]
fn a_sweep_client_killed_mid_step_is_put_back_by_the_daemon() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    let mut running = spawn_piped(sweep(
        &machine,
        Some(&daemon),
        &[
            "--power-limits",
            "70,100",
            "--step-s",
            "30",
            "--warmup-s",
            "1",
        ],
        &job(&machine, "tqdm", 20, &[]),
    ));
    running.wait_for_line("[1/3] 70 % (315 W)");
    wait_until("70 % is applied", || machine.power_limit_mw(0) == 315_000);
    assert!(daemon.journal(&machine, 0).exists(), "journaled first");
    running.child.kill().expect("SIGKILL is sent");
    let killed = Instant::now();
    wait_until("the daemon puts the card back", || {
        machine.power_limit_mw(0) == 450_000
    });
    eprintln!(
        "sweep client killed: put back after {} ms",
        killed.elapsed().as_millis()
    );
    let _ = running.finish();
    let log = daemon.log_text();
    assert!(log.contains("went away during a sweep"), "{log}");
    assert!(!daemon.journal(&machine, 0).exists());
}

#[test]
fn a_refused_sweep_says_who_holds_the_card_on_stderr_first_and_its_exit_status_agrees() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    // Another gputune holds the card with a trial.
    let mut trial =
        spawn_piped(machine.command(&["apply", "--power-limit", "400W", "--try", "60"]));
    trial.wait_for_line("Trying the new settings");
    let output = sweep(
        &machine,
        None,
        &[
            "--power-limits",
            "100,80",
            "--step-s",
            "4",
            "--warmup-s",
            "1",
        ],
        &job(&machine, "tqdm", 6, &[]),
    )
    .output()
    .expect("gputune runs");
    let stderr = text(&output.stderr);
    let stdout = text(&output.stdout);
    trial.signal("TERM");
    let _ = trial.finish();
    assert_eq!(output.status.code(), Some(1), "{stderr}\n{stdout}");
    // The refusal, naming the holder, is on stderr before anything else gputune says about
    // the sweep's end.
    let refusal = stderr
        .lines()
        .position(|line| line.contains("gputune apply --power-limit 400W --try 60"))
        .unwrap_or_else(|| panic!("the holder is named on stderr: {stderr}"));
    assert!(
        stderr
            .lines()
            .nth(refusal)
            .is_some_and(|line| line.starts_with("gputune: ")),
        "{stderr}"
    );
    let ended = stderr
        .lines()
        .position(|line| line.contains("the command exited"));
    assert!(ended.is_none_or(|ended| ended > refusal), "{stderr}");
    // Nothing says the exit status is the command's own when it is not. The other process's
    // control lock is seen before the job starts, so the refusal is the last word too, and the
    // job never ran.
    assert!(!stderr.contains("passes on its exit status"), "{stderr}");
    assert!(
        stderr
            .lines()
            .last()
            .is_some_and(|line| line.ends_with("the sweep was not started.")),
        "{stderr}"
    );
    assert!(
        !stdout.contains("Setting"),
        "no table for a sweep that never ran: {stdout}"
    );
    assert_card_is_back(&machine);
}

/// A sweep of 100 % and 80 % while another gputune tries 400 W on the card (through `daemon`,
/// or in its own process without one): it must be refused before its job, a script that
/// leaves a marker file, starts. Returns the sweep's exit code and stderr, one sentence.
fn sweep_beside_a_trial(machine: &FakeMachine, daemon: Option<&Daemon>) -> (Option<i32>, String) {
    let trial_arguments = ["apply", "--power-limit", "400W", "--try", "60"];
    let mut trial = spawn_piped(match daemon {
        Some(daemon) => daemon.client(machine, &trial_arguments),
        None => machine.command(&trial_arguments),
    });
    trial.wait_for_line("Trying the new settings");
    let marker = machine.state_dir().with_file_name("job-started");
    let script = format!("touch '{}'", marker.display());
    let output = sweep(
        machine,
        daemon,
        &[
            "--power-limits",
            "100,80",
            "--step-s",
            "4",
            "--warmup-s",
            "1",
        ],
        &["sh".to_string(), "-c".to_string(), script],
    )
    .output()
    .expect("gputune runs");
    let stderr = text(&output.stderr);
    trial.signal("TERM");
    let _ = trial.finish();
    assert!(!marker.exists(), "the job was not started: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr}");
    (output.status.code(), stderr)
}

#[test]
fn a_sweep_on_a_card_the_daemon_says_is_held_is_refused_before_its_job_starts() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    let (code, stderr) = sweep_beside_a_trial(&machine, Some(&daemon));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with(
            "gputune: GPU 0's power limit is held by a trial of gputune apply --power-limit 400W --try 60"
        ),
        "{stderr}"
    );
}

/// The card's settings on the fake driver now.
fn card(machine: &FakeMachine) -> gputune_core::device::sim::SimSettings {
    machine.state().machine.gpus[0].settings.clone()
}

#[test]
fn a_sweep_resets_a_lock_and_offset_in_force_or_keeps_them_and_both_are_in_every_row_and_the_profile()
 {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let tuned = machine.gputune(&[
        "apply",
        "--lock-gpu-clocks",
        "210,2520",
        "--gpu-clock-offset",
        "150",
    ]);
    assert!(tuned.status.success(), "{}", text(&tuned.stderr));
    let before = card(&machine);
    let profile = |name: &str| {
        std::fs::read_to_string(machine.config_dir().join("profiles").join(format!(
            "{}.toml",
            gputune_core::profiles::store::slug(name)
        )))
        .expect("the profile was saved")
    };

    // By default: said before the job starts, reset while the sweep runs, put back after.
    let writes_before = machine.write_log().len();
    let mut arguments = short_json("100,70").to_vec();
    arguments.extend(["--save-profile", "Clean"]);
    let output = sweep(&machine, None, &arguments, &job(&machine, "tqdm", 14, &[]))
        .output()
        .expect("gputune runs");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "GPU clock lock 210-2520 MHz, GPU clock offset +150 MHz in force: reset for the sweep"
        ),
        "{stderr}"
    );
    let reset = outcome(&output);
    assert!(
        reset.results.iter().all(|result| result.step.in_force_note
            == "GPU clock lock 210-2520 MHz, GPU clock offset +150 MHz reset for the sweep"),
        "{:?}",
        reset.results
    );
    let written: Vec<_> = machine.write_log()[writes_before..]
        .iter()
        .map(|write| write.setting)
        .collect();
    assert!(
        written.contains(&gputune_formats::card::Setting::ResetGpuClocks)
            && written.contains(&gputune_formats::card::Setting::GpuClockOffsetAt {
                pstate: 2,
                offset_mhz: 0
            }),
        "{written:?}"
    );
    assert_eq!(card(&machine), before, "the lock and offset are put back");
    let clean = profile("Clean");
    assert!(clean.contains("gpu_clock_offset_mhz = 0"), "{clean}");
    assert!(clean.contains("Measured with GPU clock lock"), "{clean}");

    // Kept: measured on top of them, and the profile holds them.
    let mut arguments = short_json("100,70").to_vec();
    arguments.extend(["--keep-settings", "--save-profile", "On top"]);
    let output = sweep(&machine, None, &arguments, &job(&machine, "tqdm", 14, &[]))
        .output()
        .expect("gputune runs");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("kept for every setting"), "{stderr}");
    let kept = outcome(&output);
    assert!(
        kept.results[0].step.in_force_note.ends_with(" kept"),
        "{:?}",
        kept.results[0].step
    );
    assert_eq!(card(&machine), before);
    let on_top = profile("On top");
    assert!(on_top.contains("gpu_clock_offset_mhz = 150"), "{on_top}");
    assert!(on_top.contains("max_mhz = 2520"), "{on_top}");
}

#[test]
fn without_a_daemon_a_sweep_on_a_card_another_process_changes_is_refused_before_its_job_starts() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let (code, stderr) = sweep_beside_a_trial(&machine, None);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with("gputune: GPU 0's power limit is being changed by gputune apply"),
        "{stderr}"
    );
    // The look gave every lock back, and the trial put the card back.
    assert_eq!(machine.power_limit_mw(0), 450_000);
}
