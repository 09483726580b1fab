//! Files as the previous release (commit ac1ed75, protocol 3) wrote them, written by hand from
//! that commit's code (`git show ac1ed75:src/...`) under `tests/data/formats/ac1ed75/`: today's
//! code must read each to the values it meant. What changed since: protocol 3 → 4
//! (`SessionPurpose` gained `stability` and `scan`, `EngineEvent` gained `critical`,
//! `Constraints` gained `boost_clock_mhz` and `Telemetry` gained `ecc`, both with serde
//! defaults) and profiles gained an optional `last_check`. The journal, the clock-lock record,
//! boot defaults and the history files did not change.
//! The ring file is made by `ac1ed75/make_ring.py` from that commit's layout, without any
//! gputune code, so it checks the layout rather than a round trip.

use gputune_core::profiles::toml_text::parse_profile;
use gputune_core::telemetry::store::changes::ChangeLog;
use gputune_core::telemetry::store::ring::RingFile;
use gputune_core::tuning::state_folder::file_safe;
use gputune_formats::fan_curve::{CurvePoint, FanCurve};
use gputune_formats::files::JOURNAL_FORMAT;
use gputune_formats::history::HistoryRow;
use gputune_formats::protocol::{
    BootDefault, Message, PROTOCOL_VERSION, Request, Response, parse_request_line,
};
use gputune_formats::tuning::{ChangeNote, GpuInfo, TuneErrorKind};
use gputune_formats::tuning::{ClockLockInForce, LockRecord};
use gputune_formats::{
    card::{BackendKind, ClockRangeMhz, FanRangePct, Setting},
    throttle::ThrottleReason,
};

use super::disk::{GOLDEN_BOOT_ID, place, read, state_folder, temp, this_boot};
use super::formats_dir;

const OLD_UUID: &str = "GPU-0b7e2c11-1111-4111-8111-000000000002";

fn old_file(name: &str) -> Vec<u8> {
    read(&formats_dir().join("ac1ed75").join(name))
}

#[test]
fn a_journal_of_the_previous_release_puts_the_card_back_as_it_said() {
    let dir = temp();
    let folder = state_folder(dir.path());
    let path = folder
        .dir()
        .join(format!("journal-{}.json", file_safe(OLD_UUID)));
    place(&path, &old_file("journal.json"));
    let journal = match folder.read_journal(OLD_UUID) {
        Ok(Some(journal)) => journal,
        other => panic!("the old journal does not read: {other:?}"),
    };
    // Read as format 2, held as today's (it is rewritten so at the card's next change).
    assert_eq!(journal.format_version, JOURNAL_FORMAT);
    assert_eq!(journal.backend, BackendKind::Nvml);
    assert_eq!(journal.index, 1);
    assert_eq!(
        journal.restore,
        vec![
            Setting::PowerLimit {
                power_limit_mw: 450_000
            },
            Setting::ResetGpuClocks,
            // What gputune wrote then: P0's offset alone.
            Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz: 0
            },
            Setting::FanAutomatic { fan_index: 0 },
        ]
    );
    assert_eq!(journal.by, "gputune run --profile Quiet (pid 77, user bob)");
    assert_eq!(journal.written_at_ms, 1_763_900_000_000);
}

#[test]
fn a_clock_lock_record_of_the_previous_release_reads_in_its_boot() {
    let dir = temp();
    let folder = state_folder(dir.path());
    let text = String::from_utf8_lossy(&old_file("clock-lock-record.json"))
        .replace(GOLDEN_BOOT_ID, &this_boot());
    place(
        &folder
            .record_dir()
            .join(format!("record-{}.json", file_safe(OLD_UUID))),
        text.as_bytes(),
    );
    assert_eq!(
        folder.read_locks(OLD_UUID),
        Some(LockRecord {
            gpu_clock_lock: ClockLockInForce::Unknown,
            memory_clock_lock: ClockLockInForce::Locked {
                min_mhz: 405,
                max_mhz: 9501
            },
        })
    );
}

#[test]
fn a_boot_default_of_the_previous_release_reads_with_its_fan_curve() {
    let read = BootDefault::from_file_bytes(&old_file("boot-default.json"))
        .map_err(|error| error.to_string());
    let curve = FanCurve::new(
        vec![
            CurvePoint {
                temperature_c: 30.0,
                speed_pct: 30.0,
            },
            CurvePoint {
                temperature_c: 80.0,
                speed_pct: 90.0,
            },
        ],
        2.0,
    )
    .map_err(|error| error.to_string());
    assert_eq!(
        read,
        curve.map(|curve| BootDefault {
            gpu_uuid: OLD_UUID.to_string(),
            profile_name: "Night".to_string(),
            settings: vec![
                Setting::PowerLimit {
                    power_limit_mw: 300_000
                },
                Setting::LockGpuClocks {
                    min_mhz: 210,
                    max_mhz: 2400
                },
                Setting::MemoryClockOffset { offset_mhz: -500 },
            ],
            fan_curve: Some(curve),
            temperature_hold: None,
        })
    );
}

#[test]
fn a_profile_of_the_previous_release_reads_without_a_last_check() {
    let profile = match parse_profile(&old_file("profile.toml")) {
        Ok(profile) => profile,
        Err(problem) => panic!("the old profile does not read: {problem:?}"),
    };
    assert_eq!(profile.name, "Night");
    assert_eq!(profile.card.uuid, OLD_UUID);
    assert_eq!(profile.last_check, None);
    assert_eq!(profile.power_limit.map(|power| power.watts), Some(300.0));
    assert_eq!(
        profile
            .memory_clock_lock
            .map(|lock| (lock.min_mhz, lock.max_mhz)),
        Some((405, 9501))
    );
    assert_eq!(profile.gpu_clock_lock, None);
    assert_eq!(profile.gpu_clock_offset_mhz, Some(120));
    assert_eq!(profile.fan_curve.map(|points| points.len()), Some(2));
    assert!(!profile.default_for_card);
}

#[test]
fn the_history_changes_of_the_previous_release_read_back() {
    let dir = temp();
    let path = dir.path().join("changes.jsonl");
    place(&path, &old_file("history-changes.jsonl"));
    let (log, problem) = ChangeLog::open(&path);
    assert_eq!(problem, None);
    assert_eq!(
        log.between(0, u64::MAX),
        vec![
            ChangeNote {
                at_ms: 1_763_900_000_000,
                by: "gputune run --profile Night (pid 77, user bob)".to_string(),
                what: "power limit 300 W, GPU clock offset +120 MHz".to_string(),
            },
            ChangeNote {
                at_ms: 1_763_900_300_000,
                by: "another program".to_string(),
                what: "power limit 350 W".to_string(),
            },
        ]
    );
}

/// Protocol 3 and 4 never talk past a greeting, but the greeting and its refusal must read on
/// both sides so each says "use the same version" instead of failing to parse; and what the
/// v4 fields default to must be what a v3 peer meant.
#[test]
fn a_protocol_3_peer_is_understood_well_enough_to_be_told_to_upgrade() {
    let text = String::from_utf8_lossy(&old_file("protocol-v3.jsonl")).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");

    let hello = parse_request_line(lines[0].as_bytes()).map(|line| line.request);
    assert_eq!(
        hello,
        Ok(Request::Hello {
            protocol: 3,
            client: "gputune status".to_string()
        })
    );
    assert_ne!(PROTOCOL_VERSION, 3);

    match serde_json::from_str::<Message>(lines[1]) {
        Ok(Message::Response {
            id: 1,
            response: Response::Error { error },
        }) => {
            assert_eq!(error.kind, TuneErrorKind::Refused);
            assert!(error.message.contains("same version"), "{}", error.message);
        }
        other => panic!("a v3 daemon's refusal does not read: {other:?}"),
    }

    // Past the greeting the shapes differ (protocol 5 tags a reading `{"type":"ok",…}` where
    // protocol 3 wrote serde's `{"Ok":…}`): an old event is refused, never misread.
    assert!(
        serde_json::from_str::<Message>(lines[2]).is_err(),
        "a v3 samples event must not pass for a v5 one"
    );

    let info = serde_json::from_str::<GpuInfo>(lines[3]).map_err(|error| error.to_string());
    let info = match info {
        Ok(info) => info,
        Err(error) => panic!("a v3 card does not read: {error}"),
    };
    assert_eq!(
        info.constraints.boost_clock_mhz, None,
        "v3 had no boost clock"
    );
    assert_eq!(
        info.constraints.gpu_clock_range,
        Some(ClockRangeMhz {
            min_mhz: 210,
            max_mhz: 2100
        })
    );
    assert_eq!(
        info.constraints.fan_speed_range,
        Some(FanRangePct {
            min_pct: 30,
            max_pct: 100
        })
    );
}

/// `history.ring` is made by `make_ring.py` beside it, from ac1ed75's ring.rs layout without
/// any gputune code: two records, a torn one and a slot never written.
#[test]
fn a_history_ring_of_the_previous_release_reads_its_records_and_skips_a_torn_one() {
    const FIRST_S: u64 = 1_763_900_000;
    let dir = temp();
    let path = dir.path().join("old.ring");
    place(&path, &old_file("history.ring"));
    let (ring, notice) = match RingFile::open(&path, 4) {
        Ok(opened) => opened,
        Err(error) => panic!("the old ring could not be opened: {error}"),
    };
    assert_eq!(notice, None, "the old ring's header is refused");
    let full = [
        2500, 3000, 61, 40, 1905, 1905, 9501, 97, 55, 8192, 4, 16, 4, 16, 2,
    ]
    .map(Some);
    let mut partial = full;
    partial[2] = None;
    let expected = vec![
        HistoryRow {
            time_ms: FIRST_S * 1000,
            values: full,
            throttle_bits: Some(ThrottleReason::SwPowerCap.bit() as u16),
        },
        HistoryRow {
            time_ms: (FIRST_S + 1) * 1000 + 250,
            values: partial,
            throttle_bits: None,
        },
    ];
    assert_eq!(
        ring.read(FIRST_S, FIRST_S + 3)
            .map_err(|error| error.to_string()),
        Ok(expected)
    );
}
