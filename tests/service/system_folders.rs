//! The daemon's tests stay out of the machine's own folders (tests/common/canary.rs): a daemon
//! on its own socket and folders, and engines without it beside it, leave nothing in /run
//! (the daemon's default socket and record folder), /var/lib or HOME.

#[test]
fn system_folders_stay_untouched_by_the_daemon_and_engines_beside_it() {
    crate::common::canary::assert_system_folders_untouched(&["daemon_journals::"]);
}
