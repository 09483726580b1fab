//! The box check's lock, on the simulator's 8-GPU box: one box check is journaled at a time
//! (a second is refused naming who runs the first, whoever asks), a second engine on the same
//! folder never takes a live check's journal for a left one, and a hard-linked lock file is
//! refused and left as it is.

use super::box_journal::{
    START_MS, box_check, box_check_by, eight, journal_path, open, open_in_process, set_aside,
};
use super::*;

#[test]
fn a_second_box_check_is_refused_naming_the_first_and_its_journal_stays() {
    let clock = ManualClock::starting_at(START_MS);
    let backend = eight(&clock);
    let folder = tempfile::tempdir().expect("a state folder");
    let (mut engine, _) = open(backend, &folder, &clock);
    let root = ClientInfo {
        uid: Some(0),
        user: Some("root".to_string()),
        ..client(1, "gputune stability --together")
    };
    box_check_by(&mut engine, &root).unwrap_or_else(|error| panic!("{error}"));
    let first = std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}"));
    // Another user's check (a raw request, past any client-side check), then root's own second.
    let bob = ClientInfo {
        uid: Some(1001),
        user: Some("bob".to_string()),
        ..client(2, "gputune stability --together")
    };
    // Root's second connection.
    let root_again = ClientInfo {
        id: 3,
        ..root.clone()
    };
    for second in [&bob, &root_again] {
        let refused = box_check_by(&mut engine, second).expect_err("one box check at a time");
        assert!(
            refused.message.contains("A box check is running")
                && refused.message.contains("user root"),
            "{}",
            refused.message
        );
        // The refused client's going (its end) touches nothing of the first check.
        engine.client_gone(second.id);
    }
    assert_eq!(
        std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}")),
        first,
        "the first check's journal is intact"
    );
}

#[test]
fn a_second_engine_on_the_same_folder_mid_check_says_nothing_and_leaves_the_journal() {
    let clock = ManualClock::starting_at(START_MS);
    let folder = tempfile::tempdir().expect("a state folder");
    let (mut engine, _) = open_in_process(&folder, &clock);
    box_check(&mut engine);
    let journal = std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}"));
    // `gputune status` (or any gputune) beside the live check, in this boot.
    let (mut second, notices) = open_in_process(&folder, &clock);
    assert!(notices.is_empty(), "{notices:?}");
    assert!(set_aside(&folder).is_empty(), "nothing moved aside");
    assert_eq!(
        std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}")),
        journal
    );
    // Its own box check is refused while the first one's lock is held.
    let refused = box_check_by(&mut second, &client(2, "gputune stability --together"))
        .expect_err("the first check holds the lock");
    assert!(
        refused.message.contains("A box check is running"),
        "{}",
        refused.message
    );
    drop(second);
    // Once the first is gone (kill -9: its lock dies with it), its journal is acted on.
    drop(engine);
    let (_third, notices) = open_in_process(&folder, &clock);
    assert!(
        notices.iter().any(
            |notice| matches!(notice, Notice::Warning(text) if text.contains("did not go down"))
        ),
        "{notices:?}"
    );
}

#[test]
fn a_hard_linked_box_check_lock_is_refused_and_left_as_it_is() {
    let clock = ManualClock::starting_at(START_MS);
    let folder = tempfile::tempdir().expect("a state folder");
    let (engine, _) = open_in_process(&folder, &clock);
    drop(engine);
    let victim = folder.path().join("victim");
    std::fs::write(&victim, "precious").unwrap_or_else(|error| panic!("{error}"));
    let lock = folder.path().join("state").join("box-check.lock");
    std::fs::hard_link(&victim, &lock).unwrap_or_else(|error| panic!("{error}"));
    std::fs::write(journal_path(&folder), "{ a left journal")
        .unwrap_or_else(|error| panic!("{error}"));
    let (mut engine, notices) = open_in_process(&folder, &clock);
    assert!(
        notices
            .iter()
            .any(|notice| matches!(notice, Notice::Warning(text)
            if text.contains("not looked at") && text.contains("hard links"))),
        "{notices:?}"
    );
    assert!(journal_path(&folder).exists(), "left as it is");
    let refused = box_check_by(&mut engine, &client(1, "gputune stability --together"))
        .expect_err("no check without its lock");
    assert!(
        refused.message.contains("cannot be journaled"),
        "{}",
        refused.message
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap_or_default(),
        "precious"
    );
}

#[test]
fn a_box_check_folder_that_is_a_symbolic_link_is_never_written_through() {
    let clock = ManualClock::starting_at(START_MS);
    let folder = tempfile::tempdir().expect("a state folder");
    let elsewhere = folder.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap_or_else(|error| panic!("{error}"));
    let linked = folder.path().join("box-check");
    std::os::unix::fs::symlink(&elsewhere, &linked).unwrap_or_else(|error| panic!("{error}"));
    let options = EngineOptions {
        box_journal_dir: Some(linked),
        ..options(&folder)
    };
    let (mut engine, notices) =
        Engine::open(Box::new(eight(&clock)), &options, Arc::new(clock.clone()))
            .unwrap_or_else(|error| panic!("{error}"));
    assert!(
        notices
            .iter()
            .any(|notice| notice.text().contains("Box checks cannot be journaled")),
        "{notices:?}"
    );
    let refused = box_check_by(&mut engine, &client(1, "gputune stability --together"))
        .expect_err("no check without its journal");
    assert!(
        refused.message.contains("cannot be journaled"),
        "{}",
        refused.message
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere)
            .map(|entries| entries.count())
            .unwrap_or_default(),
        0,
        "nothing written through the link"
    );
}

#[test]
fn a_journal_kept_from_an_earlier_check_is_moved_aside_never_written_over() {
    let clock = ManualClock::starting_at(START_MS);
    let backend = eight(&clock);
    let folder = tempfile::tempdir().expect("a state folder");
    let (mut engine, _) = open(backend, &folder, &clock);
    // What an earlier check of this engine left when its cards were lost (the machine up).
    box_check(&mut engine);
    let kept = std::fs::read(journal_path(&folder)).unwrap_or_else(|error| panic!("{error}"));
    engine.client_gone(1);
    std::fs::write(journal_path(&folder), &kept).unwrap_or_else(|error| panic!("{error}"));
    box_check_by(&mut engine, &client(2, "gputune stability --together"))
        .unwrap_or_else(|error| panic!("{error}"));
    let aside = set_aside(&folder);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(aside[0].contains("cards-lost"), "{aside:?}");
    assert!(
        journal_path(&folder).exists(),
        "the new check's own journal"
    );
}
