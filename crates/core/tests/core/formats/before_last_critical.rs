//! Protocol 5 as 8ab058c wrote it, before `GpuTuning.last_critical` (the card's last crash,
//! added with a serde default): every one of its messages still reads, to today's values
//! without the field.

use super::{formats_dir, wire};
use gputune_core::service::protocol::Message;

/// `value` without any `last_critical` field, at any depth.
fn without_last_critical(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(fields) => {
            fields.remove("last_critical");
            fields.values_mut().for_each(without_last_critical);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(without_last_critical),
        _ => {}
    }
}

#[test]
fn every_message_of_8ab058c_reads_as_today_s_without_the_last_crash() {
    let path = formats_dir().join("8ab058c/protocol-v5-messages.jsonl");
    let old = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{} could not be read: {error}", path.display()));
    let today = wire::messages();
    assert_eq!(old.lines().count(), today.len());
    for (line, message) in old.lines().zip(&today) {
        let read: Message =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}"));
        let mut read = serde_json::to_value(&read).unwrap_or_else(|error| panic!("{error}"));
        let mut expected = serde_json::to_value(message).unwrap_or_else(|error| panic!("{error}"));
        without_last_critical(&mut read);
        without_last_critical(&mut expected);
        assert_eq!(read, expected, "{line}");
    }
    assert!(old.contains(r#""last_change""#) && !old.contains("last_critical"));
}
