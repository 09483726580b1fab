//! Whether a program a test needs is installed here: looked up in the folders of `PATH` and in
//! the system's program folders (the `sbin` ones too: `munged` and `slurmctld` live there, off
//! a user's `PATH`). A test that needs one says why it skips, or fails on CI.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// The system's program folders, looked in after `PATH`.
const SYSTEM_FOLDERS: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Where `program` is installed: the first executable file of that name, or `None`.
pub fn installed(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SYSTEM_FOLDERS.iter().map(PathBuf::from))
        .map(|folder| folder.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|metadata| {
                metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
            })
        })
}
