//! `gputune profile ...` and `gputune boot-service` as a user runs them, against the fake
//! libnvidia-ml with a temporary config folder (`GPUTUNE_CONFIG_DIR`) and state folder
//! (`GPUTUNE_STATE_DIR`): save from the card, list, show, apply (the write log says what
//! reached the card), delete, export, import, default, apply-defaults, a profile from an RTX
//! 4090 applied to the fanless H100, and unreadable files that are named and left alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::FakeMachine;
use nvidia_ml_fake::WriteRecord;
use serde_json::Value;

use crate::common;
use gputune_formats::card::Setting;

/// A fake machine with config and state folders of its own.
struct Machine {
    fake: FakeMachine,
    config: PathBuf,
}

impl Machine {
    fn new(scenario: &'static str, faults: &str, config: &Path) -> Machine {
        Machine {
            fake: FakeMachine::new(scenario, faults),
            config: config.to_path_buf(),
        }
    }

    fn state_dir(&self) -> PathBuf {
        self.fake
            .state_path()
            .parent()
            .map(|folder| folder.join("gputune-state"))
            .unwrap_or_else(|| PathBuf::from("gputune-state"))
    }

    fn profiles(&self) -> PathBuf {
        self.config.join("profiles")
    }

    fn command(&self, arguments: &[&str]) -> Command {
        let mut command = self.fake.command(arguments);
        command
            .env("GPUTUNE_STATE_DIR", self.state_dir())
            .env("GPUTUNE_RECORD_DIR", self.state_dir())
            .env("GPUTUNE_CONFIG_DIR", &self.config)
            .env_remove("GPUTUNE_INSTALL_ROOT");
        command
    }

    fn gputune(&self, arguments: &[&str]) -> Output {
        self.command(arguments)
            .output()
            .expect("the gputune binary runs")
    }

    /// Runs gputune and expects success; returns stdout and stderr.
    fn ok(&self, arguments: &[&str]) -> (String, String) {
        let output = self.gputune(arguments);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(
            output.status.success(),
            "{arguments:?} failed: {stderr}\n{stdout}"
        );
        (stdout, stderr)
    }

    fn write_log(&self) -> Vec<WriteRecord> {
        if self.fake.state_path().exists() {
            self.fake.state().write_log
        } else {
            Vec::new()
        }
    }

    fn settings_written(&self) -> Vec<Setting> {
        self.write_log()
            .into_iter()
            .filter(|record| record.result_code == 0)
            .map(|record| record.setting)
            .collect()
    }

    fn uuid(&self, gpu: usize) -> String {
        // Any read creates the fake state.
        self.ok(&["status", "--json"]);
        self.fake.state().machine.gpus[gpu].uuid.clone()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn save_list_show_apply_delete_from_the_command_line() {
    let config = tempfile::tempdir().unwrap();
    let machine = Machine::new("rtx4090", "", config.path());
    machine.ok(&[
        "apply",
        "--power-limit",
        "315W",
        "--gpu-clock-offset",
        "120",
    ]);
    let (stdout, _) = machine.ok(&["profile", "save", "Quiet", "--notes", "for the night"]);
    assert!(
        stdout.contains("Saved GPU 0 (NVIDIA GeForce RTX 4090) as the profile \"Quiet\""),
        "{stdout}"
    );
    let file = machine.profiles().join("quiet.toml");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("schema_version = 1"), "{saved}");
    assert!(saved.contains("watts = 315.0"), "{saved}");
    assert!(saved.contains("percent_of_default = 70.0"), "{saved}");
    assert!(saved.contains("gpu_clock_offset_mhz = 120"), "{saved}");
    assert!(saved.contains("notes = \"for the night\""), "{saved}");

    // Saving again under the same name needs --replace.
    let output = machine.gputune(&["profile", "save", "Quiet"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("--replace"),
        "{}",
        text(&output.stderr)
    );

    let (stdout, stderr) = machine.ok(&["profile", "list"]);
    assert_eq!(stderr, "");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{stdout}");
    assert!(lines[1].starts_with("Quiet"), "{stdout}");
    assert!(lines[1].contains("315 W (70 %)"), "{stdout}");

    let (stdout, _) = machine.ok(&["profile", "list", "--json"]);
    let json: Value = serde_json::from_str(&stdout).unwrap();
    let profile = &json["profiles"][0];
    assert_eq!(profile["name"], "Quiet");
    assert_eq!(profile["power_limit"]["watts"], 315.0);
    assert_eq!(profile["card"]["uuid"], Value::from(machine.uuid(0)));
    assert_eq!(profile["path"], Value::from(file.display().to_string()));
    assert_eq!(json["problems"], Value::Array(Vec::new()));

    let (stdout, _) = machine.ok(&["profile", "show", "quiet"]);
    assert!(stdout.contains("Profile:        Quiet"), "{stdout}");
    assert!(
        stdout.contains("Power limit:    315 W on this card, 70 % of the default on another"),
        "{stdout}"
    );
    assert!(stdout.contains("GPU offset:     +120 MHz"), "{stdout}");
    assert!(stdout.contains("Stability:      never checked"), "{stdout}");
    assert!(stdout.contains("for the night"), "{stdout}");

    // Change the card, then apply the profile: exactly its settings are written back.
    machine.ok(&["apply", "--power-limit", "400W", "--gpu-clock-offset", "0"]);
    let before = machine.write_log().len();
    let (stdout, stderr) = machine.ok(&["profile", "apply", "Quiet"]);
    // On its own card nothing is clamped or left out; the one thing said is that its clock
    // offset was never checked for stability.
    assert_eq!(
        stderr,
        "gputune: notice: GPU 0: The profile \"Quiet\" changes clocks and was never checked for stability (`gputune stability --profile \"Quiet\"` checks it).\n"
    );
    assert!(
        stdout.contains("GPU 0: Power limit set to 315 W (70 % of 450 W)."),
        "{stdout}"
    );
    let written: Vec<Setting> = machine.write_log()[before..]
        .iter()
        .map(|record| record.setting)
        .collect();
    assert_eq!(
        written,
        vec![
            Setting::PowerLimit {
                power_limit_mw: 315_000
            },
            // P0 and P2 each take the offset; P2's memory offset already was 0.
            Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz: 120
            },
            Setting::GpuClockOffsetAt {
                pstate: 2,
                offset_mhz: 120
            },
            Setting::MemoryClockOffsetAt {
                pstate: 0,
                offset_mhz: 0
            },
        ]
    );
    let settings = machine.fake.state().machine.gpus[0].settings.clone();
    assert_eq!(settings.power_limit_mw, 315_000);
    assert_eq!(settings.gpu_clock_offset_mhz, 120);

    let (stdout, _) = machine.ok(&["profile", "delete", "Quiet"]);
    assert!(stdout.contains("Deleted the profile \"Quiet\""), "{stdout}");
    assert!(!file.exists());
    let output = machine.gputune(&["profile", "show", "Quiet"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("No profile named \"Quiet\""),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn a_fan_curve_is_not_followed_by_a_one_shot_apply_and_refused_values_write_nothing() {
    let config = tempfile::tempdir().unwrap();
    let machine = Machine::new("rtx4090", "", config.path());
    let uuid = machine.uuid(0);
    std::fs::create_dir_all(machine.profiles()).unwrap();
    std::fs::write(
        machine.profiles().join("hand-written.toml"),
        format!(
            "# written by hand\nschema_version = 1\nname = \"Hand written\"\n\
             gpu_clock_lock = {{ min_mhz = 210, max_mhz = 2400 }}\n\
             fan_curve = [{{ temperature_c = 40, speed_pct = 30 }}, {{ temperature_c = 80, speed_pct = 90 }}]\n\
             [card]\nuuid = \"{uuid}\"\nname = \"NVIDIA GeForce RTX 4090\"\npci_bus_id = \"00000000:01:00.0\"\n\
             [power_limit]\npercent_of_default = 80\nwatts = 360\n"
        ),
    )
    .unwrap();
    let (stdout, stderr) = machine.ok(&["profile", "apply", "Hand written"]);
    assert!(
        stderr.contains("a one-shot command cannot follow") && stderr.contains("gputune run"),
        "{stderr}"
    );
    assert!(stdout.contains("Power limit set to 360 W"), "{stdout}");
    assert!(
        stdout.contains("GPU clock lock 210-2400 MHz applied."),
        "{stdout}"
    );
    assert!(
        !machine
            .settings_written()
            .iter()
            .any(|setting| matches!(setting, Setting::FanSpeed { .. })),
        "no fan write"
    );

    // Without administrator rights: one clear error, nothing changed.
    let mut machine = machine;
    machine.fake.set_faults("no_permission");
    let before = machine.fake.state().machine.gpus[0].settings.power_limit_mw;
    let output = machine.gputune(&["profile", "apply", "Hand written"]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("administrator rights"), "{stderr}");
    assert!(stderr.contains("Nothing was changed."), "{stderr}");
    assert_eq!(
        machine.fake.state().machine.gpus[0].settings.power_limit_mw,
        before
    );
}

#[test]
fn an_rtx4090_profile_applied_to_the_h100_uses_its_default_and_leaves_out_fans_and_offsets() {
    let config = tempfile::tempdir().unwrap();
    {
        let rtx = Machine::new("rtx4090", "", config.path());
        rtx.ok(&["apply", "--power-limit", "80%", "--gpu-clock-offset", "100"]);
        rtx.ok(&["profile", "save", "Fast 4090"]);
    }
    // Give the 4090 profile a fan curve by hand, as a user would.
    let file = config.path().join("profiles").join("fast-4090.toml");
    let mut edited = std::fs::read_to_string(&file).unwrap();
    edited.push_str(
        "\n[[fan_curve]]\ntemperature_c = 40.0\nspeed_pct = 30.0\n\n[[fan_curve]]\ntemperature_c = 85.0\nspeed_pct = 100.0\n",
    );
    std::fs::write(&file, edited).unwrap();

    let h100 = Machine::new("datacenter-fanless", "", config.path());
    let (stdout, stderr) = h100.ok(&["profile", "apply", "Fast 4090"]);
    // 80 % of the H100's 700 W default.
    assert!(
        stdout.contains("GPU 0: Power limit set to 560 W (80 % of 700 W)."),
        "{stdout}"
    );
    assert!(stderr.contains("different model"), "{stderr}");
    // The 4090's offset was never checked on the H100, so it is not applied.
    assert!(
        stderr.contains("No clock offset is applied to this NVIDIA H100"),
        "{stderr}"
    );
    assert!(stderr.contains("no controllable fans"), "{stderr}");
    assert_eq!(
        h100.settings_written(),
        vec![Setting::PowerLimit {
            power_limit_mw: 560_000
        }],
        "nothing but the power limit reaches the H100"
    );
    assert!(
        h100.write_log()
            .iter()
            .all(|record| record.result_code == 0),
        "no write is refused by the driver: {:?}",
        h100.write_log()
    );
}

#[test]
fn export_import_default_and_apply_defaults() {
    let config = tempfile::tempdir().unwrap();
    let machine = Machine::new("8x-rtx4090", "", config.path());
    machine.ok(&["apply", "--gpu", "2", "--power-limit", "300W"]);
    let output = machine.gputune(&["profile", "save", "Needs a GPU"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("--gpu"),
        "{}",
        text(&output.stderr)
    );
    machine.ok(&["profile", "save", "Card 2", "--gpu", "2"]);
    machine.ok(&["profile", "save", "Card 3", "--gpu", "3"]);

    let exported = config.path().join("shared-card-2.toml");
    let (stdout, _) = machine.ok(&["profile", "export", "Card 2", exported.to_str().unwrap()]);
    assert!(stdout.contains("Exported"), "{stdout}");
    // Importing a name that exists is refused; after a delete it comes back.
    let output = machine.gputune(&["profile", "import", exported.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("already exists"),
        "{}",
        text(&output.stderr)
    );
    machine.ok(&["profile", "delete", "Card 2"]);
    let (stdout, _) = machine.ok(&["profile", "import", exported.to_str().unwrap()]);
    assert!(
        stdout.contains("Imported the profile \"Card 2\""),
        "{stdout}"
    );
    // A file that is not a profile is not imported, and export does not overwrite it.
    let foreign = config.path().join("notes.toml");
    std::fs::write(&foreign, "title = \"my notes\"\n").unwrap();
    let output = machine.gputune(&["profile", "import", foreign.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("notes.toml"),
        "{}",
        text(&output.stderr)
    );
    let output = machine.gputune(&["profile", "export", "Card 2", foreign.to_str().unwrap()]);
    assert!(!output.status.success());
    assert_eq!(
        std::fs::read_to_string(&foreign).unwrap(),
        "title = \"my notes\"\n"
    );

    let (stdout, _) = machine.ok(&["profile", "default", "Card 2"]);
    assert!(stdout.contains("is now the default profile"), "{stdout}");
    machine.ok(&["profile", "default", "Card 3"]);
    let (stdout, _) = machine.ok(&["profile", "list"]);
    assert_eq!(
        stdout.matches("default").count(),
        2,
        "one default per card: {stdout}"
    );

    // At boot: every card with a default gets it, the others are left alone.
    machine.ok(&["apply", "--gpu", "2", "--power-limit", "450W"]);
    let before = machine.write_log().len();
    let (stdout, _) = machine.ok(&["profile", "apply-defaults", "--retry-s", "5"]);
    assert!(stdout.contains("GPU 2"), "{stdout}");
    assert!(stdout.contains("GPU 0 ("), "{stdout}");
    assert!(stdout.contains("no default profile"), "{stdout}");
    let applied: Vec<(u32, Setting)> = machine.write_log()[before..]
        .iter()
        .map(|record| (record.gpu_index, record.setting))
        .collect();
    assert!(
        applied.contains(&(
            2,
            Setting::PowerLimit {
                power_limit_mw: 300_000
            }
        )),
        "{applied:?}"
    );
    assert!(
        applied.iter().all(|(gpu, _)| *gpu == 2 || *gpu == 3),
        "{applied:?}"
    );
    assert_eq!(
        machine.fake.state().machine.gpus[2].settings.power_limit_mw,
        300_000
    );
}

#[test]
fn apply_defaults_waits_for_the_driver_then_says_why_it_gave_up() {
    let config = tempfile::tempdir().unwrap();
    let machine = Machine::new("rtx4090", "", config.path());
    machine.ok(&["profile", "save", "Boot"]);
    machine.ok(&["profile", "default", "Boot"]);
    let mut machine = machine;
    machine.fake.set_faults("driver_not_loaded");
    let output = machine.gputune(&["profile", "apply-defaults", "--retry-s", "3"]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("does not answer yet"), "{stderr}");
    assert!(
        stderr.contains("No default profile was applied."),
        "{stderr}"
    );
}

#[test]
fn unreadable_profile_files_are_named_and_left_alone() {
    let config = tempfile::tempdir().unwrap();
    let machine = Machine::new("rtx4090", "", config.path());
    machine.ok(&["profile", "save", "Good"]);
    let broken = machine.profiles().join("broken.toml");
    let future = machine.profiles().join("future.toml");
    std::fs::write(&broken, "schema_version = 1\nname = \"half").unwrap();
    let future_text = std::fs::read_to_string(machine.profiles().join("good.toml"))
        .unwrap()
        .replace("schema_version = 1", "schema_version = 2")
        .replace("name = \"Good\"", "name = \"Future\"");
    std::fs::write(&future, &future_text).unwrap();

    let (stdout, stderr) = machine.ok(&["profile", "list"]);
    assert!(stdout.contains("Good"), "{stdout}");
    assert!(stderr.contains(&broken.display().to_string()), "{stderr}");
    assert!(stderr.contains(&future.display().to_string()), "{stderr}");
    assert!(stderr.contains("schema version 2"), "{stderr}");
    let (stdout, _) = machine.ok(&["profile", "list", "--json"]);
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["problems"].as_array().map(Vec::len), Some(2));

    let output = machine.gputune(&["profile", "apply", "broken"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("broken.toml is damaged"),
        "{}",
        text(&output.stderr)
    );
    // Saving a profile whose file name is taken by a broken file picks another name.
    machine.ok(&["profile", "save", "Broken"]);
    assert!(machine.profiles().join("broken-2.toml").exists());
    machine.ok(&["profile", "default", "Good"]);
    assert_eq!(
        std::fs::read_to_string(&broken).unwrap(),
        "schema_version = 1\nname = \"half"
    );
    assert_eq!(std::fs::read_to_string(&future).unwrap(), future_text);
}

#[test]
fn under_sudo_the_profiles_are_the_invoking_user_s() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let config = tempfile::tempdir().unwrap();
    let machine = Machine::new("rtx4090", "", config.path());
    let nobody = nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .expect("a nobody user");
    let output = machine
        .command(&["profile", "list"])
        .env_remove("GPUTUNE_CONFIG_DIR")
        .env("SUDO_UID", nobody.uid.to_string())
        .output()
        .unwrap();
    let folder = nobody.dir.join(".config").join("gputune").join("profiles");
    assert!(
        text(&output.stdout).contains(&folder.display().to_string()),
        "{}",
        text(&output.stdout)
    );
}

/// Whether `text` holds a character that can drive a terminal: ESC, a C1 control, or a
/// bidirectional control such as U+202E (line breaks and tabs are layout).
fn has_terminal_control(text: &str) -> bool {
    text.chars().any(|character| {
        !matches!(character, '\n' | '\t') && gputune_core::text::is_unsafe(character)
    })
}

#[test]
fn file_names_with_terminal_escapes_are_shown_escaped_in_text_and_json() {
    let config = tempfile::tempdir().unwrap();
    let machine = Machine::new("rtx4090", "", config.path());
    machine.ok(&["profile", "save", "Plain"]);
    let saved = std::fs::read_to_string(machine.profiles().join("plain.toml")).unwrap();
    // A profile whose name is fine, in a file whose name clears the screen and reverses text.
    let hostile_name = "\u{1b}[2J\u{1b}]0;owned\u{7}\u{202E}lmth.\u{9b}31m.toml";
    let hostile = machine.profiles().join(hostile_name);
    std::fs::write(
        &hostile,
        saved.replace("name = \"Plain\"", "name = \"Evil\""),
    )
    .unwrap();

    let (stdout, stderr) = machine.ok(&["profile", "show", "Evil"]);
    assert!(!has_terminal_control(&stdout), "{stdout:?}");
    assert!(!has_terminal_control(&stderr), "{stderr:?}");
    assert!(stdout.contains("\\u{1b}[2J"), "{stdout:?}");
    assert!(stdout.contains("\\u{202e}"), "{stdout:?}");

    for arguments in [
        vec!["profile", "list"],
        vec!["profile", "export", "Evil", "/dev/null/x"],
        vec!["profile", "delete", "Nope"],
    ] {
        let output = machine.gputune(&arguments);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(!has_terminal_control(&stdout), "{arguments:?}: {stdout:?}");
        assert!(!has_terminal_control(&stderr), "{arguments:?}: {stderr:?}");
    }

    // JSON: every unsafe character is a \u escape, and the string decodes to the real name.
    let (stdout, _) = machine.ok(&["profile", "list", "--json"]);
    assert!(!has_terminal_control(&stdout), "{stdout:?}");
    assert!(stdout.contains("\\u202e"), "{stdout}");
    let json: Value = serde_json::from_str(&stdout).unwrap();
    let paths: Vec<&str> = json["profiles"]
        .as_array()
        .map(|profiles| profiles.iter().filter_map(|p| p["path"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        paths.contains(&hostile.to_str().unwrap()),
        "the JSON path is the real file: {paths:?}"
    );

    // A file that does not read is named escaped too, in the text and in the JSON.
    std::fs::write(
        machine.profiles().join("\u{1b}[31mbroken\u{202E}.toml"),
        "not toml [",
    )
    .unwrap();
    for arguments in [vec!["profile", "list"], vec!["profile", "list", "--json"]] {
        let (stdout, stderr) = machine.ok(&arguments);
        assert!(!has_terminal_control(&stdout), "{arguments:?}: {stdout:?}");
        assert!(!has_terminal_control(&stderr), "{arguments:?}: {stderr:?}");
    }
    // The tuned card is not touched by reading profiles.
    assert!(machine.settings_written().is_empty());
}
