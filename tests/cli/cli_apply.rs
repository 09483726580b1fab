//! `gputune apply` as a user runs it, against the fake libnvidia-ml: applying and reading
//! back, refusing bad values before any write, a user without administrator rights, and
//! `--try` ending by its timer, Ctrl-C, SIGTERM, `kill -9` (the next start restores) and a GPU
//! lost mid-trial. The fake's write log says which hardware writes happened.

use std::path::PathBuf;
use std::process::Output;

use common::FakeMachine;
use common::process::{Running, spawn_piped};
use nvidia_ml_fake::{WriteRecord, save_state};

use crate::common;
use gputune_core::tuning::state_folder::EngineJournal;
use gputune_formats::card::Setting;

/// NVML_ERROR_NO_PERMISSION.
const NO_PERMISSION: u32 = 4;

/// A fake machine; gputune's state folder (locks, journals) is its own.
struct Machine {
    fake: FakeMachine,
}

impl Machine {
    fn new(scenario: &'static str, faults: &str) -> Machine {
        Machine {
            fake: FakeMachine::new(scenario, faults),
        }
    }

    fn state_dir(&self) -> PathBuf {
        self.fake.state_dir()
    }

    fn journal(&self) -> PathBuf {
        self.fake.journal(0)
    }

    fn gputune(&self, arguments: &[&str]) -> Output {
        self.fake.gputune(arguments)
    }

    fn write_log(&self) -> Vec<WriteRecord> {
        self.fake.write_log()
    }

    fn power_limit_mw(&self, gpu: usize) -> u32 {
        self.fake.power_limit_mw(gpu)
    }

    /// Starts `gputune` with its stdout and stderr piped; stderr lines arrive on the channel.
    fn spawn(&self, arguments: &[&str]) -> Running {
        spawn_piped(self.fake.command(arguments))
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a failure with exactly one sentence on stderr, and returns it.
fn one_sentence_failure(output: &Output) -> String {
    let stderr = text(&output.stderr);
    assert!(
        !output.status.success(),
        "expected a failure; stderr {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    let line = lines[0];
    assert!(
        line.starts_with("gputune: ") && line.ends_with('.'),
        "{line}"
    );
    line.to_string()
}

#[test]
fn applies_watts_and_reads_the_enforced_limit_back() {
    let machine = Machine::new("rtx4090", "");
    let output = machine.gputune(&["apply", "--power-limit", "315W"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        "GPU 0: Power limit set to 315 W (70 % of 450 W); the card enforces 315 W.\n"
    );
    assert_eq!(text(&output.stderr), "");
    assert_eq!(machine.power_limit_mw(0), 315_000);
    let log = machine.write_log();
    assert_eq!(log.len(), 1);
    assert_eq!(
        log[0].setting,
        Setting::PowerLimit {
            power_limit_mw: 315_000
        }
    );
    assert_eq!(log[0].result_code, 0);
    assert!(
        !machine.journal().exists(),
        "a plain apply writes no journal"
    );
}

#[test]
fn percent_and_bare_numbers_are_understood() {
    let machine = Machine::new("rtx4090", "");
    let output = machine.gputune(&["apply", "--power-limit", "80%"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("Power limit set to 360 W (80 % of 450 W)"),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(machine.power_limit_mw(0), 360_000);
    let output = machine.gputune(&["apply", "--power-limit", "300"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(machine.power_limit_mw(0), 300_000);

    let output = machine.gputune(&[
        "apply",
        "--lock-gpu-clocks",
        "210,2520",
        "--gpu-clock-offset",
        "-150",
        "--fan-speed",
        "60",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let settings = machine.fake.state().machine.gpus[0].settings.clone();
    assert_eq!(
        settings
            .gpu_locked_clocks
            .map(|range| (range.min_mhz, range.max_mhz)),
        Some((210, 2520))
    );
    assert_eq!(settings.gpu_clock_offset_mhz, -150);
    assert_eq!(
        settings.gpu_clock_offset_in(2),
        -150,
        "and in P2, where training runs"
    );
    assert_eq!(settings.fan_manual_pct, vec![Some(60), Some(60)]);
    assert!(
        text(&output.stdout)
            .contains("GPU clock offset set to -150 MHz; the card reports -150 MHz (P0, P2)."),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn invalid_values_are_one_sentence_and_write_nothing() {
    let machine = Machine::new("rtx4090", "");
    let cases: [&[&str]; 18] = [
        &["--power-limit", "700W"],
        &["--power-limit", "10%"],
        &["--power-limit", "lots"],
        &["--power-limit", "NaN"],
        &["--power-limit", "-50W"],
        &["--power-limit", "1e300W"],
        &["--lock-gpu-clocks", "2500,210"],
        &["--lock-gpu-clocks", "210,99999"],
        &["--lock-mem-clocks", "1,2"],
        &["--gpu-clock-offset", "-5000"],
        &["--mem-clock-offset", "99999999999"],
        &["--fan-speed", "10"],
        &["--fan-speed", "-5"],
        // One good value does not get written when another is refused.
        &["--power-limit", "300W", "--fan-speed", "250"],
        &["--lock-gpu-clocks", "210,2500", "--reset-gpu-clocks"],
        &["--gpu", "7", "--power-limit", "300"],
        &["--power-limit", "300", "--try", "0"],
        &[],
    ];
    for arguments in cases {
        let mut full = vec!["apply"];
        full.extend_from_slice(arguments);
        let output = machine.gputune(&full);
        let sentence = one_sentence_failure(&output);
        assert!(
            sentence.len() > "gputune: ".len() + 10,
            "{arguments:?}: {sentence}"
        );
        assert!(
            machine.write_log().is_empty(),
            "{arguments:?} wrote something"
        );
    }
    let refused = one_sentence_failure(&machine.gputune(&["apply", "--power-limit", "700W"]));
    assert_eq!(
        refused,
        "gputune: A power limit of 700 W is outside this GPU's range of 150 W to 600 W (33 % to 133 % of its 450 W default)."
    );
    // A number without a unit that only a percentage makes sense of is a question, not 70 W.
    let asked = one_sentence_failure(&machine.gputune(&["apply", "--power-limit", "70"]));
    assert!(
        asked.contains("did you mean 70 % (315 W) or 70 W?"),
        "{asked}"
    );
    assert!(machine.write_log().is_empty(), "nothing written");
    // One the card takes as watts is watts, as before.
    assert!(
        machine
            .gputune(&["apply", "--power-limit", "315"])
            .status
            .success()
    );
    assert_eq!(machine.power_limit_mw(0), 315_000);
    let refused = one_sentence_failure(&machine.gputune(&["apply", "--fan-speed", "10"]));
    assert!(
        refused.contains("10 %") && refused.contains("30-100 %"),
        "{refused}"
    );
}

#[test]
fn without_administrator_rights_the_refusal_is_clear_and_nothing_is_applied() {
    let machine = Machine::new("rtx4090", "no_permission");
    let output = machine.gputune(&["apply", "--power-limit", "300W", "--fan-speed", "60"]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("needs administrator rights"), "{stderr}");
    assert!(stderr.contains("sudo gputune daemon install"), "{stderr}");
    assert!(stderr.contains("Nothing was changed."), "{stderr}");
    let log = machine.write_log();
    assert_eq!(log.len(), 1, "the refused write is the only one: {log:?}");
    assert_eq!(
        log[0].setting,
        Setting::PowerLimit {
            power_limit_mw: 300_000
        }
    );
    assert_eq!(log[0].result_code, NO_PERMISSION);
    assert_eq!(machine.power_limit_mw(0), 450_000);

    // A trial refused the same way leaves no journal behind.
    let output = machine.gputune(&[
        "apply",
        "--power-limit",
        "300W",
        "--try",
        "5",
        "--baseline-s",
        "0",
    ]);
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("administrator rights"));
    assert!(!machine.journal().exists());
}

#[test]
fn a_fanless_card_refuses_a_fan_speed_and_nothing_is_written() {
    let machine = Machine::new("datacenter-fanless", "");
    let refused = one_sentence_failure(&machine.gputune(&["apply", "--fan-speed", "50"]));
    assert_eq!(refused, "gputune: This GPU has no controllable fans.");
    let output = machine.gputune(&["apply", "--fan-speed", "50", "--try", "5"]);
    one_sentence_failure(&output);
    assert!(machine.write_log().is_empty());
    assert!(!machine.journal().exists());
}

#[test]
fn several_gpus_need_a_choice() {
    let machine = Machine::new("8x-rtx4090", "");
    let refused = one_sentence_failure(&machine.gputune(&["apply", "--power-limit", "300"]));
    assert!(
        refused.contains("8 GPUs") && refused.contains("--gpu"),
        "{refused}"
    );
    assert!(machine.write_log().is_empty());

    let uuid = machine.fake.state().machine.gpus[5].uuid.clone();
    let output = machine.gputune(&[
        "apply",
        "--gpu",
        "3",
        "--gpu",
        &uuid,
        "--power-limit",
        "300",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let written: Vec<u32> = machine
        .write_log()
        .iter()
        .map(|record| record.gpu_index)
        .collect();
    assert_eq!(written, vec![3, 5]);
    assert_eq!(machine.power_limit_mw(3), 300_000);
    assert_eq!(machine.power_limit_mw(0), 450_000);
}

#[test]
fn a_trial_puts_every_setting_back_and_prints_the_table() {
    let machine = Machine::new("rtx4090", "");
    assert!(machine.gputune(&["status"]).status.success());
    let before = machine.fake.state().machine.gpus[0].settings.clone();
    let output = machine.gputune(&[
        "apply",
        "--power-limit",
        "300W",
        "--lock-gpu-clocks",
        "210,2500",
        "--gpu-clock-offset",
        "100",
        "--fan-speed",
        "70",
        "--try",
        "2",
        "--baseline-s",
        "1",
    ]);
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(machine.fake.state().machine.gpus[0].settings, before);
    assert!(!machine.journal().exists());
    for expected in [
        "Before",
        "During",
        "Power, average",
        " W",
        "MHz",
        "°C",
        "Wh",
    ] {
        assert!(stdout.contains(expected), "{expected} in {stdout}");
    }
    assert!(stderr.contains("s left"), "{stderr}");
    assert!(
        stderr.contains("GPU 0: Time is up: put back power limit 450 W"),
        "{stderr}"
    );
    // The lock was never set by gputune (NVML cannot read it): reset, and said so.
    assert!(
        stderr.contains("clocks were reset to the driver's default range (unlocked)"),
        "{stderr}"
    );
    assert!(stderr.contains("no earlier lock on record"), "{stderr}");
    let settings: Vec<Setting> = machine
        .write_log()
        .iter()
        .map(|record| record.setting)
        .collect();
    assert_eq!(
        settings,
        vec![
            // Before the baseline: the limit the card has, written again to learn whether the
            // driver takes writes at all (a trial without permission fails before measuring).
            Setting::PowerLimit {
                power_limit_mw: 450_000
            },
            Setting::PowerLimit {
                power_limit_mw: 300_000
            },
            Setting::LockGpuClocks {
                min_mhz: 210,
                max_mhz: 2500
            },
            // An offset reaches P0 and P2 (where training runs), each put back on its own.
            Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz: 100
            },
            Setting::GpuClockOffsetAt {
                pstate: 2,
                offset_mhz: 100
            },
            Setting::FanSpeed {
                fan_index: 0,
                speed_pct: 70
            },
            Setting::FanSpeed {
                fan_index: 1,
                speed_pct: 70
            },
            Setting::PowerLimit {
                power_limit_mw: 450_000
            },
            Setting::ResetGpuClocks,
            Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz: 0
            },
            Setting::GpuClockOffsetAt {
                pstate: 2,
                offset_mhz: 0
            },
            Setting::FanAutomatic { fan_index: 0 },
            Setting::FanAutomatic { fan_index: 1 },
        ]
    );
}

/// Starts a long trial of 300 W and waits until it is applied and counting down.
fn start_long_trial(machine: &Machine) -> Running {
    let mut running = machine.spawn(&[
        "apply",
        "--power-limit",
        "300W",
        "--try",
        "600",
        "--baseline-s",
        "1",
    ]);
    running.wait_for_line("Trying the new settings");
    assert_eq!(machine.power_limit_mw(0), 300_000);
    assert!(
        machine.journal().exists(),
        "the journal is written before the trial applies"
    );
    running
}

/// Ctrl-C and SIGTERM end a trial normally: the card is put back, the table printed, exit 0.
#[test]
fn ctrl_c_and_sigterm_put_the_card_back() {
    for signal in ["INT", "TERM"] {
        let machine = Machine::new("rtx4090", "");
        let running = start_long_trial(&machine);
        running.signal(signal);
        let (status, stdout, stderr) = running.finish();
        assert_eq!(status.code(), Some(0), "SIG{signal}: {stderr}");
        assert_eq!(machine.power_limit_mw(0), 450_000, "SIG{signal}");
        assert!(!machine.journal().exists(), "SIG{signal}");
        assert!(stderr.contains("Trial stopped early."), "{stderr}");
        assert!(
            stderr.contains("GPU 0: Reverted: put back power limit 450 W."),
            "{stderr}"
        );
        assert!(stdout.contains("Power, average"), "{stdout}");
        drop(machine);
    }
}

#[test]
fn after_kill_9_the_next_start_restores_from_the_journal() {
    let machine = Machine::new("rtx4090", "");
    let mut running = start_long_trial(&machine);
    running.child.kill().expect("SIGKILL is sent");
    let _ = running.finish();
    assert!(
        machine.journal().exists(),
        "a killed trial leaves its journal"
    );
    assert_eq!(machine.power_limit_mw(0), 300_000);

    let output = machine.gputune(&["status"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(
            "gputune: notice: Restored the settings gputune apply --power-limit 300W --try 600"
        ) && stderr.ends_with("left changed on GPU 0 (power limit 450 W).\n"),
        "{stderr}"
    );
    assert_eq!(machine.power_limit_mw(0), 450_000);
    assert!(!machine.journal().exists());

    let output = machine.gputune(&["status"]);
    assert_eq!(text(&output.stderr), "", "restored once only");
}

#[test]
fn a_gpu_lost_during_a_trial_keeps_the_journal_for_the_next_start() {
    // The fault counts device calls across processes; the test makes the GPU fall off the bus
    // mid-trial by moving the count to the limit.
    let limit = 1_000_000;
    let machine = Machine::new("rtx4090", &format!("gpu_lost_after={limit}"));
    let running = start_long_trial(&machine);
    let mut state = machine.fake.state();
    state.device_calls = limit;
    save_state(machine.fake.state_path(), &state).expect("the fake state saves");
    let (status, _, stderr) = running.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("GPU 0 stopped answering"), "{stderr}");
    assert!(stderr.contains("journal is kept"), "{stderr}");
    assert!(
        machine.journal().exists(),
        "the journal stays for the next start"
    );
    assert_eq!(machine.power_limit_mw(0), 300_000);

    // The GPU is back (the fault gone): the next start restores.
    let mut machine = machine;
    machine.fake.set_faults("");
    let output = machine.gputune(&["status"]);
    assert!(
        text(&output.stderr).contains("left changed on GPU 0 (power limit 450 W)"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(machine.power_limit_mw(0), 450_000);
    assert!(!machine.journal().exists());
}

#[test]
fn damaged_oversized_and_foreign_journals_are_set_aside_and_never_block_a_trial() {
    let journals: [(&str, String); 3] = [
        ("damaged", "{ half a journal".to_string()),
        (
            "20,000 entries",
            format!(
                r#"{{"format_version":2,"backend":"nvml","uuid":"{}","index":0,"restore":[{}],"by":"x","written_at_ms":0}}"#,
                FakeMachine::new("rtx4090", "").uuid(0),
                vec![r#""ResetGpuClocks""#; 20_000].join(",")
            ),
        ),
        ("unknown version", r#"{"format_version":99}"#.to_string()),
    ];
    for (kind, content) in journals {
        let machine = Machine::new("rtx4090", "");
        std::fs::create_dir_all(machine.state_dir()).expect("the state folder is made");
        std::fs::write(machine.journal(), &content).expect("the journal is written");
        let output = machine.gputune(&["status"]);
        assert!(output.status.success(), "{kind}: status still runs");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(&machine.journal().display().to_string()),
            "{kind}: {stderr}"
        );
        assert!(stderr.contains("was moved to"), "{kind}: {stderr}");
        assert!(!machine.journal().exists(), "{kind}: set aside");
        let aside: Vec<String> = std::fs::read_dir(machine.state_dir())
            .expect("the state folder reads")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains("set-aside"))
            .collect();
        assert_eq!(
            aside.len(),
            1,
            "{kind}: kept for the user to look at: {aside:?}"
        );
        // A new trial is not blocked by it.
        let output = machine.gputune(&[
            "apply",
            "--power-limit",
            "300",
            "--try",
            "1",
            "--baseline-s",
            "0",
        ]);
        assert!(output.status.success(), "{kind}: {}", text(&output.stderr));
        assert_eq!(machine.power_limit_mw(0), 450_000, "{kind}");
    }
}

#[test]
fn a_simulator_journal_left_behind_does_not_block_real_trials() {
    let machine = Machine::new("rtx4090", "");
    std::fs::create_dir_all(machine.state_dir()).expect("the state folder is made");
    let journal = machine.state_dir().join("journal-GPU-simulated.json");
    std::fs::write(
        &journal,
        r#"{"format_version": 2, "backend": "sim", "uuid": "GPU-simulated", "index": 0,
            "restore": [{"PowerLimit": {"power_limit_mw": 450000}}], "by": "gputune", "written_at_ms": 0}"#,
    )
    .expect("the journal is written");
    let output = machine.gputune(&["status"]);
    assert!(output.status.success());
    assert_eq!(text(&output.stderr), "");
    assert!(!journal.exists());
    assert!(machine.write_log().is_empty());
}

/// A daemon or CLI upgraded in place meets the journal the release before protocol 5 left
/// (format 2, settings in protocol 4's shape): it puts the card back exactly as it says.
#[test]
fn a_journal_of_format_2_from_the_release_before_is_put_back_in_full() {
    let machine = Machine::new("rtx4090", "");
    std::fs::create_dir_all(machine.state_dir()).expect("the state folder is made");
    let golden = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/formats/1d84280/journal-v2.json"),
    )
    .expect("the golden journal of 1d84280 reads");
    let old = golden.replace(
        "GPU-5a1e0c2d-0000-4000-8000-000000000001",
        &machine.fake.uuid(0),
    );
    assert!(
        old.contains(r#""format_version": 2"#) && old.contains("PowerLimit"),
        "{old}"
    );
    std::fs::write(machine.journal(), old).expect("the journal is written");

    let output = machine.gputune(&["status"]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("Restored the settings gputune apply --try 60 (pid 4242, user alice) left changed on GPU 0"),
        "{stderr}"
    );
    let settings = machine.fake.settings(0);
    assert_eq!(settings.power_limit_mw, 315_000);
    assert_eq!(settings.gpu_clock_offset_mhz, -150);
    assert_eq!(settings.memory_clock_offset_mhz, 500);
    // Each lock is written, then reset, as the journal lists them.
    assert_eq!(settings.gpu_locked_clocks, None);
    assert_eq!(settings.memory_locked_clocks, None);
    assert_eq!(settings.fan_manual_pct, vec![None, Some(55)]);
    assert!(
        !machine.journal().exists(),
        "a journal put back in full is removed"
    );
}

#[test]
fn the_journal_of_the_previous_gputune_is_restored_once() {
    let machine = Machine::new("rtx4090", "");
    assert!(
        machine
            .gputune(&["apply", "--power-limit", "300W"])
            .status
            .success()
    );
    std::fs::write(
        machine.state_dir().join("journal.json"),
        format!(
            r#"{{"format_version": 1, "backend": "nvml", "owner": null, "gpus": [
                {{"uuid": "{}", "index": 0, "restore": [{{"PowerLimit": {{"power_limit_mw": 450000}}}}]}}]}}"#,
            machine.fake.uuid(0)
        ),
    )
    .expect("the journal is written");
    let output = machine.gputune(&["status"]);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("an older gputune left changed on GPU 0 (power limit 450 W)"),
        "{stderr}"
    );
    assert_eq!(machine.power_limit_mw(0), 450_000);
    assert!(!machine.state_dir().join("journal.json").exists());
}

#[test]
fn a_trial_on_several_gpus_is_one_session_that_ends_on_every_card_together() {
    let machine = Machine::new("8x-rtx4090", "");
    let output = machine.gputune(&[
        "apply",
        "--gpu",
        "2",
        "--gpu",
        "6",
        "--power-limit",
        "70%",
        "--try",
        "2",
        "--baseline-s",
        "0",
    ]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for gpu in [2, 6] {
        assert!(
            stderr.contains(&format!(
                "GPU {gpu}: Time is up: put back power limit 450 W"
            )),
            "{stderr}"
        );
        assert_eq!(machine.power_limit_mw(gpu), 450_000);
    }
    // Both cards were written before either was put back: one trial, not two in a row.
    let limits: Vec<(u32, u32)> = machine
        .write_log()
        .iter()
        .filter_map(|record| match record.setting {
            Setting::PowerLimit { power_limit_mw } => Some((record.gpu_index, power_limit_mw)),
            _ => None,
        })
        .collect();
    assert_eq!(
        limits,
        [(2, 315_000), (6, 315_000), (2, 450_000), (6, 450_000)],
        "{limits:?}"
    );
}

#[test]
fn a_failure_the_command_reports_is_one_sentence_without_a_log_line_repeating_it() {
    // NVML missing: the simulator stands in, and a command that changes settings says why it
    // will not (the fallback's log warning said it again).
    let machine = Machine::new("rtx4090", "");
    let output = machine
        .fake
        .command(&["apply", "--power-limit", "300W"])
        .env("GPUTUNE_NVML_LIB", "/no/such/libnvidia-ml.so.1")
        .output()
        .expect("gputune runs");
    let line = one_sentence_failure(&output);
    assert!(line.contains("There is no NVIDIA GPU to change"), "{line}");
    // One machine at a time holds the fake's environment.
    drop(machine);

    // A driver slower than the deadline: the timeout is the command's error (the worker's log
    // error said it again).
    let slow = Machine::new("rtx4090", "slow_ms=400");
    for arguments in [vec!["status"], vec!["apply", "--power-limit", "300W"]] {
        let output = slow
            .fake
            .command(&arguments)
            .env("GPUTUNE_DRIVER_TIMEOUT_MS", "100")
            .output()
            .expect("gputune runs");
        let line = one_sentence_failure(&output);
        assert!(
            line.contains("did not answer within"),
            "{arguments:?}: {line}"
        );
    }
    assert!(slow.write_log().is_empty(), "nothing was written");

    // GPUTUNE_LOG still shows the log when asked.
    let output = slow
        .fake
        .command(&["status"])
        .env("GPUTUNE_DRIVER_TIMEOUT_MS", "100")
        .env("GPUTUNE_LOG", "warn")
        .output()
        .expect("gputune runs");
    assert!(
        text(&output.stderr).contains("ERROR gputune_core::device::worker"),
        "{}",
        text(&output.stderr)
    );
}

/// A journal entry that asks for what the card already runs (fans automatic on automatic
/// fans: a phantom, left by a write that never happened) is set aside without a word and
/// without a write: no "could not put back" from every command while the driver refuses
/// writes, no "Restored" for a change that never happened once it takes them.
#[test]
fn a_phantom_journal_entry_is_dropped_without_a_write_or_a_message() {
    let machine = Machine::new("rtx4090", "");
    std::fs::create_dir_all(machine.state_dir()).expect("the state folder is made");
    let uuid = machine.fake.uuid(0);
    let journal = gputune_formats::files::GpuJournal::new(
        gputune_formats::card::BackendKind::Nvml,
        &uuid,
        0,
        vec![
            Setting::FanAutomatic { fan_index: 0 },
            Setting::FanAutomatic { fan_index: 1 },
        ],
        "the gputune window (pid 1, user alice)",
    );
    gputune_core::tuning::state_folder::StateFolder::open(&machine.state_dir())
        .and_then(|folder| folder.write_journal(&journal))
        .expect("the journal is planted");
    machine.fake.set_shared_faults("no_permission");
    let status = machine.gputune(&["status"]);
    let said = text(&status.stderr);
    assert!(status.status.success(), "{said}");
    assert!(!said.contains("Could not put back"), "{said}");
    assert!(!said.contains("Restored"), "{said}");
    assert!(!machine.journal().exists(), "{said}");
    assert!(machine.fake.write_log().is_empty(), "nothing to write");
}
