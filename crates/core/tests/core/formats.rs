//! The wire and disk formats, pinned byte for byte. Each golden file under
//! `tests/data/formats/` is what today's code writes for fixed values; a test fails when the
//! bytes change and says what to do, and reads every golden file back to the same values.
//! Files as previous releases wrote them (`tests/data/formats/8ab058c/`, `1d84280/` and
//! `ac1ed75/`) must still read. After a deliberate change, regenerate with
//! `GPUTUNE_BLESS=1 cargo test -p gputune-core --test core formats` and commit the new files.

#[path = "formats/command_reports.rs"]
mod command_reports;
#[path = "formats/command_reports_rank.rs"]
mod command_reports_rank;
#[path = "formats/command_reports_sweep.rs"]
mod command_reports_sweep;
#[path = "formats/disk.rs"]
mod disk;
#[path = "formats/plan_exports.rs"]
mod plan_exports;
#[path = "formats/plan_report.rs"]
mod plan_report;
#[path = "formats/previous.rs"]
mod previous;
#[path = "formats/previous_v4.rs"]
mod previous_v4;
#[path = "formats/previous_v5.rs"]
mod previous_v5;
#[path = "formats/previous_v6.rs"]
mod previous_v6;
#[path = "formats/report_box_check.rs"]
mod report_box_check;
#[path = "formats/report_links.rs"]
mod report_links;
#[path = "formats/report_measure.rs"]
mod report_measure;
#[path = "formats/values.rs"]
mod values;
#[path = "formats/vocabulary.rs"]
mod vocabulary;
#[path = "formats/window.rs"]
mod window;
#[path = "formats/wire.rs"]
mod wire;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use gputune_formats::protocol::{Message, PROTOCOL_VERSION, RequestLine};

pub fn formats_dir() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/data/formats")
}

/// Compares `actual` with the golden file `name`, or writes it under `GPUTUNE_BLESS=1`.
pub fn golden(name: &str, actual: &[u8]) {
    let path = formats_dir().join(name);
    if std::env::var_os("GPUTUNE_BLESS").is_some_and(|value| value == "1") {
        if let Err(error) = std::fs::write(&path, actual) {
            panic!("{} could not be written: {error}", path.display());
        }
        return;
    }
    let expected = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) => panic!(
            "{} could not be read ({error}); write it with `GPUTUNE_BLESS=1 cargo test -p gputune-core --test core formats`.",
            path.display()
        ),
    };
    if expected != actual {
        panic!(
            "A format changed: today's code no longer writes the bytes of {}.\n{}\n\
             Files and clients of the previous release hold the old bytes. If the change is \
             deliberate: bump the format's version (PROTOCOL_VERSION, the journal's \
             format_version, the profile's schema_version, the history ring's FORMAT_VERSION), \
             keep reading the old form (add it under tests/data/formats/<release>/ and to \
             crates/core/tests/core/formats/), then regenerate with \
             `GPUTUNE_BLESS=1 cargo test -p gputune-core --test core formats` and commit the new golden file. \
             Otherwise put the bytes back.",
            path.display(),
            difference(&expected, actual)
        );
    }
}

/// The first lines that differ (text), or the first byte that differs (binary).
fn difference(expected: &[u8], actual: &[u8]) -> String {
    match (std::str::from_utf8(expected), std::str::from_utf8(actual)) {
        (Ok(expected), Ok(actual)) => {
            let mut lines = Vec::new();
            let (old, new): (Vec<&str>, Vec<&str>) =
                (expected.lines().collect(), actual.lines().collect());
            for at in 0..old.len().max(new.len()) {
                let (before, after) = (old.get(at), new.get(at));
                if before != after {
                    let column = match (before, after) {
                        (Some(old), Some(new)) => old
                            .chars()
                            .zip(new.chars())
                            .position(|(old, new)| old != new)
                            .unwrap_or(old.chars().count().min(new.chars().count())),
                        _ => 0,
                    };
                    lines.push(format!("line {}, from character {column}:", at + 1));
                    lines.extend(before.map(|line| format!("- {}", around(line, column))));
                    lines.extend(after.map(|line| format!("+ {}", around(line, column))));
                }
                if lines.len() > 30 {
                    lines.push("...".to_string());
                    break;
                }
            }
            lines.join("\n")
        }
        _ => {
            let at = expected
                .iter()
                .zip(actual)
                .position(|(old, new)| old != new)
                .unwrap_or(expected.len().min(actual.len()));
            format!(
                "first difference at byte {at} (golden {} bytes, now {} bytes)",
                expected.len(),
                actual.len()
            )
        }
    }
}

/// A long line (a message) shown from a little before `column`, not whole.
fn around(line: &str, column: usize) -> String {
    const BEFORE: usize = 40;
    const SHOWN: usize = 160;
    let start = column.saturating_sub(BEFORE);
    let shown: String = line.chars().skip(start).take(SHOWN).collect();
    let head = if start > 0 { "…" } else { "" };
    let tail = if line.chars().count() > start + SHOWN {
        "…"
    } else {
        ""
    };
    format!("{head}{shown}{tail}")
}

/// One JSON document a line, as the socket and the changes file carry them.
pub fn json_lines<T: Serialize>(values: &[T]) -> String {
    values
        .iter()
        .map(|value| match serde_json::to_string(value) {
            Ok(line) => line + "\n",
            Err(error) => panic!("a fixed value does not serialize: {error}"),
        })
        .collect()
}

pub fn read_json_lines<T: DeserializeOwned>(name: &str) -> Vec<T> {
    let path = formats_dir().join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => panic!("{} could not be read: {error}", path.display()),
    };
    text.lines()
        .enumerate()
        .map(|(at, line)| match serde_json::from_str(line) {
            Ok(value) => value,
            Err(error) => panic!("{} line {}: {error}", path.display(), at + 1),
        })
        .collect()
}

#[test]
fn the_protocol_version_is_the_one_the_golden_files_were_written_for() {
    assert_eq!(
        PROTOCOL_VERSION, 7,
        "the protocol's version changed: write tests/data/formats/protocol-v{PROTOCOL_VERSION}-*.jsonl \
         (move the old ones under tests/data/formats/<release>/, with a test that their greeting still reads) and point crates/core/tests/core/formats.rs at them"
    );
}

#[test]
fn every_request_writes_the_bytes_of_protocol_v6_and_reads_back() {
    let lines = wire::request_lines();
    golden("protocol-v7-requests.jsonl", json_lines(&lines).as_bytes());
    let read: Vec<RequestLine> = read_json_lines("protocol-v7-requests.jsonl");
    assert_eq!(read, lines);
    // Each line is also what the daemon's own parser accepts.
    let path = formats_dir().join("protocol-v7-requests.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    for (line, expected) in text.lines().zip(&lines) {
        assert_eq!(
            gputune_formats::protocol::parse_request_line(line.as_bytes()).as_ref(),
            Ok(expected)
        );
    }
}

#[test]
fn every_response_and_event_writes_the_bytes_of_protocol_v6_and_reads_back() {
    let messages = wire::messages();
    golden(
        "protocol-v7-messages.jsonl",
        json_lines(&messages).as_bytes(),
    );
    let read: Vec<Message> = read_json_lines("protocol-v7-messages.jsonl");
    assert_eq!(read, messages);
}
