//! A profile's undervolt is checked per card, on the fake libnvidia-ml's eight RTX 4090s: a
//! profile saved and checked on GPU 0 gives GPU 3 its power limit but no clock offset, with a
//! sentence naming GPU 3 by model and UUID and the commands that check it (`profile apply` and
//! `run --profile` alike); after `gputune stability --profile` on GPU 3 records GPU 3's own
//! entry, GPU 3 gets its offset; a scan of GPU 5 saved into the profile adds GPU 5's own and
//! keeps the others.

use common::FakeMachine;

use crate::common;
use gputune_core::profiles::checked::CheckedOffsets;
use gputune_formats::card::Setting;

fn text(bytes: &[u8]) -> String {
    common::text(bytes)
}

/// Runs gputune and expects success; returns stderr.
fn ok(machine: &FakeMachine, arguments: &[&str]) -> String {
    let output = machine.gputune(arguments);
    let stderr = text(&output.stderr);
    assert!(
        output.status.success(),
        "{arguments:?} failed: {stderr}\n{}",
        text(&output.stdout)
    );
    stderr
}

/// The clock offsets other than stock (0 MHz, safe on any card) written to GPU `gpu` since
/// the write log held `since` records.
fn offsets_written(machine: &FakeMachine, gpu: u32, since: usize) -> Vec<Setting> {
    machine
        .write_log()
        .into_iter()
        .skip(since)
        .filter(|record| record.gpu_index == gpu && record.result_code == 0)
        .map(|record| record.setting)
        .filter(|setting| match setting {
            Setting::GpuClockOffset { offset_mhz }
            | Setting::GpuClockOffsetAt { offset_mhz, .. }
            | Setting::MemoryClockOffset { offset_mhz }
            | Setting::MemoryClockOffsetAt { offset_mhz, .. } => *offset_mhz != 0,
            _ => false,
        })
        .collect()
}

#[test]
fn a_profile_checked_on_gpu_0_gives_gpu_3_no_offset_until_gpu_3_is_checked() {
    let machine = FakeMachine::for_processes("8x-rtx4090", "training");
    let (uuid0, uuid3, uuid5) = (machine.uuid(0), machine.uuid(3), machine.uuid(5));
    for arguments in [
        vec!["apply", "--gpu", "0", "--gpu-clock-offset", "15"],
        vec!["profile", "save", "Mild", "--gpu", "0"],
        vec!["apply", "--gpu", "0", "--gpu-clock-offset", "0"],
        vec![
            "stability",
            "--profile",
            "Mild",
            "--gpu",
            "0",
            "--duration-s",
            "2",
        ],
    ] {
        ok(&machine, &arguments);
    }

    // Applied to GPU 3: no offset reaches it, and the sentence names it and the commands.
    let before = machine.write_log().len();
    let said = ok(&machine, &["profile", "apply", "Mild", "--gpu", "3"]);
    assert_eq!(offsets_written(&machine, 3, before), vec![], "{said}");
    assert_eq!(machine.settings(3).gpu_clock_offset_mhz, 0);
    for expected in [
        format!(
            "No clock offset is applied to this NVIDIA GeForce RTX 4090 ({})",
            gputune_core::text::short_uuid(&uuid3)
        ),
        "was never checked with this profile's undervolt".to_string(),
        format!("`gputune stability --profile \"Mild\" --gpu {uuid3}`"),
        format!("`gputune scan --gpu {uuid3} --save-profile \"Mild\" --replace`"),
    ] {
        assert!(said.contains(&expected), "{expected:?} in {said}");
    }
    // `run --profile` shares the rule.
    let before = machine.write_log().len();
    let said = ok(
        &machine,
        &["run", "--profile", "Mild", "--gpu", "3", "--", "true"],
    );
    assert_eq!(offsets_written(&machine, 3, before), vec![], "{said}");
    assert!(
        said.contains("was never checked with this profile's undervolt"),
        "{said}"
    );

    // A check on GPU 3 holds the profile's offset there and records GPU 3's own entry.
    let said = ok(
        &machine,
        &[
            "stability",
            "--profile",
            "Mild",
            "--gpu",
            "3",
            "--duration-s",
            "2",
        ],
    );
    assert!(said.contains("checked here"), "{said}");
    assert_eq!(machine.settings(3).gpu_clock_offset_mhz, 0, "put back");
    let shown = text(&machine.gputune(&["profile", "show", "Mild"]).stdout);
    assert!(shown.contains("Checked cards:"), "{shown}");
    let gpu3_line = shown
        .lines()
        .find(|line| {
            line.contains("GPU offset +15 MHz; a check found it stable")
                && line.contains(&gputune_core::text::short_uuid(&uuid3))
        })
        .unwrap_or_else(|| panic!("a line for GPU 3 in {shown}"));
    assert!(
        gpu3_line.starts_with("  NVIDIA GeForce RTX 4090"),
        "{shown}"
    );
    let file = std::fs::read_to_string(machine.config_dir().join("profiles").join("mild.toml"))
        .expect("the profile file");
    for uuid in [&uuid0, &uuid3] {
        assert!(
            file.contains(&format!("gpu_uuid = \"{uuid}\"")),
            "{uuid} in {file}"
        );
    }

    // Now GPU 3 gets its own offset, and says whose it is.
    let before = machine.write_log().len();
    let said = ok(&machine, &["profile", "apply", "Mild", "--gpu", "3"]);
    assert!(!offsets_written(&machine, 3, before).is_empty(), "{said}");
    assert_eq!(machine.settings(3).gpu_clock_offset_mhz, 15);
    assert!(said.contains("This card's own clock offsets"), "{said}");
    assert!(!said.contains("No clock offset"), "{said}");

    // A scan of GPU 5 saved into the profile adds GPU 5's own offset and keeps the rest.
    ok(
        &machine,
        &[
            "scan",
            "--gpu",
            "5",
            "--step-s",
            "1",
            "--confirm-s",
            "2",
            "--save-profile",
            "Mild",
            "--replace",
        ],
    );
    let file = std::fs::read_to_string(machine.config_dir().join("profiles").join("mild.toml"))
        .expect("the profile file");
    let saved = gputune_core::profiles::toml_text::parse_profile(file.as_bytes())
        .unwrap_or_else(|problem| panic!("{problem:?}: {file}"));
    assert_eq!(saved.card.uuid, uuid0, "still GPU 0's profile");
    assert_eq!(saved.gpu_clock_offset_mhz, Some(15));
    let entry5 = saved
        .checked_entry_for(&uuid5)
        .unwrap_or_else(|| panic!("GPU 5's entry in {file}"));
    assert_eq!(entry5.by, gputune_formats::profile::CheckedBy::Scan);
    assert!(saved.checked_entry_for(&uuid3).is_some(), "{file}");
}
