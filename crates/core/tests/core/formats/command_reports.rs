//! The `--json` reports, pinned byte for byte (docs/json.md promises their fields to scripts):
//! one realistic value of each, printed as the command prints it, compared with
//! `tests/data/formats/reports/`. Reports are only written, so nothing reads them back.

use serde::Serialize;

use gputune_core::formats::reports::status::{
    GpuEntry, GpuFailure, GpuStatus, STATUS_REPORT_FORMAT, SessionStatus, StatusReport,
};

use gputune_core::formats::reports::profile_list::{
    ListedProblem, ListedProfile, PROFILE_LIST_FORMAT, ProfileList,
};

use super::disk::profile;
use super::golden;
use super::values::{constraints, identity, in_force, telemetry, tuning};

/// What `--json` prints: the pretty layout and a newline.
pub fn printed<T: Serialize>(report: &T) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Err(error) = gputune_core::text::write_json_pretty(&mut bytes, report) {
        panic!("the report did not serialize: {error}");
    }
    bytes.push(b'\n');
    bytes
}

#[test]
fn status_json_writes_its_bytes() {
    let tuning = tuning();
    let telemetry = telemetry();
    let sessions = tuning
        .holders
        .iter()
        .map(|holder| SessionStatus {
            holder: holder.clone(),
            energy_used_mj: Some(12_345_678),
        })
        .collect();
    let read = GpuStatus {
        identity: identity(),
        constraints: constraints(),
        fan_speed_pct: Some(vec![Some(48), Some(55)]),
        fan_speed_rpm: Some(vec![Some(1450), None]),
        telemetry,
        clock_offsets_supported: true,
        sessions,
        not_read: vec![
            "processes (the driver did not answer within 30 s; nothing after it was asked)"
                .to_string(),
        ],
        has_readings: true,
        settings_in_force: Some(in_force()),
        last_critical: tuning.last_critical.clone(),
    };
    let report = StatusReport {
        format_version: STATUS_REPORT_FORMAT,
        backend: "nvml".to_string(),
        simulated_because: None,
        gpus: vec![
            GpuEntry::Read(Box::new(read)),
            GpuEntry::Failed(GpuFailure {
                index: 1,
                error: "GPU 1 is lost: it fell off the bus (Xid 79); reboot to get it back"
                    .to_string(),
            }),
        ],
    };
    golden("reports/status.json", &printed(&report));
}

#[test]
fn profile_list_json_writes_its_bytes() {
    let (quiet, checked) = (profile(false), profile(true));
    let report = ProfileList {
        format_version: PROFILE_LIST_FORMAT,
        folder: "/home/alice/.config/gputune/profiles".to_string(),
        profiles: vec![
            ListedProfile {
                path: "/home/alice/.config/gputune/profiles/quiet.toml".to_string(),
                profile: &quiet,
            },
            ListedProfile {
                path: "/home/alice/.config/gputune/profiles/checked.toml".to_string(),
                profile: &checked,
            },
        ],
        problems: vec![ListedProblem {
            path: "/home/alice/.config/gputune/profiles/broken.toml".to_string(),
            message: "broken.toml: not a profile (TOML parse error at line 3: expected `=`)"
                .to_string(),
        }],
    };
    golden("reports/profile-list.json", &printed(&report));
}
