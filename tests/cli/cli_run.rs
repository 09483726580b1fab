//! `gputune run --profile NAME -- COMMAND` against the fake libnvidia-ml: the profile is
//! applied while the command runs (its fan curve followed), and the card is put back when the
//! command succeeds, fails (its exit code passed through), cannot start, or gputune gets
//! SIGTERM; after `kill -9` the next start restores from the journal. The run reports its
//! energy, and `--log` writes its telemetry.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::FakeMachine;
use common::process::{PATIENCE, Running, spawn_piped};
use nvidia_ml_fake::WriteRecord;

use crate::common;
use gputune_formats::card::Setting;

struct Machine {
    fake: FakeMachine,
}

impl Machine {
    /// An RTX 4090 with a saved profile "Run": 315 W and a GPU clock offset of +100 MHz,
    /// and the card set back to its defaults afterwards.
    fn with_run_profile(fan_curve: bool) -> Machine {
        let machine = Machine {
            fake: FakeMachine::new("rtx4090", ""),
        };
        machine.ok(&[
            "apply",
            "--power-limit",
            "315W",
            "--gpu-clock-offset",
            "100",
        ]);
        machine.ok(&["profile", "save", "Run"]);
        machine.ok(&["apply", "--power-limit", "450W", "--gpu-clock-offset", "0"]);
        if fan_curve {
            let file = machine.config().join("profiles").join("run.toml");
            let mut text = std::fs::read_to_string(&file).unwrap();
            // Full speed at any temperature, so the test knows what the curve sets.
            text.push_str(
                "\n[[fan_curve]]\ntemperature_c = 0.0\nspeed_pct = 100.0\n\n[[fan_curve]]\ntemperature_c = 110.0\nspeed_pct = 100.0\n",
            );
            std::fs::write(&file, text).unwrap();
        }
        machine
    }

    fn config(&self) -> PathBuf {
        self.fake.config_dir()
    }

    fn journal(&self) -> PathBuf {
        self.fake.journal(0)
    }

    fn command(&self, arguments: &[&str]) -> Command {
        self.fake.command(arguments)
    }

    fn gputune(&self, arguments: &[&str]) -> Output {
        self.command(arguments)
            .output()
            .expect("the gputune binary runs")
    }

    fn ok(&self, arguments: &[&str]) -> (String, String) {
        let output = self.gputune(arguments);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(output.status.success(), "{arguments:?}: {stderr}");
        (stdout, stderr)
    }

    fn write_log(&self) -> Vec<WriteRecord> {
        self.fake.state().write_log
    }

    fn power_limit_mw(&self) -> u32 {
        self.fake.state().machine.gpus[0].settings.power_limit_mw
    }

    fn gpu_clock_offset_mhz(&self) -> i32 {
        self.fake.state().machine.gpus[0]
            .settings
            .gpu_clock_offset_mhz
    }

    /// Saves a profile "Fans" that carries only a fan curve (full speed at any temperature,
    /// so the test knows what the curve sets): a run of it holds the card's fans, nothing else.
    fn with_fans_profile(self) -> Machine {
        let file = self.config().join("profiles").join("run.toml");
        let text = std::fs::read_to_string(&file).expect("the profile Run was saved");
        let mut profile: gputune_formats::profile::Profile =
            toml::from_str(&text).expect("the saved profile reads back");
        profile.name = "Fans".to_string();
        profile.power_limit = None;
        profile.gpu_clock_lock = None;
        profile.memory_clock_lock = None;
        profile.gpu_clock_offset_mhz = None;
        profile.memory_clock_offset_mhz = None;
        profile.fan_curve = Some(vec![
            gputune_formats::fan_curve::CurvePoint {
                temperature_c: 0.0,
                speed_pct: 100.0,
            },
            gputune_formats::fan_curve::CurvePoint {
                temperature_c: 110.0,
                speed_pct: 100.0,
            },
        ]);
        std::fs::write(
            file.with_file_name("fans.toml"),
            toml::to_string(&profile).expect("the profile is written"),
        )
        .expect("the profile file is written");
        self
    }

    fn fan_manual_pct(&self) -> Vec<Option<u32>> {
        self.fake.state().machine.gpus[0]
            .settings
            .fan_manual_pct
            .clone()
    }

    /// Waits until the fans run at the Fans profile's full speed.
    fn wait_for_full_fans(&self) {
        let deadline = Instant::now() + PATIENCE;
        while self.fan_manual_pct() != vec![Some(100), Some(100)] {
            assert!(Instant::now() < deadline, "the curve never set the fans");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The settings GPU 0's journal lists now (none when there is no journal).
    fn journaled(&self) -> Vec<Setting> {
        let Ok(text) = std::fs::read_to_string(self.journal()) else {
            return Vec::new();
        };
        let journal: gputune_formats::files::GpuJournal =
            serde_json::from_str(&text).expect("the journal reads");
        journal.restore
    }

    /// Starts gputune with stderr lines arriving on a channel.
    fn spawn(&self, arguments: &[&str]) -> Running {
        spawn_piped(self.command(arguments))
    }

    /// The settings a run wrote, after `before` records.
    fn written_since(&self, before: usize) -> Vec<Setting> {
        self.write_log()[before..]
            .iter()
            .map(|record| record.setting)
            .collect()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The energy the run reported, in Wh.
fn reported_energy_wh(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|line| line.contains("Duration ") && line.contains("energy "))
        .unwrap_or_else(|| panic!("no summary line in {stderr}"));
    let after = line.split("energy ").nth(1).unwrap_or_default();
    after
        .split(" Wh")
        .next()
        .and_then(|number| number.trim().parse().ok())
        .unwrap_or_else(|| panic!("no energy in {line}"))
}

/// The number before `unit` after `label` in the summary line.
fn summary_figure(line: &str, label: &str, unit: &str) -> f64 {
    line.split(label)
        .nth(1)
        .and_then(|after| after.split(unit).next())
        .and_then(|number| number.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {label}… {unit} in {line}"))
}

/// Duration, energy and average power of the summary must describe one window: energy =
/// power × duration, within what the printed digits can hide.
fn assert_summary_agrees_with_itself(stderr: &str) {
    let line = stderr
        .lines()
        .find(|line| line.contains("Duration ") && line.contains("energy "))
        .unwrap_or_else(|| panic!("no summary line in {stderr}"));
    let duration_s = summary_figure(line, "Duration ", " s");
    let energy_j = summary_figure(line, "energy ", " Wh") * 3600.0;
    let power_w = summary_figure(line, "average power ", " W");
    // Printed with 2 decimals of seconds (below 10 s), 4 of Wh (below 0.1), whole watts.
    let duration_error_s = if duration_s < 10.0 { 0.005 } else { 0.05 };
    let energy_error_j = 0.000_05 * 3600.0 + 0.000_5 * 3600.0;
    let low = (power_w - 0.5) * (duration_s - duration_error_s).max(0.0) - energy_error_j;
    let high = (power_w + 0.5) * (duration_s + duration_error_s) + energy_error_j;
    assert!(
        (low..=high).contains(&energy_j),
        "{energy_j} J is not {power_w} W × {duration_s} s: {line}"
    );
}

#[test]
fn the_summary_takes_duration_energy_and_power_from_the_same_window() {
    let machine = Machine::with_run_profile(false);
    for script in ["true", "sleep 1.2"] {
        let output = machine.gputune(&["run", "--profile", "Run", "--", "sh", "-c", script]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        assert_summary_agrees_with_itself(&stderr);
    }
    assert_restored(&machine);
}

/// The kWh of the run's last line ("gputune: 0.0001 kWh, €0.0000, ...").
fn reported_kwh(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|line| line.contains(" kWh"))
        .unwrap_or_else(|| panic!("no kWh line: {stderr}"));
    line.trim_start_matches("gputune: ")
        .split(" kWh")
        .next()
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no kWh in {line}"))
}

#[test]
fn the_run_ends_with_its_kwh_and_at_the_user_s_price_its_cost_and_co2() {
    let machine = Machine::with_run_profile(false);
    let script = ["run", "--profile", "Run", "--", "sh", "-c", "sleep 1.2"];
    let output = machine.gputune(&script);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(" kWh; no price is set: set a price in cost.toml"),
        "{stderr}"
    );
    // The same energy as the summary's, in kWh (4 decimals).
    let energy_wh = reported_energy_wh(&stderr);
    assert!(
        (reported_kwh(&stderr) - energy_wh / 1000.0).abs() <= 0.000_05 + energy_wh * 0.01 / 1000.0,
        "{stderr}"
    );

    let cost_file = machine.config().join("cost.toml");
    std::fs::write(
        &cost_file,
        "price_per_kwh = 0.30\ncurrency = \"€\"\nco2_grams_per_kwh = 400\n",
    )
    .unwrap();
    let output = machine.gputune(&script);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let line = stderr
        .lines()
        .find(|line| line.contains(" kWh"))
        .unwrap_or_default();
    assert!(
        line.contains(" kWh, €0.0") && line.contains(" CO₂"),
        "{stderr}"
    );
    assert!(
        line.ends_with(&format!("at your {}.", cost_file.display())),
        "{line}"
    );

    std::fs::write(&cost_file, "price_per_kwh = 0.30\n").unwrap();
    let output = machine.gputune(&script);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("your price is not used") && stderr.contains("needs its currency"),
        "{stderr}"
    );
    assert_restored(&machine);
}

fn assert_restored(machine: &Machine) {
    assert_eq!(machine.power_limit_mw(), 450_000, "the power limit is back");
    assert_eq!(machine.gpu_clock_offset_mhz(), 0, "the offset is back");
    assert!(!machine.journal().exists(), "the journal is removed");
}

#[test]
fn a_successful_command_runs_with_the_profile_then_the_card_is_restored() {
    let machine = Machine::with_run_profile(false);
    let log = machine.config().join("run.csv");
    let before = machine.write_log().len();
    let output = machine.gputune(&[
        "run",
        "--profile",
        "Run",
        "--log",
        log.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "sleep 2; echo from the command",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        text(&output.stdout),
        "from the command\n",
        "stdio is inherited"
    );
    assert!(
        stderr.contains("applied the profile \"Run\" to GPU 0"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Put back GPU 0 (power limit 450 W, GPU clock offset +0 MHz"),
        "{stderr}"
    );
    let energy_wh = reported_energy_wh(&stderr);
    // About 2 s at a few hundred watts: a fraction of a watt-hour, never zero.
    assert!(
        energy_wh > 0.01 && energy_wh < 1.0,
        "{energy_wh} Wh: {stderr}"
    );
    assert!(stderr.contains("average power"), "{stderr}");
    assert!(stderr.contains("peak temperature"), "{stderr}");
    assert_restored(&machine);
    let written = machine.written_since(before);
    assert_eq!(
        written[..2],
        [
            Setting::PowerLimit {
                power_limit_mw: 315_000
            },
            // P0's write first, then P2's (where training runs).
            Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz: 100
            },
        ]
    );
    assert!(
        written[2..].contains(&Setting::PowerLimit {
            power_limit_mw: 450_000
        }),
        "{written:?}"
    );

    // The log holds the run's readings, at the profile's limit.
    let csv = std::fs::read_to_string(&log).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let column = header
        .iter()
        .position(|name| *name == "enforced.power.limit [W]")
        .expect("the log has the enforced power limit");
    let rows: Vec<Vec<&str>> = lines.map(|line| line.split(',').collect()).collect();
    assert!(rows.len() >= 3, "{csv}");
    assert!(
        rows.iter().all(|row| row[column].starts_with("315")),
        "{csv}"
    );
}

#[test]
fn a_failing_command_passes_its_exit_code_through_and_the_card_is_restored() {
    let machine = Machine::with_run_profile(false);
    let output = machine.gputune(&[
        "run",
        "--profile",
        "Run",
        "--",
        "sh",
        "-c",
        "sleep 1; exit 3",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("exited with status 3"), "{stderr}");
    assert!(reported_energy_wh(&stderr) > 0.0, "{stderr}");
    assert_restored(&machine);

    // A command that cannot start: 127, as from a shell, and nothing left applied.
    let output = machine.gputune(&["run", "--profile", "Run", "--", "/no/such/program"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.contains("/no/such/program could not be started"),
        "{stderr}"
    );
    assert_restored(&machine);

    // A missing profile or command is refused before anything is written.
    let before = machine.write_log().len();
    let output = machine.gputune(&["run", "--profile", "Nope", "--", "true"]);
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("No profile named \"Nope\""));
    let output = machine.gputune(&["run", "--profile", "Run"]);
    assert!(!output.status.success());
    assert_eq!(machine.write_log().len(), before);
}

#[test]
fn sigterm_is_forwarded_to_the_command_then_the_card_is_restored() {
    let machine = Machine::with_run_profile(false);
    let mut running = machine.spawn(&["run", "--profile", "Run", "--", "sleep", "60"]);
    running.wait_for_line("applied the profile");
    assert_eq!(machine.power_limit_mw(), 315_000, "applied while it runs");
    assert!(machine.journal().exists(), "the journal is written first");
    // Another gputune started meanwhile leaves the running run's journal alone.
    machine.ok(&["status"]);
    assert_eq!(machine.power_limit_mw(), 315_000);
    let started = Instant::now();
    running.signal("TERM");
    let (status, _, stderr) = running.finish();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the command was stopped, not waited for"
    );
    // sleep ended by SIGTERM: 128 + 15, as a shell reports it.
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("stopping the command"), "{stderr}");
    assert!(stderr.contains("Put back GPU 0"), "{stderr}");
    assert!(stderr.contains("energy"), "{stderr}");
    assert_restored(&machine);
}

#[test]
fn the_fan_curve_is_followed_while_the_command_runs_and_the_fans_handed_back() {
    let machine = Machine::with_run_profile(true);
    let before = machine.write_log().len();
    let output = machine.gputune(&["run", "--profile", "Run", "--", "sleep", "2"]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("following its fan curve"), "{stderr}");
    let written = machine.written_since(before);
    let full_speed = |fan_index| Setting::FanSpeed {
        fan_index,
        speed_pct: 100,
    };
    let automatic = |fan_index| Setting::FanAutomatic { fan_index };
    let position = |wanted: Setting| written.iter().position(|setting| *setting == wanted);
    for fan in 0..2 {
        let set = position(full_speed(fan)).unwrap_or_else(|| panic!("fan {fan}: {written:?}"));
        let back = position(automatic(fan)).unwrap_or_else(|| panic!("fan {fan}: {written:?}"));
        assert!(set < back, "{written:?}");
    }
    assert!(
        machine.write_log()[before..]
            .iter()
            .all(|record| record.result_code == 0),
        "{written:?}"
    );
    assert_eq!(
        machine.fake.state().machine.gpus[0].settings.fan_manual_pct,
        vec![None, None],
        "the fans are the driver's again"
    );
    assert_restored(&machine);
}

#[test]
fn after_kill_9_the_next_start_restores_from_the_journal() {
    let machine = Machine::with_run_profile(false);
    std::fs::create_dir_all(machine.config()).unwrap();
    let pid_file = machine.config().join("command.pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut running = machine.spawn(&["run", "--profile", "Run", "--", "sh", "-c", &script]);
    running.wait_for_line("applied the profile");
    wait_for_file(&pid_file);
    running.signal("KILL");
    // The command's guard ends it with gputune (job_tree.rs tests that); should it be left
    // running, it would hold the pipes: end it first.
    kill_orphan(&pid_file);
    let (status, _, _) = running.finish();
    assert_eq!(status.code(), None, "killed");
    assert_eq!(
        machine.power_limit_mw(),
        315_000,
        "left applied by the kill"
    );
    assert!(machine.journal().exists());

    let (_, stderr) = machine.ok(&["status"]);
    assert!(
        stderr.contains("left changed on GPU 0 (power limit 450 W, GPU clock offset +0 MHz"),
        "{stderr}"
    );
    assert_restored(&machine);
}

/// Waits until the command has written its pid (it has started).
fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + PATIENCE;
    while std::fs::read_to_string(path).map_or(true, |text| !text.ends_with('\n')) {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends the command a killed gputune left running.
fn kill_orphan(pid_file: &Path) {
    if let Ok(pid) = std::fs::read_to_string(pid_file) {
        let _ = Command::new("kill").arg(pid.trim()).status();
    }
}

#[test]
fn under_sudo_the_command_runs_as_the_user_who_ran_sudo() {
    if !nix::unistd::geteuid().is_root() {
        // Not root: nothing to drop; the command runs as this user, which is what is wanted.
        let machine = Machine::with_run_profile(false);
        let (stdout, _) = machine.ok(&["run", "--profile", "Run", "--", "id", "-u"]);
        assert_eq!(stdout.trim(), nix::unistd::geteuid().to_string());
        return;
    }
    let machine = Machine::with_run_profile(false);
    let nobody = nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .expect("a nobody user");
    let output = machine
        .command(&["run", "--profile", "Run", "--", "id", "-u"])
        .env("SUDO_UID", nobody.uid.to_string())
        .env("SUDO_USER", &nobody.name)
        .current_dir("/")
        .output()
        .expect("the gputune binary runs");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        text(&output.stdout).trim(),
        nobody.uid.to_string(),
        "{stderr}"
    );
    assert!(
        stderr.contains("the command runs as nobody, not as root"),
        "{stderr}"
    );
    assert_restored(&machine);
    // --keep-root keeps root, when asked.
    let output = machine
        .command(&["run", "--keep-root", "--profile", "Run", "--", "id", "-u"])
        .env("SUDO_UID", nobody.uid.to_string())
        .output()
        .expect("the gputune binary runs");
    assert_eq!(text(&output.stdout).trim(), "0");
}

#[test]
fn a_sudo_environment_that_names_no_real_user_refuses_the_command_instead_of_running_it_as_root() {
    if !nix::unistd::geteuid().is_root() {
        // Not root: there is no root to keep, and the variables are not looked at.
        let machine = Machine::with_run_profile(false);
        let output = machine
            .command(&["run", "--profile", "Run", "--", "id", "-u"])
            .env("SUDO_UID", "abc")
            .output()
            .expect("the gputune binary runs");
        assert!(output.status.success(), "{}", text(&output.stderr));
        assert_eq!(
            text(&output.stdout).trim(),
            nix::unistd::geteuid().to_string()
        );
        return;
    }
    let machine = Machine::with_run_profile(false);
    let before = machine.write_log().len();
    let marker = machine.config().join("ran-as-root");
    let script = format!("touch '{}'", marker.display());
    let nobody_uid_free = (60_000..65_000)
        .find(|uid| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(*uid))
                .ok()
                .flatten()
                .is_none()
        })
        .unwrap_or(64_999)
        .to_string();
    let cases: [(Option<&str>, Option<&str>); 6] = [
        (Some("abc"), None),
        (Some("-1"), None),
        (Some(""), None),
        (None, Some("")),
        (None, Some("no-such-user-gputune")),
        (Some(nobody_uid_free.as_str()), None),
    ];
    for (sudo_uid, sudo_user) in cases {
        for command in [
            vec!["run", "--profile", "Run", "--", "sh", "-c", script.as_str()],
            vec![
                "sweep",
                "--power-limits",
                "100",
                "--step-s",
                "2",
                "--warmup-s",
                "1",
                "--wait-s",
                "1",
                "--",
                "sh",
                "-c",
                script.as_str(),
            ],
        ] {
            let mut gputune = machine.command(&command);
            gputune.env_remove("SUDO_UID").env_remove("SUDO_USER");
            if let Some(uid) = sudo_uid {
                gputune.env("SUDO_UID", uid);
            }
            if let Some(user) = sudo_user {
                gputune.env("SUDO_USER", user);
            }
            let output = gputune.output().expect("the gputune binary runs");
            let stderr = text(&output.stderr);
            let case = format!(
                "{} with SUDO_UID={sudo_uid:?} SUDO_USER={sudo_user:?}",
                command[0]
            );
            assert!(!output.status.success(), "{case}: {stderr}");
            assert!(
                !marker.exists(),
                "{case}: the command ran as root: {stderr}"
            );
            assert!(stderr.contains("--keep-root"), "{case}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{case}: one sentence: {stderr}");
        }
    }
    // Nothing was applied for a command that was never started.
    assert_eq!(machine.write_log().len(), before);
    // --keep-root runs it as root on purpose.
    let output = machine
        .command(&[
            "run",
            "--keep-root",
            "--profile",
            "Run",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("SUDO_UID", "abc")
        .output()
        .expect("the gputune binary runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(marker.exists());
    assert_restored(&machine);
}

#[test]
fn a_second_run_on_the_same_card_is_refused_and_names_the_first() {
    let machine = Machine::with_run_profile(false);
    let mut first = machine.spawn(&["run", "--profile", "Run", "--", "sleep", "30"]);
    first.wait_for_line("applied the profile");
    let output = machine.gputune(&["run", "--profile", "Run", "--", "true"]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("is being changed by gputune run --profile Run -- sleep 30"),
        "{stderr}"
    );
    first.signal("TERM");
    let _ = first.finish();
    assert_restored(&machine);
}

#[test]
fn the_command_is_the_runs_job_for_every_client_of_the_daemon() {
    let machine = Machine::with_run_profile(false);
    let daemon = common::daemon::Daemon::start(&machine.fake);
    let pid_file = machine.config().with_file_name("job.pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let mut run = spawn_piped(daemon.client(
        &machine.fake,
        &["run", "--profile", "Run", "--", "sh", "-c", &script],
    ));
    run.wait_for_line("applied the profile");
    wait_for_file(&pid_file);
    let job_pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or_else(|error| panic!("the job wrote its pid: {error}"));
    let mut watcher =
        gputune_core::service::client::connect(&gputune_core::service::client::ConnectOptions {
            backend: gputune_core::device::BackendOptions::default(),
            socket: gputune_core::service::client::SocketChoice::Path(daemon.socket.clone()),
            folders: machine.fake.folders(),
            label: "a test watching the daemon".to_string(),
        })
        .unwrap_or_else(|error| panic!("{error}"));
    let mut marked = || match watcher.request(gputune_formats::protocol::Request::Snapshot) {
        Ok(gputune_formats::protocol::Response::Snapshot(snapshot)) => snapshot.tunings[0]
            .holders
            .iter()
            .find_map(|holder| holder.job_pid),
        other => panic!("a snapshot: {other:?}"),
    };
    let deadline = Instant::now() + PATIENCE;
    while marked() != Some(job_pid) {
        assert!(Instant::now() < deadline, "the run's job is never marked");
        std::thread::sleep(Duration::from_millis(20));
    }
    run.signal("TERM");
    let _ = run.finish();
    assert_eq!(marked(), None, "the run ended and holds nothing");
}

/// The automatic fans every put-back of the Fans profile's curve writes.
fn automatic_fans() -> Vec<Setting> {
    vec![
        Setting::FanAutomatic { fan_index: 0 },
        Setting::FanAutomatic { fan_index: 1 },
    ]
}

/// Without a daemon each gputune process runs its own engine, and they share a card by control
/// (a lock per control in the state folder): a run following a fan curve holds the fans, a
/// trial of the power limit from another process goes on beside it, a second trial of the
/// power limit and a plain apply of the fans are refused naming the holder and the control, a
/// plain apply of a free control goes through, and the one journal of the card lists both
/// sessions' controls. The trial killed with -9 is put back by the next gputune, which leaves
/// the run's fans alone; the run then puts back its fans only.
/// A power-limit trial from another process, beside a run that follows a fan curve.
const TRIAL_BESIDE_THE_CURVE: [&str; 7] = [
    "apply",
    "--try",
    "60",
    "--baseline-s",
    "0",
    "--power-limit",
    "70%",
];

#[test]
fn without_a_daemon_a_fan_curve_run_and_a_power_limit_trial_share_the_card() {
    let machine = Machine::with_run_profile(false).with_fans_profile();
    let mut run = machine.spawn(&["run", "--profile", "Fans", "--", "sleep", "60"]);
    run.wait_for_line("applied the profile");
    machine.wait_for_full_fans();
    assert_eq!(machine.power_limit_mw(), 450_000);

    let mut trial = machine.spawn(&TRIAL_BESIDE_THE_CURVE);
    trial.wait_for_line("Trying the new settings");
    assert_eq!(
        machine.power_limit_mw(),
        315_000,
        "the trial goes on beside the curve"
    );
    let mut journaled = machine.journaled();
    journaled.sort_by_key(|setting| format!("{setting:?}"));
    assert_eq!(
        journaled,
        vec![
            Setting::FanAutomatic { fan_index: 0 },
            Setting::FanAutomatic { fan_index: 1 },
            Setting::PowerLimit {
                power_limit_mw: 450_000
            },
        ],
        "one journal, both sessions' controls"
    );

    let refused = machine.gputune(&[
        "apply",
        "--try",
        "5",
        "--baseline-s",
        "0",
        "--power-limit",
        "80%",
    ]);
    let said = text(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("GPU 0's power limit is being changed by gputune apply --try 60"),
        "{said}"
    );
    let refused = machine.gputune(&["apply", "--fan-speed", "50"]);
    let said = text(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("GPU 0's fans are being changed by gputune run --profile Fans"),
        "{said}"
    );
    machine.ok(&["apply", "--gpu-clock-offset", "50"]);
    assert_eq!(
        machine.gpu_clock_offset_mhz(),
        50,
        "a free control goes through"
    );
    assert_eq!(machine.power_limit_mw(), 315_000);
    assert_eq!(machine.fan_manual_pct(), vec![Some(100), Some(100)]);

    trial.signal("KILL");
    let _ = trial.finish();
    // The next gputune puts back what the killed trial held, and only that.
    machine.ok(&["status"]);
    assert_eq!(machine.power_limit_mw(), 450_000);
    assert_eq!(machine.fan_manual_pct(), vec![Some(100), Some(100)]);
    assert_eq!(
        machine.journaled(),
        automatic_fans(),
        "the run's entries stay"
    );

    run.signal("TERM");
    let (_, _, stderr) = run.finish();
    assert!(stderr.contains("Put back GPU 0"), "{stderr}");
    assert_eq!(machine.fan_manual_pct(), vec![None, None]);
    assert_eq!(machine.power_limit_mw(), 450_000);
    assert_eq!(machine.gpu_clock_offset_mhz(), 50, "the plain apply stays");
    assert!(!machine.journal().exists(), "nothing is left to put back");
}

/// The same through the daemon: the run's fan curve and another client's power-limit trial go
/// on together, a held control is refused naming the holder, the control and until when, a
/// free control goes through, `status` names each session with what it holds, and each
/// session puts back exactly its own controls.
#[test]
fn through_the_daemon_a_fan_curve_run_and_a_power_limit_trial_share_the_card() {
    let machine = Machine::with_run_profile(false).with_fans_profile();
    let daemon = common::daemon::Daemon::start(&machine.fake);
    let client = |arguments: &[&str]| daemon.client(&machine.fake, arguments);
    let mut run = spawn_piped(client(&["run", "--profile", "Fans", "--", "sleep", "60"]));
    run.wait_for_line("applied the profile");
    machine.wait_for_full_fans();

    let mut trial = spawn_piped(client(&TRIAL_BESIDE_THE_CURVE));
    trial.wait_for_line("Trying the new settings");
    assert_eq!(
        machine.power_limit_mw(),
        315_000,
        "the trial goes on beside the curve"
    );

    let refused = client(&["apply", "--power-limit", "80%"])
        .output()
        .expect("the client runs");
    let said = text(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("GPU 0's power limit is held by a trial of gputune apply --try 60"),
        "{said}"
    );
    assert!(said.contains(" until "), "{said}");
    let refused = client(&["apply", "--fan-speed", "50"])
        .output()
        .expect("the client runs");
    let said = text(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("GPU 0's fans are held by a run of gputune run --profile Fans"),
        "{said}"
    );
    let applied = client(&["apply", "--gpu-clock-offset", "50"])
        .output()
        .expect("the client runs");
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    assert_eq!(
        machine.gpu_clock_offset_mhz(),
        50,
        "a free control goes through"
    );

    let status = client(&["status"]).output().expect("the client runs");
    let shown = text(&status.stdout);
    assert!(
        shown.contains("Session      trial holding the power limit by gputune apply --try 60"),
        "{shown}"
    );
    assert!(
        shown.contains("Session      run holding the fans by gputune run --profile Fans"),
        "{shown}"
    );

    trial.signal("INT");
    let (_, _, stderr) = trial.finish();
    assert!(stderr.contains("power limit"), "{stderr}");
    assert_eq!(machine.power_limit_mw(), 450_000);
    assert_eq!(
        machine.fan_manual_pct(),
        vec![Some(100), Some(100)],
        "the trial's end leaves the curve's fans alone"
    );
    run.signal("TERM");
    let _ = run.finish();
    assert_eq!(machine.fan_manual_pct(), vec![None, None]);
    assert_eq!(machine.power_limit_mw(), 450_000);
    assert_eq!(machine.gpu_clock_offset_mhz(), 50, "the plain apply stays");
    assert!(!daemon.journal(&machine.fake, 0).exists());
}

/// Without a daemon and without permission, a fan curve the driver refuses changes nothing, so
/// it leaves nothing journaled: no later gputune says it "could not put back" the fans, and
/// none "restores" them once the driver takes writes again (the reported case: 2 of 2, 3 of 3).
#[test]
fn a_fan_curve_the_driver_refuses_leaves_no_journal_and_nothing_to_restore() {
    let machine = Machine::with_run_profile(false).with_fans_profile();
    machine.fake.set_shared_faults("no_permission");
    let before = machine.write_log().len();
    let mut run = machine.spawn(&["run", "--profile", "Fans", "--", "sleep", "60"]);
    run.wait_for_line("could not set GPU 0's fans");
    assert!(
        !machine.journal().exists(),
        "nothing was written, so nothing is journaled"
    );
    run.signal("TERM");
    let (_, _, stderr) = run.finish();
    assert!(!stderr.contains("Could not put back"), "{stderr}");
    assert!(!machine.journal().exists(), "{stderr}");
    assert!(
        machine.write_log()[before..]
            .iter()
            .all(|record| record.result_code != 0),
        "the driver took nothing"
    );
    for _ in 0..2 {
        let status = machine.gputune(&["status"]);
        let said = text(&status.stderr);
        assert!(status.status.success(), "{said}");
        assert!(!said.contains("Could not put back"), "{said}");
    }
    machine.fake.set_shared_faults("");
    let status = machine.gputune(&["status"]);
    let said = text(&status.stderr);
    assert!(!said.contains("Restored"), "{said}");
    assert_eq!(machine.fan_manual_pct(), vec![None, None]);
}
