//! The command line's tests stay out of the machine's own folders (tests/common/canary.rs):
//! `status`, `log`, `apply` and `run`, on the simulator and on the fake library with the engine
//! in the process, leave nothing in /run, /var/lib or HOME.

#[test]
fn system_folders_stay_untouched_by_status_log_apply_and_run() {
    crate::common::canary::assert_system_folders_untouched(&[
        "cli_status::",
        "cli_log::",
        "cli_apply::",
        "cli_run::",
    ]);
}
