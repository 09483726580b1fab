//! Files as the release before protocol 6 wrote them (commit 8ab058c, protocol 5), kept under
//! `tests/data/formats/8ab058c/` as that commit's golden files: its journal (format 3) and its
//! protocol-5 requests and messages. Protocol 6 added the settings of one P-state's offset
//! (`gpu_clock_offset_at`, `memory_clock_offset_at`), which a put-back report or a journal may
//! now name and a protocol-5 peer cannot read; it also added, with serde defaults, each
//! P-state's offsets and ranges to what a card runs and accepts. A daemon upgraded in place
//! meets a format-3 journal and must put each card back exactly as it says: P0's offset alone,
//! the one gputune wrote then.

use gputune_core::tuning::state_folder::file_safe;
use gputune_formats::files::JOURNAL_FORMAT;
use gputune_formats::protocol::{Message, Request, Response, parse_request_line};
use gputune_formats::tuning::TuneErrorKind;

use super::disk::{journal, place, read, read_as_p0_offsets, state_folder, temp};
use super::formats_dir;
use super::values::UUID;

fn v5_file(name: &str) -> Vec<u8> {
    read(&formats_dir().join("8ab058c").join(name))
}

#[test]
fn a_journal_of_format_3_puts_the_card_back_with_every_setting_it_named() {
    let dir = temp();
    let folder = state_folder(dir.path());
    let path = folder
        .dir()
        .join(format!("journal-{}.json", file_safe(UUID)));
    place(&path, &v5_file("journal-v3.json"));
    let mut expected = read_as_p0_offsets(journal());
    expected.format_version = JOURNAL_FORMAT;
    assert_eq!(folder.read_journal(UUID), Ok(Some(expected)));
    assert!(path.exists(), "a readable old journal is not set aside");
}

/// A protocol-5 peer is told to upgrade: its hello and its refusals read; what it says of a
/// card (in force, constraints) reads too, without the P-state parts it never had.
#[test]
fn a_protocol_5_peer_is_understood_well_enough_to_be_told_to_upgrade() {
    let requests = String::from_utf8_lossy(&v5_file("protocol-v5-requests.jsonl")).to_string();
    let hello = requests
        .lines()
        .next()
        .map(|line| parse_request_line(line.as_bytes()).map(|line| line.request));
    assert_eq!(
        hello,
        Some(Ok(Request::Hello {
            protocol: 5,
            client: "gputune apply --try 60".to_string()
        }))
    );
    let messages = String::from_utf8_lossy(&v5_file("protocol-v5-messages.jsonl")).to_string();
    let refusal = messages
        .lines()
        .find(|line| line.contains(r#""kind":"held""#))
        .map(serde_json::from_str::<Message>);
    match refusal {
        Some(Ok(Message::Response {
            response: Response::Error { error },
            ..
        })) => assert_eq!(error.kind, TuneErrorKind::Held),
        other => panic!("a v5 refusal does not read: {other:?}"),
    }
    for line in messages.lines() {
        assert!(
            serde_json::from_str::<Message>(line).is_ok(),
            "every protocol-5 message is a protocol-6 one without the P-state parts: {line}"
        );
    }
}
