//! Messages as the release before protocol 7 wrote them (commit 34c0ee9, protocol 6), kept under
//! `tests/data/formats/34c0ee9/` as that commit's golden files. Protocol 7 added the session
//! purpose `job` (a scheduler's job, through the SPANK plugin), which a protocol-6 peer cannot
//! read; the rest came with serde defaults (a job on a holder and a session request, a card's
//! device-file number, a step that joined its job's session). No file on disk changed.

use gputune_formats::protocol::{Message, Request, parse_request_line};

use super::disk::read;
use super::formats_dir;

fn v6_file(name: &str) -> Vec<u8> {
    read(&formats_dir().join("34c0ee9").join(name))
}

/// A protocol-6 peer is told to upgrade (its hello reads), and every message it read is one
/// today's client reads the same, only without the parts protocol 7 added.
#[test]
fn a_protocol_6_peer_is_understood_and_its_messages_still_read() {
    let requests = String::from_utf8_lossy(&v6_file("protocol-v6-requests.jsonl")).to_string();
    let hello = requests
        .lines()
        .next()
        .map(|line| parse_request_line(line.as_bytes()).map(|line| line.request));
    assert_eq!(
        hello,
        Some(Ok(Request::Hello {
            protocol: 6,
            client: "gputune apply --try 60".to_string()
        }))
    );
    for line in requests.lines() {
        assert!(
            parse_request_line(line.as_bytes()).is_ok(),
            "every protocol-6 request reads as a protocol-7 one: {line}"
        );
    }
    let messages = String::from_utf8_lossy(&v6_file("protocol-v6-messages.jsonl")).to_string();
    for line in messages.lines() {
        let message = serde_json::from_str::<Message>(line);
        assert!(
            message.is_ok(),
            "every protocol-6 message is a protocol-7 one without the job parts: {line}"
        );
    }
    assert!(
        messages.lines().count() >= 10,
        "the kept messages are all there"
    );
}
