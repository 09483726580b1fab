//! Files as the release before protocol 5 wrote them (commit 1d84280, protocol 4), kept under
//! `tests/data/formats/1d84280/` as that commit's golden files: its journal (format 2), its
//! clock-lock record and boot default (no `format_version`), its protocol-4 requests and
//! messages. Protocol 5 changed the serde style (docs/architecture.md, "Formats"): settings,
//! fan modes and clock locks internally tagged `type`, readings `{"type":"ok",…}`, named
//! objects instead of tuples. A daemon upgraded in place meets these files and must put
//! each card back exactly as they say.

use gputune_core::tuning::state_folder::file_safe;
use gputune_formats::files::JOURNAL_FORMAT;
use gputune_formats::protocol::{Message, Request, Response, parse_request_line};
use gputune_formats::tuning::TuneErrorKind;
use gputune_formats::tuning::{ClockLockInForce, LockRecord};

use super::disk::{
    GOLDEN_BOOT_ID, journal, place, read, read_as_p0_offsets, state_folder, temp, this_boot,
};
use super::formats_dir;
use super::values::{UUID, boot_default};

fn v4_file(name: &str) -> Vec<u8> {
    read(&formats_dir().join("1d84280").join(name))
}

#[test]
fn a_journal_of_format_2_puts_the_card_back_with_every_setting_it_named() {
    let dir = temp();
    let folder = state_folder(dir.path());
    let path = folder
        .dir()
        .join(format!("journal-{}.json", file_safe(UUID)));
    place(&path, &v4_file("journal-v2.json"));
    let mut expected = read_as_p0_offsets(journal());
    expected.format_version = JOURNAL_FORMAT;
    assert_eq!(folder.read_journal(UUID), Ok(Some(expected)));
    assert!(path.exists(), "a readable old journal is not set aside");
}

#[test]
fn a_clock_lock_record_without_a_format_version_reads_in_its_boot() {
    let dir = temp();
    let folder = state_folder(dir.path());
    let text = String::from_utf8_lossy(&v4_file("clock-lock-record.json"))
        .replace(GOLDEN_BOOT_ID, &this_boot());
    place(
        &folder
            .record_dir()
            .join(format!("record-{}.json", file_safe(UUID))),
        text.as_bytes(),
    );
    assert_eq!(
        folder.read_locks(UUID),
        Some(LockRecord {
            gpu_clock_lock: ClockLockInForce::Locked {
                min_mhz: 210,
                max_mhz: 2520
            },
            memory_clock_lock: ClockLockInForce::Unlocked,
        })
    );
}

#[test]
fn a_boot_default_without_a_format_version_reads_with_its_settings_and_curve() {
    let read =
        gputune_formats::protocol::BootDefault::from_file_bytes(&v4_file("boot-default.json"));
    // Files of that release knew no temperature hold.
    assert_eq!(
        read,
        Ok(gputune_formats::protocol::BootDefault {
            temperature_hold: None,
            ..boot_default()
        })
    );
}

#[test]
fn a_boot_default_of_an_unknown_format_is_refused_with_its_version() {
    let text = String::from_utf8_lossy(&read(&formats_dir().join("boot-default.json")))
        .replace("\"format_version\": 2", "\"format_version\": 9");
    let read = gputune_formats::protocol::BootDefault::from_file_bytes(text.as_bytes());
    match read {
        Err(message) => assert!(message.contains("format version 9"), "{message}"),
        Ok(default) => panic!("a format-9 boot default was read: {default:?}"),
    }
}

/// A protocol-4 peer never talks past the greeting with a protocol-5 one: its hello reads (so
/// the daemon answers "use the same version") and its refusals read (so a v5 client says why);
/// its other messages are refused, never misread.
#[test]
fn a_protocol_4_peer_is_understood_well_enough_to_be_told_to_upgrade() {
    let requests = String::from_utf8_lossy(&v4_file("protocol-v4-requests.jsonl")).to_string();
    let hello = requests
        .lines()
        .next()
        .map(|line| parse_request_line(line.as_bytes()).map(|line| line.request));
    assert_eq!(
        hello,
        Some(Ok(Request::Hello {
            protocol: 4,
            client: "gputune apply --try 60".to_string()
        }))
    );
    let old_apply = requests.lines().nth(3).unwrap_or_default();
    assert!(old_apply.contains("PowerLimit"), "{old_apply}");
    assert!(
        parse_request_line(old_apply.as_bytes()).is_err(),
        "a v4 setting must not pass for a v5 one"
    );

    let messages = String::from_utf8_lossy(&v4_file("protocol-v4-messages.jsonl")).to_string();
    let refusal = messages
        .lines()
        .find(|line| line.contains(r#""type":"error""#))
        .map(serde_json::from_str::<Message>);
    match refusal {
        Some(Ok(Message::Response {
            response: Response::Error { error },
            ..
        })) => assert_eq!(error.kind, TuneErrorKind::Held),
        other => panic!("a v4 refusal does not read: {other:?}"),
    }
    let snapshot = messages
        .lines()
        .find(|line| line.contains(r#""type":"snapshot""#))
        .unwrap_or_default();
    assert!(
        serde_json::from_str::<Message>(snapshot).is_err(),
        "a v4 snapshot (serde's {{\"Ok\":…}} readings) must not pass for a v5 one"
    );
}
