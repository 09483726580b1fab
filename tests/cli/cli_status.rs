//! `gputune status` as a user runs it: against the simulator, and against the fake
//! libnvidia-ml through the real NVML path, one GPU and eight.

use common::FakeMachine;
use serde_json::Value;

use crate::common;
use gputune_core::device::Backend;
use gputune_core::device::gate::validate;
use gputune_core::device::nvml::NvmlBackend;
use gputune_formats::card::Setting;

/// The fields every GPU in `status --json` must carry (null when unsupported).
const REQUIRED_FIELDS: [&str; 23] = [
    "index",
    "uuid",
    "name",
    "memory_total_bytes",
    "power_draw_mw",
    "power_limit_mw",
    "power_limit_default_mw",
    "power_limit_min_mw",
    "power_limit_max_mw",
    "temperature_c",
    "fan_speed_pct",
    "gpu_clock_mhz",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "utilization_gpu_pct",
    "memory_used_bytes",
    "throttle_reasons",
    "pcie_link_gen",
    "pcie_link_width",
    "pcie_link_gen_max",
    "pcie_link_width_max",
    "pci_bus_id",
    "energy_total_mj",
];

fn parse_json(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "gputune failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "status --json prints JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn gpus(report: &Value) -> Vec<Value> {
    report["gpus"].as_array().cloned().unwrap_or_default()
}

fn assert_complete(gpu: &Value) {
    for field in REQUIRED_FIELDS {
        assert!(gpu.get(field).is_some(), "field {field} missing in {gpu}");
    }
}

fn gputune_sim(arguments: &[&str]) -> std::process::Output {
    crate::common::gputune_alone(arguments)
}

#[test]
fn status_json_against_the_simulator() {
    let report = parse_json(&gputune_sim(&["status", "--json", "--backend", "sim"]));
    assert_eq!(report["format_version"], 1);
    assert_eq!(report["backend"], "sim");
    let gpus = gpus(&report);
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0]["type"], "read");
    assert_complete(&gpus[0]);
    assert_eq!(gpus[0]["name"], "NVIDIA GeForce RTX 4090");
    assert_eq!(gpus[0]["fan_speed_pct"].as_array().map(Vec::len), Some(2));
    // A GeForce card's ECC is off: no counters.
    assert_eq!(gpus[0]["ecc"], Value::Null);
    assert!(
        gpus[0]["throttle_reasons"]
            .as_array()
            .is_some_and(|reasons| reasons.contains(&Value::from("sw_power_cap")))
    );
}

#[test]
fn status_json_fanless_simulator_has_null_fans() {
    let report = parse_json(&gputune_sim(&[
        "--backend",
        "sim",
        "--sim-scenario",
        "datacenter-fanless",
        "status",
        "--json",
    ]));
    let gpus = gpus(&report);
    assert_complete(&gpus[0]);
    assert_eq!(gpus[0]["fan_speed_pct"], Value::Null);
    // ECC is on: its counters are there, with no error.
    assert_eq!(gpus[0]["ecc"]["corrected_volatile"], 0);
    assert_eq!(gpus[0]["ecc"]["uncorrected_volatile"], 0);
    let text = gputune_sim(&[
        "--backend",
        "sim",
        "--sim-scenario",
        "datacenter-fanless",
        "status",
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("ECC errors   0 corrected, 0 uncorrected since the driver loaded"),
        "{text}"
    );
}

#[test]
fn auto_without_a_driver_falls_back_to_the_simulator_and_says_why() {
    let output = gputune_sim(&[
        "status",
        "--json",
        "--nvml-lib",
        "/nonexistent/libnvidia-ml.so.1",
    ]);
    let report = parse_json(&output);
    assert_eq!(report["backend"], "sim");
    let reason = report["simulated_because"].as_str().unwrap_or_default();
    assert!(
        reason.contains("/nonexistent/libnvidia-ml.so.1"),
        "{reason}"
    );
    let text = gputune_sim(&["status", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]);
    assert!(String::from_utf8_lossy(&text.stdout).starts_with("Simulated GPU (NVML unavailable: "));
}

#[test]
fn status_json_through_the_fake_library() {
    let machine = FakeMachine::new("rtx4090", "");
    let report = parse_json(&machine.gputune(&["status", "--json", "--backend", "nvml"]));
    assert_eq!(report["backend"], "nvml");
    let gpus = gpus(&report);
    assert_eq!(gpus.len(), 1);
    assert_complete(&gpus[0]);
    let card = &machine.state().machine.gpus[0];
    assert_eq!(gpus[0]["uuid"], card.uuid.as_str());
    assert_eq!(gpus[0]["power_limit_default_mw"], 450_000);
    assert_eq!(gpus[0]["power_limit_min_mw"], 150_000);
    assert_eq!(gpus[0]["power_limit_max_mw"], 600_000);
    assert_eq!(gpus[0]["pcie_link_gen_max"], 4);
}

#[test]
fn status_json_eight_gpus_and_selecting_one() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let report = parse_json(&machine.gputune(&["status", "--json"]));
    assert_eq!(report["backend"], "nvml");
    let all = gpus(&report);
    assert_eq!(all.len(), 8);
    for (index, gpu) in all.iter().enumerate() {
        assert_complete(gpu);
        assert_eq!(gpu["index"], index);
    }
    let uuid = all[6]["uuid"].as_str().unwrap_or_default().to_string();
    let by_uuid = gpus(&parse_json(
        &machine.gputune(&["status", "--json", "--gpu", &uuid]),
    ));
    assert_eq!(by_uuid.len(), 1);
    assert_eq!(by_uuid[0]["index"], 6);
    let by_index = gpus(&parse_json(
        &machine.gputune(&["status", "--json", "--gpu", "3"]),
    ));
    assert_eq!(by_index[0]["uuid"], all[3]["uuid"]);
}

#[test]
fn two_processes_share_one_fake_gpu() {
    let machine = FakeMachine::new("rtx4090", "");
    // This process sets the power limit...
    let mut backend =
        NvmlBackend::open(Some(&machine.library)).unwrap_or_else(|error| panic!("{error}"));
    let constraints = backend.constraints(0).unwrap_or_default();
    let validated = validate(
        &constraints,
        Setting::PowerLimit {
            power_limit_mw: 280_000,
        },
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(backend.apply(0, &validated), Ok(()));
    drop(backend);
    // ...and a second process sees it, as it would on a real card.
    let report = parse_json(&machine.gputune(&["status", "--json"]));
    assert_eq!(gpus(&report)[0]["power_limit_mw"], 280_000);
    let draw = gpus(&report)[0]["power_draw_mw"]
        .as_u64()
        .unwrap_or(u64::MAX);
    assert!(draw <= 281_000, "the new limit is enforced: {draw} mW");
}

#[test]
fn unknown_gpu_is_one_clear_sentence_and_a_failure() {
    let output = gputune_sim(&["status", "--backend", "sim", "--gpu", "7"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim(),
        "gputune: No GPU matches \"7\": give an index (0, 1, ...) or a UUID from `gputune status`."
    );
}

#[test]
fn nvml_backend_without_a_driver_fails_clearly() {
    let output = gputune_sim(&[
        "status",
        "--backend",
        "nvml",
        "--nvml-lib",
        "/nonexistent/libnvidia-ml.so.1",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("could not be loaded") && stderr.contains("--nvml-lib"),
        "{stderr}"
    );
}

#[test]
fn lost_gpu_during_status_exits_non_zero_with_the_reason() {
    let machine = FakeMachine::new("rtx4090", "gpu_lost_after=12");
    let output = machine.gputune(&["status", "--json"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("GPU 0 stopped answering"), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    assert!(
        gpus(&report)[0]["error"]
            .as_str()
            .is_some_and(|error| error.contains("stopped answering"))
    );
}

#[test]
fn a_slow_driver_gets_what_status_could_read_with_the_rest_marked_not_read() {
    let machine = FakeMachine::new("rtx4090", "");
    assert!(machine.gputune(&["status"]).status.success());
    // 200 ms a call and 1 s a call's deadline (3 s a part): who the card is comes back, the
    // rest of its many calls do not.
    machine.set_shared_faults("slow_ms=200");
    let slow = |arguments: &[&str]| {
        machine
            .command(arguments)
            .env("GPUTUNE_DRIVER_TIMEOUT_MS", "1000")
            .output()
            .expect("status runs")
    };
    let json = slow(&["status", "--json"]);
    let text = slow(&["status"]);
    machine.set_shared_faults("");
    assert!(
        !json.status.success(),
        "incomplete is a failure for scripts"
    );
    let report: Value = serde_json::from_slice(&json.stdout).expect("JSON even so");
    let gpu = &report["gpus"][0];
    assert_eq!(gpu["name"], "NVIDIA GeForce RTX 4090", "{report}");
    let not_read = gpu["not_read"][0].as_str().unwrap_or_default();
    assert!(not_read.contains("did not answer within 3 s"), "{report}");
    let printed = String::from_utf8_lossy(&text.stdout);
    assert!(printed.contains("NVIDIA GeForce RTX 4090"), "{printed}");
    assert!(printed.contains("Not read"), "{printed}");
    let said = String::from_utf8_lossy(&text.stderr);
    assert!(said.contains("answering slowly"), "{said}");
}

#[test]
fn help_lists_everyday_commands_and_options_first_and_the_simulators_apart() {
    let help = |arguments: &[&str]| {
        let output = crate::common::gputune_alone(arguments);
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let top = help(&["--help"]);
    let at = |text: &str, what: &str| {
        text.find(what)
            .unwrap_or_else(|| panic!("{what} is missing:\n{text}"))
    };
    // Commands: watching and tuning before the daemon's plumbing.
    assert!(at(&top, "  status") < at(&top, "  apply"));
    assert!(at(&top, "  sweep") < at(&top, "  daemon"));
    // Options: everyday ones, then the simulator's under a heading of their own.
    let heading = at(&top, "Simulator (no NVIDIA GPU, or --backend sim):");
    assert!(at(&top, "--interval-ms") < at(&top, "--socket"));
    assert!(at(&top, "--socket") < heading);
    assert!(heading < at(&top, "--sim-scenario"));
    // The same in a subcommand: its own options first.
    let apply = help(&["apply", "--help"]);
    assert!(at(&apply, "--power-limit") < at(&apply, "Simulator ("));
    assert!(at(&apply, "Simulator (") < at(&apply, "--sim-load"));
}

#[test]
fn status_shows_the_locks_and_offsets_in_force() {
    let machine = FakeMachine::new("rtx4090", "");
    let applied = machine.gputune(&[
        "apply",
        "--lock-gpu-clocks",
        "210,2520",
        "--gpu-clock-offset",
        "150",
        "--power-limit",
        "400W",
    ]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let text = machine.gputune(&["status"]);
    let printed = String::from_utf8_lossy(&text.stdout);
    let settings = printed
        .lines()
        .find(|line| line.trim_start().starts_with("Settings"))
        .unwrap_or_else(|| panic!("no Settings line:\n{printed}"));
    for part in [
        "power limit 400 W",
        "GPU clocks 210-2520 MHz",
        "GPU offset +150 MHz (P0, P2)",
        "memory clock lock not set by gputune",
    ] {
        assert!(settings.contains(part), "{part}: {settings}");
    }
    // Every P-state's offset, P8's (which takes none) included.
    assert!(
        printed.contains(
            "  Offsets      GPU P0 +150, P2 +150, P8 +0 MHz; memory P0 +0, P2 +0, P8 +0 MHz (training runs in P2)"
        ),
        "{printed}"
    );
    let report = parse_json(&machine.gputune(&["status", "--json"]));
    let in_force = &report["gpus"][0]["settings_in_force"];
    assert_eq!(in_force["gpu_clock_offset_mhz"], 150, "{report}");
    let offsets: Vec<(u64, i64)> = in_force["gpu_clock_offsets"]
        .as_array()
        .map(|offsets| {
            offsets
                .iter()
                .map(|offset| {
                    (
                        offset["pstate"].as_u64().unwrap_or(99),
                        offset["offset_mhz"].as_i64().unwrap_or(-1),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(offsets, vec![(0, 150), (2, 150), (8, 0)], "{report}");
    let ranges = &report["gpus"][0]["gpu_clock_offset_pstates"];
    assert_eq!(ranges[2]["pstate"], 8, "{report}");
    assert_eq!(ranges[2]["max_mhz"], 0, "{report}");
    assert_eq!(in_force["gpu_clock_lock"]["max_mhz"], 2520, "{report}");
}

/// A clock-lock record of this boot that the card contradicts (a lock of at most 1500 MHz on
/// record, the card boosting past it under load: another card's record under the same UUID,
/// such as a fake card of an earlier test, or a lock reset since) is not said as fact: the
/// lock is unknown. A lock gputune set and the card keeps is still said.
#[test]
fn a_recorded_lock_the_card_contradicts_is_reported_as_unknown() {
    use gputune_core::tuning::state_folder::StateFolder;
    use gputune_formats::tuning::{ClockLockInForce, LockRecord};

    let machine = FakeMachine::for_processes("rtx4090", "training");
    let stale = ClockLockInForce::Locked {
        min_mhz: 500,
        max_mhz: 1500,
    };
    StateFolder::open(&machine.state_dir())
        .expect("the state folder opens")
        .write_locks(
            &machine.uuid(0),
            LockRecord {
                gpu_clock_lock: stale,
                memory_clock_lock: ClockLockInForce::Unknown,
            },
        )
        .expect("the record is written");
    let report = parse_json(&machine.gputune(&["status", "--json"]));
    let gpu = &report["gpus"][0];
    assert!(
        gpu["gpu_clock_mhz"].as_u64().is_some_and(|mhz| mhz > 1600),
        "the card boosts past the recorded lock: {report}"
    );
    assert_eq!(
        gpu["settings_in_force"]["gpu_clock_lock"]["type"], "unknown",
        "{report}"
    );
    let text = machine.gputune(&["status"]);
    let printed = String::from_utf8_lossy(&text.stdout);
    assert!(!printed.contains("500-1500 MHz"), "{printed}");
    assert!(
        printed.contains("GPU and memory clock locks not set by gputune"),
        "{printed}"
    );

    // The lock set for real: the card keeps to it, so the record is believed.
    let applied = machine.gputune(&["apply", "--lock-gpu-clocks", "500,1500"]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let report = parse_json(&machine.gputune(&["status", "--json"]));
    let in_force = &report["gpus"][0]["settings_in_force"];
    assert_eq!(in_force["gpu_clock_lock"]["max_mhz"], 1500, "{report}");
}
