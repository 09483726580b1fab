//! The engine's tests stay out of the machine's own folders (tests/common/canary.rs): engines
//! in this process on the fake library leave nothing in /run, /var/lib or HOME.

#[test]
fn system_folders_stay_untouched_by_engines_in_the_process() {
    crate::common::canary::assert_system_folders_untouched(&["engine::"]);
}
