//! `gputune stability` and `gputune scan` against the fake libnvidia-ml, whose cards get the
//! simulated device's silicon margin: a check at stock finds nothing wrong and changes
//! nothing; a profile past the margin is found unstable and put back; an Xid ends a check;
//! Ctrl-C, SIGTERM and kill -9 mid-check and mid-scan put the card back; the scanner stops
//! within a step of the margin and confirms a stable offset; profiles remember their check.

use std::process::Output;

use common::FakeMachine;
use common::daemon::{Daemon, wait_until};
use common::process::spawn_piped;
use serde_json::Value;

use crate::common;

fn text(bytes: &[u8]) -> String {
    common::text(bytes)
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is JSON ({error}): {}\nstderr: {}",
            text(&output.stdout),
            text(&output.stderr)
        )
    })
}

/// A 4090 with a profile `name` that sets `offset_mhz` (saved, then the card put back to 0).
fn with_offset_profile(machine: &FakeMachine, name: &str, offset_mhz: i32) {
    let offset = offset_mhz.to_string();
    for arguments in [
        vec!["apply", "--gpu-clock-offset", offset.as_str()],
        vec!["profile", "save", name],
        vec!["apply", "--gpu-clock-offset", "0"],
    ] {
        let output = machine.gputune(&arguments);
        assert!(
            output.status.success(),
            "{arguments:?}: {}",
            text(&output.stderr)
        );
    }
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 0);
}

/// Applies the profile `name` and checks what it said; then puts the offset back to 0.
fn applying_says(machine: &FakeMachine, name: &str, words: &str) {
    let applied = machine.gputune(&["profile", "apply", name]);
    let stderr = text(&applied.stderr);
    assert!(stderr.contains(words), "{stderr}");
    let reset = machine.gputune(&["apply", "--gpu-clock-offset", "0"]);
    assert!(reset.status.success(), "{}", text(&reset.stderr));
}

#[test]
fn a_check_at_stock_settings_finds_no_wrong_result_and_changes_nothing() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let output = machine.gputune(&["stability", "--duration-s", "2", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let reports = json(&output);
    assert_eq!(reports["format_version"], 1, "{reports}");
    let report = &reports["checks"][0];
    assert_eq!(report["verdict"], "stable", "{report}");
    assert_eq!(report["settings"], "stock settings");
    let tally = &report["tally"];
    for part in ["gemm", "fma", "vram"] {
        assert!(
            tally[part]["results"].as_u64().unwrap_or(0) > 0,
            "{part}: {tally}"
        );
        assert_eq!(tally[part]["wrong"], 0, "{part}: {tally}");
    }
    assert!(tally["vram_patterns"].as_u64().unwrap_or(0) >= 7, "{tally}");
    assert!(
        report["gemm_tflops"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    assert!(
        report["vram_gib_per_s"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    assert!(
        machine.write_log().is_empty(),
        "a check at stock wrote: {:?}",
        machine.write_log()
    );
    let sentence = machine.gputune(&["stability", "--duration-s", "1"]);
    let stdout = text(&sentence.stdout);
    assert!(
        stdout.contains("Stable for") && stdout.contains("at stock settings: 0 wrong of"),
        "{stdout}"
    );
}

#[test]
fn a_profile_past_the_margin_is_found_unstable_put_back_and_remembered() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    with_offset_profile(&machine, "Deep", 400);
    let output = machine.gputune(&[
        "stability",
        "--profile",
        "Deep",
        "--duration-s",
        "20",
        "--json",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let report = &json(&output)["checks"][0];
    assert_eq!(report["verdict"], "unstable", "{report}");
    assert!(
        report["ran_s"].as_f64().unwrap_or(99.0) < 20.0,
        "it ended at the first fault"
    );
    assert_eq!(report["put_back_complete"], true);
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 0, "{stderr}");
    let list = text(&machine.gputune(&["profile", "list"]).stdout);
    assert!(list.contains("found UNSTABLE after"), "{list}");
    // Applying it now warns that it was found unstable.
    applying_says(&machine, "Deep", "may compute wrong results");
}

#[test]
fn a_checked_stable_profile_says_so_and_an_unchecked_one_says_it_was_never_checked() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    with_offset_profile(&machine, "Mild", 15);
    let list = text(&machine.gputune(&["profile", "list"]).stdout);
    assert!(list.contains("never checked"), "{list}");
    applying_says(&machine, "Mild", "was never checked for stability");
    let output = machine.gputune(&["stability", "--profile", "Mild", "--duration-s", "2"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        machine.settings(0).gpu_clock_offset_mhz,
        0,
        "put back after the check"
    );
    let list = text(&machine.gputune(&["profile", "list"]).stdout);
    assert!(list.contains("checked stable for only 2."), "{list}");
}

#[test]
fn an_xid_during_a_check_ends_it_as_unstable() {
    let machine = FakeMachine::for_processes_with_faults("rtx4090", "xid_after_ms=1500");
    let output = machine.gputune(&["stability", "--duration-s", "30", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let report = &json(&output)["checks"][0];
    assert_eq!(report["verdict"], "unstable");
    assert_eq!(report["ending"]["finding"]["type"], "xid", "{report}");
    assert_eq!(report["ending"]["finding"]["xid"], 13);
}

#[test]
fn ctrl_c_and_sigterm_mid_check_and_mid_scan_put_the_card_back() {
    for (signal, scan) in [
        ("INT", false),
        ("TERM", false),
        ("INT", true),
        ("TERM", true),
    ] {
        let machine = FakeMachine::for_processes("rtx4090", "training");
        with_offset_profile(&machine, "Mild", 15);
        let arguments: &[&str] = if scan {
            &["scan", "--step-s", "2", "--confirm-s", "60"]
        } else {
            &["stability", "--profile", "Mild", "--duration-s", "120"]
        };
        let mut running = spawn_piped(machine.command(arguments));
        running.wait_for_line("Ctrl-C stops it");
        wait_until("the setting is on the card", || {
            let settings = machine.settings(0);
            settings.gpu_clock_offset_mhz == 15 || settings.gpu_locked_clocks.is_some()
        });
        running.signal(signal);
        let (status, stdout, stderr) = running.finish();
        assert_eq!(status.code(), Some(130), "{signal} {arguments:?}: {stderr}");
        let said = if scan {
            "The scan ended early: stopped by Ctrl-C or SIGTERM"
        } else {
            "not a verdict"
        };
        assert!(stdout.contains(said), "{signal} {arguments:?}: {stdout}");
        let settings = machine.settings(0);
        assert_eq!(
            settings.gpu_clock_offset_mhz, 0,
            "{signal} {arguments:?}: {stderr}"
        );
        assert_eq!(
            settings.gpu_locked_clocks, None,
            "{signal} {arguments:?}: {stderr}"
        );
    }
}

#[test]
fn kill_9_of_a_check_or_a_scan_leaves_the_daemon_to_put_the_card_back() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    with_offset_profile(&machine, "Mild", 15);
    let daemon = Daemon::start(&machine);
    for arguments in [
        vec!["stability", "--profile", "Mild", "--duration-s", "120"],
        vec!["scan", "--step-s", "2", "--confirm-s", "60"],
    ] {
        let mut running = spawn_piped(daemon.client(&machine, &arguments));
        running.wait_for_line("Ctrl-C stops it");
        wait_until("the setting is on the card", || {
            let settings = machine.settings(0);
            settings.gpu_clock_offset_mhz == 15 || settings.gpu_locked_clocks.is_some()
        });
        running.signal("KILL");
        let _ = running.finish();
        wait_until("the daemon put the card back", || {
            let settings = machine.settings(0);
            settings.gpu_clock_offset_mhz == 0 && settings.gpu_locked_clocks.is_none()
        });
    }
}

#[test]
fn without_a_driver_the_check_says_so_in_one_sentence() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let output = machine
        .command(&["stability", "--duration-s", "2"])
        .env("GPUTUNE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .output()
        .expect("gputune runs");
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.starts_with("gputune: There is no NVIDIA GPU to check ("),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

#[test]
fn absurd_options_are_refused_before_anything_runs() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    for (arguments, words) in [
        (vec!["stability", "--duration-s", "0"], "--duration-s 0"),
        (vec!["stability", "--duration-s", "1e12"], "seconds"),
        (vec!["scan", "--step-mhz", "0"], "--step-mhz 0"),
        (vec!["scan", "--lock-mhz", "99999"], "--lock-mhz 99999"),
        (vec!["stability", "--gpu", "7"], "GPU"),
    ] {
        let output = machine.gputune(&arguments);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{arguments:?}");
        assert!(stderr.contains(words), "{arguments:?}: {stderr}");
    }
    assert!(machine.write_log().is_empty());
    let datacenter = FakeMachine::for_processes("datacenter-fanless", "training");
    let output = datacenter.gputune(&["scan"]);
    assert!(
        text(&output.stderr).contains("takes no graphics clock offset"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn the_scanner_stops_within_a_step_of_the_simulated_margin_and_confirms_a_stable_offset() {
    use gputune_core::device::sim::CardSpec;
    use gputune_core::device::sim::silicon::SiliconMargin;
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let output = machine.gputune(&["scan", "--step-s", "1", "--confirm-s", "2", "--json"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let outcome = json(&output);
    let margin = SiliconMargin::for_card(&CardSpec::rtx4090(), &machine.uuid(0));
    let steps = outcome["steps"].as_array().expect("steps");
    let last = steps.last().expect("a step");
    let unstable_mhz = outcome["first_unstable_mhz"]
        .as_i64()
        .expect("an unstable offset");
    assert_eq!(last["offset_mhz"].as_i64(), Some(unstable_mhz));
    assert_eq!(last["verdict"], "unstable", "{last}");
    // The margin at the lock, at the temperature the step reached (1.5 MHz less per °C).
    let at = |step: &Value| {
        let temperature = step["temperature_peak_c"].as_f64().expect("a temperature");
        margin.stable_offset_mhz(2520, temperature)
    };
    assert!(
        unstable_mhz as f64 > at(last) - 3.0,
        "+{unstable_mhz} MHz failed below the margin {:.0}",
        at(last)
    );
    let stable = &steps[steps.len() - 2];
    assert_eq!(stable["verdict"], "stable");
    assert!(
        (unstable_mhz - 15) as f64 <= at(stable) + 3.0,
        "the scan stopped more than a step past the margin {:.0}: {steps:?}",
        at(stable)
    );
    // Two steps of margin below the last stable offset, confirmed stable.
    let stable_mhz = outcome["stable_offset_mhz"]
        .as_i64()
        .expect("a confirmed offset");
    assert_eq!(stable_mhz, (unstable_mhz - 15 - 30).max(0));
    assert_eq!(outcome["confirmation"]["verdict"], "stable");
    assert_eq!(outcome["options"]["lock_mhz"], 2520);
    assert!(
        outcome["savings"]
            .as_str()
            .unwrap_or("")
            .starts_with("Against stock: power ")
    );
    let settings = machine.settings(0);
    assert_eq!(settings.gpu_clock_offset_mhz, 0, "{stderr}");
    assert_eq!(settings.gpu_locked_clocks, None, "{stderr}");
}

#[test]
fn a_setting_changed_by_another_program_during_a_check_is_named_in_its_verdict() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let mut running = spawn_piped(machine.command(&["stability", "--duration-s", "120", "--json"]));
    running.wait_for_line("Ctrl-C stops it");
    // Past this card's margin at its unlocked clock, short of an Xid.
    let applied = machine.gputune(&["apply", "--gpu-clock-offset", "150"]);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let (status, stdout, stderr) = running.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let reports: Value = serde_json::from_str(&stdout).expect("JSON");
    let report = &reports["checks"][0];
    assert_eq!(report["verdict"], "unstable", "{report}");
    assert_eq!(
        report["settings"],
        "+150 MHz offset (changed during the check by another program, from stock settings)"
    );
    assert_eq!(report["put_back"].as_array().map(Vec::len), Some(0));
    // The check changed nothing: the setting another program made stays.
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 150);
}

#[test]
fn a_datacenter_cards_ecc_counters_are_watched_and_an_uncorrectable_error_is_instability() {
    let machine = FakeMachine::for_processes("datacenter-fanless", "training");
    let output = machine.gputune(&["stability", "--duration-s", "2", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report = &json(&output)["checks"][0];
    assert_eq!(
        report["watched"]["ecc_errors"],
        serde_json::json!({"corrected_volatile": 0, "uncorrected_volatile": 0}),
        "{report}"
    );
    let sentence = text(&machine.gputune(&["stability", "--duration-s", "1"]).stdout);
    assert!(sentence.contains("no ECC errors"), "{sentence}");

    let mut running = spawn_piped(machine.command(&["stability", "--duration-s", "60", "--json"]));
    running.wait_for_line("Ctrl-C stops it");
    std::thread::sleep(std::time::Duration::from_secs(1));
    // The memory loses data: two uncorrectable errors. (The running fake may save its own
    // state over this one; inject again until the check has seen it.)
    let started = std::time::Instant::now();
    while running.child.try_wait().ok().flatten().is_none()
        && started.elapsed() < std::time::Duration::from_secs(30)
    {
        let mut state = machine.state();
        state.machine.gpus[0].inject_ecc_errors(0, 2);
        nvidia_ml_fake::save_state(machine.state_path(), &state).expect("the state is saved");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let (status, stdout, stderr) = running.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let reports: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        reports["checks"][0]["ending"]["finding"]["type"], "uncorrected_ecc",
        "{stdout}"
    );
}

/// A `sleep` for the fake driver to list as another program's compute work; killed when
/// dropped.
struct OtherJob(std::process::Child);

impl OtherJob {
    fn start() -> OtherJob {
        OtherJob(
            std::process::Command::new("sleep")
                .arg("300")
                .spawn()
                .unwrap_or_else(|error| panic!("sleep starts: {error}")),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for OtherJob {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_check_beside_another_programs_compute_work_is_refused_naming_it_and_force_checks_beside_it() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let job = OtherJob::start();
    machine.register_process(
        0,
        job.pid(),
        gputune_formats::card::ProcessKind::Compute,
        Some(20_480),
    );
    for arguments in [
        vec!["stability", "--duration-s", "2"],
        vec!["scan", "--step-s", "1", "--confirm-s", "2"],
    ] {
        let output = machine.gputune(&arguments);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        for words in [
            "GPU 0 is busy: 1 other program computes on it".to_string(),
            format!("pid {}", job.pid()),
            "sleep 300, 20480 MiB".to_string(),
            "--force".to_string(),
            "nothing was measured".to_string(),
        ] {
            assert!(stderr.contains(&words), "{arguments:?}: {words}: {stderr}");
        }
        assert!(
            text(&output.stdout).is_empty(),
            "no verdict: {}",
            text(&output.stdout)
        );
    }
    assert!(machine.write_log().is_empty(), "{:?}", machine.write_log());
    let forced = machine.gputune(&["stability", "--duration-s", "2", "--force", "--json"]);
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced.stderr));
    let report = &json(&forced)["checks"][0];
    let settings = report["settings"].as_str().unwrap_or("");
    assert!(
        settings.starts_with(
            "stock settings, beside other programs computing on the card (forced: pid "
        ) && settings.contains("sleep 300, 20480 MiB"),
        "{report}"
    );
}

#[test]
fn a_check_or_a_second_scan_while_a_scan_runs_is_refused_naming_the_scan() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let mut scan = spawn_piped(machine.command(&["scan", "--step-s", "30", "--confirm-s", "60"]));
    scan.wait_for_line("Ctrl-C stops it");
    for arguments in [
        vec!["stability", "--duration-s", "2"],
        vec!["scan", "--step-s", "2", "--confirm-s", "2"],
    ] {
        let output = machine.gputune(&arguments);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert!(
            stderr.contains("GPU 0 is busy: its ") && stderr.contains("gputune scan --step-s 30"),
            "{arguments:?}: {stderr}"
        );
        assert!(stderr.contains("nothing was measured"), "{stderr}");
        assert!(text(&output.stdout).is_empty(), "{}", text(&output.stdout));
    }
    scan.signal("INT");
    let (status, _, stderr) = scan.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 0);
}

#[test]
fn through_the_daemon_a_scan_and_a_check_each_refuse_the_other_naming_its_holder() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let daemon = Daemon::start(&machine);
    for (first, second, named) in [
        (
            vec!["scan", "--step-s", "30", "--confirm-s", "60"],
            vec!["stability", "--duration-s", "2"],
            "an undervolt scan of gputune scan --step-s 30",
        ),
        (
            vec!["stability", "--duration-s", "120"],
            vec!["scan", "--step-s", "2", "--confirm-s", "2"],
            "a stability check of gputune stability --duration-s 120",
        ),
    ] {
        let mut running = spawn_piped(daemon.client(&machine, &first));
        running.wait_for_line("Ctrl-C stops it");
        let output = daemon
            .client(&machine, &second)
            .output()
            .expect("gputune runs");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{second:?}: {stderr}");
        assert!(
            stderr.contains(&format!("GPU 0 is busy: {named}")),
            "{second:?}: {stderr}"
        );
        assert!(text(&output.stdout).is_empty(), "{}", text(&output.stdout));
        running.signal("INT");
        let (status, _, stderr) = running.finish();
        assert_eq!(status.code(), Some(130), "{first:?}: {stderr}");
    }
    assert_eq!(machine.settings(0).gpu_clock_offset_mhz, 0);
}

#[test]
fn a_scan_without_the_right_to_change_settings_is_refused_before_its_stock_step() {
    let machine = FakeMachine::for_processes_with_faults("rtx4090", "no_permission");
    let output = machine.gputune(&["scan", "--step-s", "2", "--confirm-s", "2", "--json"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("The scan could not set GPU 0 to stock clocks and offsets")
            && stderr.contains("nothing was measured"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("scanning GPU 0"),
        "it never started: {stderr}"
    );
    assert!(text(&output.stdout).is_empty(), "{}", text(&output.stdout));
}

/// Applies an offset past the margin at the lock the Tune tab's preset uses.
fn apply_unstable_offset(machine: &FakeMachine) {
    let applied = machine.gputune(&[
        "apply",
        "--lock-gpu-clocks",
        "210,2520",
        "--gpu-clock-offset",
        "300",
    ]);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
}

#[test]
fn unstable_at_the_cards_own_offset_says_how_to_put_it_back_and_put_back_does() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    apply_unstable_offset(&machine);
    let output = machine.gputune(&["stability", "--duration-s", "20"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("GPU 0 still runs +300 MHz offset")
            && stderr.contains("Put it back to stock clock offsets and locks with `gputune stability --put-back --gpu 0`."),
        "{stderr}"
    );
    let put_back = machine.gputune(&["stability", "--put-back"]);
    let said = text(&put_back.stdout);
    assert_eq!(
        put_back.status.code(),
        Some(0),
        "{}",
        text(&put_back.stderr)
    );
    assert!(
        said.starts_with("Put GPU 0 back to stock clock offsets and locks: "),
        "{said}"
    );
    let settings = machine.settings(0);
    assert_eq!(settings.gpu_clock_offset_mhz, 0);
    assert_eq!(settings.gpu_locked_clocks, None);
    let again = machine.gputune(&["stability", "--put-back"]);
    assert!(
        text(&again.stdout)
            .contains("already runs stock clock offsets and locks: nothing to put back"),
        "{}",
        text(&again.stdout)
    );
}

#[test]
fn put_back_goes_to_the_profile_last_checked_stable_on_the_card() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    with_offset_profile(&machine, "Mild", 15);
    let checked = machine.gputune(&["stability", "--profile", "Mild", "--duration-s", "2"]);
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked.stderr));
    apply_unstable_offset(&machine);
    let output = machine.gputune(&["stability", "--duration-s", "20"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .contains("Put it back to the profile \"Mild\" (the last checked stable on this card)"),
        "{stderr}"
    );
    let put_back = machine.gputune(&["stability", "--put-back", "--gpu", "0"]);
    assert_eq!(
        put_back.status.code(),
        Some(0),
        "{}",
        text(&put_back.stderr)
    );
    let settings = machine.settings(0);
    assert_eq!(
        settings.gpu_clock_offset_mhz,
        15,
        "{}",
        text(&put_back.stdout)
    );
    assert_eq!(settings.gpu_locked_clocks, None);
}

#[test]
fn a_scan_after_an_unstable_offset_measures_stock_at_stock_and_puts_the_offset_back() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    apply_unstable_offset(&machine);
    let output = machine.gputune(&["scan", "--step-s", "1", "--confirm-s", "2", "--json"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let outcome = json(&output);
    assert_eq!(outcome["stock"]["verdict"], "stable", "{outcome}");
    assert!(outcome["stable_offset_mhz"].as_i64().is_some(), "{outcome}");
    // The scan's first writes, before its first step locks 2520 MHz: stock offsets, no lock.
    use gputune_formats::card::Setting;
    let writes: Vec<Setting> = machine
        .write_log()
        .iter()
        .map(|write| write.setting)
        .collect();
    let first_step = writes
        .iter()
        .position(|setting| {
            *setting
                == Setting::LockGpuClocks {
                    min_mhz: 2520,
                    max_mhz: 2520,
                }
        })
        .unwrap_or_else(|| panic!("the scan locked 2520 MHz: {writes:?}"));
    // The apply wrote the lock and +300 first.
    let before_steps = &writes[2..first_step];
    // (The offset for compute is written per P-state: P2 is where training runs.)
    assert!(
        before_steps.contains(&Setting::GpuClockOffsetAt {
            pstate: 2,
            offset_mhz: 0
        }) && before_steps.contains(&Setting::ResetGpuClocks),
        "{writes:?}"
    );
    // Put back as it was: the user's own settings, written after the scan's last step. (The
    // card may crash at them a moment later under its training load, an Xid 13 whose put-back
    // to stock follows: that is the crash rule, not the scan's.)
    let after_steps = &writes[first_step..];
    let restored = after_steps
        .iter()
        .rposition(|setting| {
            *setting
                == Setting::LockGpuClocks {
                    min_mhz: 210,
                    max_mhz: 2520,
                }
        })
        .unwrap_or_else(|| panic!("the user's lock was put back: {writes:?}\n{stderr}"));
    assert!(
        after_steps[restored..].contains(&Setting::GpuClockOffsetAt {
            pstate: 2,
            offset_mhz: 300
        }),
        "the user's +300 MHz was put back: {writes:?}\n{stderr}"
    );
}

/// "GPU-5a1e0c2d…": how a sentence names a card by its UUID.
fn short_uuid(uuid: &str) -> String {
    uuid.chars().take(12).collect()
}

/// The profile `name` as it is on disk, and its file's text.
fn stored(machine: &FakeMachine, name: &str) -> (gputune_formats::profile::Profile, String) {
    let store = gputune_core::profiles::store::ProfileStore::open(&machine.folders())
        .expect("the profile folder opens");
    let stored = store.load(name).expect("the profile reads");
    let text = std::fs::read_to_string(&stored.path).expect("the profile file reads");
    (stored.profile, text)
}

#[test]
fn a_verdict_names_the_card_checked_and_counts_only_on_that_card() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    for arguments in [
        vec!["apply", "--gpu", "0", "--gpu-clock-offset", "15"],
        vec!["profile", "save", "Mild", "--gpu", "0"],
        vec!["apply", "--gpu", "0", "--gpu-clock-offset", "0"],
    ] {
        let output = machine.gputune(&arguments);
        assert!(
            output.status.success(),
            "{arguments:?}: {}",
            text(&output.stderr)
        );
    }
    // GPU 0's profile, checked on GPU 3.
    let output = machine.gputune(&[
        "stability",
        "--profile",
        "Mild",
        "--gpu",
        "3",
        "--duration-s",
        "2",
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains(&format!(
            "GPU 3 (NVIDIA GeForce RTX 4090, {})",
            machine.uuid(3)
        )),
        "the verdict names the card checked: {stdout}"
    );
    let (_, file) = stored(&machine, "Mild");
    assert!(
        file.contains(&format!("gpu_uuid = \"{}\"", machine.uuid(3))),
        "the record names the card checked: {file}"
    );
    let elsewhere = format!("on {}", short_uuid(&machine.uuid(3)));
    for arguments in [vec!["profile", "list"], vec!["profile", "show", "Mild"]] {
        let shown = text(&machine.gputune(&arguments).stdout);
        assert!(
            shown.contains(&elsewhere)
                && shown.contains("(another card")
                && shown.contains("not on this one"),
            "{arguments:?}: {shown}"
        );
    }
    // On GPU 0 the profile was never checked; on GPU 3 it was.
    let on_0 = text(
        &machine
            .gputune(&["run", "--profile", "Mild", "--gpu", "0", "--", "true"])
            .stderr,
    );
    assert!(
        on_0.contains("never checked for stability on this card")
            && !on_0.contains("(checked stable"),
        "{on_0}"
    );
    let on_3 = text(
        &machine
            .gputune(&["run", "--profile", "Mild", "--gpu", "3", "--", "true"])
            .stderr,
    );
    assert!(on_3.contains("(checked stable for only"), "{on_3}");
    assert!(!on_3.contains("never checked"), "{on_3}");
}

#[test]
fn a_profile_of_another_model_checked_here_says_which_card_and_an_old_record_counts_nowhere() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    with_offset_profile(&machine, "Borrowed", 15);
    // The profile is an H100's, copied to this machine.
    let folder = machine.config_dir().join("profiles");
    let file = std::fs::read_dir(&folder)
        .expect("the profile folder")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| {
            path.extension()
                .is_some_and(|extension| extension == "toml")
        })
        .expect("the profile file");
    let h100 = "GPU-00000000-0000-4000-8000-0000000000b1";
    let original = std::fs::read_to_string(&file).expect("the profile reads");
    let edited = original.replace(&machine.uuid(0), h100).replace(
        "name = \"NVIDIA GeForce RTX 4090\"",
        "name = \"NVIDIA H100 80GB HBM3\"",
    );
    std::fs::write(&file, edited).expect("the profile is written");
    let output = machine.gputune(&["stability", "--profile", "Borrowed", "--duration-s", "2"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let show = text(&machine.gputune(&["profile", "show", "Borrowed"]).stdout);
    assert!(
        show.contains(&format!("on {}", short_uuid(&machine.uuid(0))))
            && show.contains("another card: NVIDIA GeForce RTX 4090")
            && show.contains("not on this one"),
        "{show}"
    );
    // A record an older gputune wrote names no card (nor has it cards' own entries, which
    // come last): it counts on none, and says so.
    let saved = std::fs::read_to_string(&file).expect("the profile reads");
    let mut old: Vec<&str> = Vec::new();
    for line in saved
        .lines()
        .take_while(|line| *line != "[[checked_cards]]")
    {
        if !line.starts_with("gpu_uuid = ") && !line.starts_with("gpu_name = ") {
            old.push(line);
        }
    }
    std::fs::write(&file, old.join("\n")).expect("the profile is written");
    let list = text(&machine.gputune(&["profile", "list"]).stdout);
    assert!(list.contains("counts as checked on no card"), "{list}");
    // Its offset, then, is not this card's: none is applied, and the sentence says why.
    let run = text(
        &machine
            .gputune(&["run", "--profile", "Borrowed", "--", "true"])
            .stderr,
    );
    assert!(
        run.contains("No clock offset is applied")
            && run.contains("was never checked with this profile's undervolt"),
        "{run}"
    );
}

#[test]
fn a_scan_saves_only_its_own_settings_locked_from_the_cards_lowest_clock() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    // What another client holds on the card while the scan runs.
    let applied = machine.gputune(&["apply", "--power-limit", "250", "--mem-clock-offset", "500"]);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let output = machine.gputune(&[
        "scan",
        "--step-s",
        "1",
        "--confirm-s",
        "2",
        "--save-profile",
        "Found",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&machine.uuid(0)),
        "the saved profile names its card: {stderr}"
    );
    let (profile, file) = stored(&machine, "Found");
    assert_eq!(
        profile.power_limit, None,
        "another client's power limit was saved"
    );
    assert_eq!(
        profile.memory_clock_offset_mhz, None,
        "another client's memory offset was saved"
    );
    assert_eq!(profile.fan_curve, None);
    let lock = profile.gpu_clock_lock.expect("the scan's lock");
    assert_eq!(
        (lock.min_mhz, lock.max_mhz),
        (210, 2520),
        "the lock starts at the card's lowest clock, so it still clocks down when idle"
    );
    assert!(profile.gpu_clock_offset_mhz.is_some());
    assert!(
        profile.last_check.is_some(),
        "the confirmation is its check"
    );
    assert!(
        file.contains(&format!("gpu_uuid = \"{}\"", machine.uuid(0))),
        "{file}"
    );
}

#[test]
fn a_scan_refuses_to_replace_a_profile_without_replace_before_it_runs() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    with_offset_profile(&machine, "Found", 15);
    let before = stored(&machine, "Found");
    let writes = machine.write_log().len();
    let output = machine.gputune(&[
        "scan",
        "--step-s",
        "1",
        "--confirm-s",
        "2",
        "--save-profile",
        "Found",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"Found\" already exists") && stderr.contains("--replace"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert_eq!(stored(&machine, "Found"), before);
    assert_eq!(machine.write_log().len(), writes, "the scan ran");
}

#[test]
fn a_scan_explains_its_margin_and_a_locked_confirmation_is_not_called_unstressed() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let output = machine.gputune(&["scan", "--step-s", "1", "--confirm-s", "2"]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let summary = stdout.lines().next().unwrap_or_default();
    assert!(
        !summary.contains("largest stable")
            && summary.contains("was the first unstable step")
            && summary.contains("below the last step that passed")
            && summary.contains("margin of 2 steps"),
        "{stdout}"
    );
    let confirmation = stdout
        .lines()
        .find(|line| line.contains("Confirmation: Stable"))
        .unwrap_or_else(|| panic!("a stable confirmation: {stdout}"));
    assert!(
        !confirmation.contains("never reached its power limit"),
        "the clock lock held it below the limit: {confirmation}"
    );
    assert!(confirmation.contains("short check"), "{confirmation}");
}

#[test]
fn a_short_check_says_it_is_short_and_what_a_thorough_one_is() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let output = machine.gputune(&["stability", "--duration-s", "2"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        stdout.contains("This was a short check (2")
            && stdout.contains("a thorough one runs 10 min")
            && stdout.contains("--duration-s 600"),
        "{stdout}"
    );
    with_offset_profile(&machine, "Mild", 15);
    let checked = machine.gputune(&["stability", "--profile", "Mild", "--duration-s", "2"]);
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked.stderr));
    let run = text(
        &machine
            .gputune(&["run", "--profile", "Mild", "--", "true"])
            .stderr,
    );
    assert!(
        run.contains("checked stable for only 2") && run.contains("a short check"),
        "{run}"
    );
}

#[test]
fn a_scan_step_stopped_by_ctrl_c_says_stopped_not_unstable() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    let mut running = spawn_piped(machine.command(&["scan", "--step-s", "5", "--confirm-s", "60"]));
    running.wait_for_line("Ctrl-C stops it");
    wait_until("a step runs at the lock", || {
        machine.settings(0).gpu_locked_clocks.is_some()
    });
    running.signal("INT");
    let (status, stdout, stderr) = running.finish();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(!stdout.contains("UNSTABLE"), "{stdout}");
    assert!(
        stdout.contains(": stopped (stopped by Ctrl-C or SIGTERM), not a verdict"),
        "{stdout}"
    );
}

#[test]
fn when_the_daemon_dies_mid_check_the_cli_says_the_connection_was_lost() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    with_offset_profile(&machine, "Mild", 15);
    let daemon = Daemon::start(&machine);
    let mut running = spawn_piped(daemon.client(
        &machine,
        &["stability", "--profile", "Mild", "--duration-s", "120"],
    ));
    running.wait_for_line("Ctrl-C stops it");
    wait_until("the setting is on the card", || {
        machine.settings(0).gpu_clock_offset_mhz == 15
    });
    daemon.kill();
    let (_, _, stderr) = running.finish();
    assert!(
        !stderr.contains("the daemon puts the card back"),
        "{stderr}"
    );
    assert!(
        stderr.contains("connection to the tuning service was lost")
            && stderr.contains("cannot be known here")
            && stderr.contains("gputune status"),
        "{stderr}"
    );
}

#[test]
fn nothing_checked_exits_2_as_the_help_and_the_docs_say() {
    let machine = FakeMachine::for_processes("rtx4090", "training");
    for arguments in [
        vec!["stability", "--gpu", "7"],
        vec!["stability", "--profile", "Nothing"],
        vec!["stability", "--duration-s", "0"],
        vec!["scan", "--lock-mhz", "99999"],
    ] {
        let output = machine.gputune(&arguments);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{arguments:?}: {}",
            text(&output.stderr)
        );
    }
    let help = text(&machine.gputune(&["stability", "--help"]).stdout);
    assert!(
        help.contains("0 stable, 1 unstable, 2 nothing checked, 130 stopped"),
        "{help}"
    );
    let docs = include_str!("../../docs/stability.md");
    assert!(
        docs.contains("0 stable, 1 unstable, 2 nothing checked"),
        "docs/stability.md says the exit status as --help does"
    );
}
