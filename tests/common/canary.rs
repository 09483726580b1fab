//! Proof that tests stay out of the machine's own folders: this test binary runs a set of its
//! own tests again in a private mount namespace (`unshare -m`) where /run and /var/lib are
//! empty scratch file systems and HOME is an empty folder, then looks at what appeared there.
//! The daemon's defaults (/run/gputune: socket, clock-lock records; /var/lib/gputune) and the
//! platform folders of root (HOME's .local/state, .config) must stay empty: every folder a test
//! or a process it starts uses is the test's own. Root only (mounts need it); the namespace
//! ends with the run, so nothing of it touches the machine.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set in the run inside the namespace, so it does not start another.
const INSIDE_ENV: &str = "GPUTUNE_TEST_CANARY_INSIDE";

/// What the run inside the namespace does: empty /run and /var/lib (mount(8) keeps no table
/// there with -n), runs this binary's `filters`, then lists every file the run left in them.
const SCRIPT: &str = r#"
set -u
mount -n -t tmpfs gputune-canary /run || exit 90
mount -n -t tmpfs gputune-canary /var/lib || exit 90
"$@"
status=$?
find /run /var/lib -mindepth 1 | sed 's/^/canary: /'
exit $status
"#;

/// Runs this test binary's tests matching `filters` inside the namespace: what appeared in the
/// system folders and the empty HOME, and how the tests went. `None` when this is the run
/// inside (nothing to check twice) or the machine cannot make the namespace (not root, no
/// `unshare`): said on stderr.
pub fn watch_system_folders(filters: &[&str]) -> Option<Watched> {
    if std::env::var_os(INSIDE_ENV).is_some() {
        return None;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: only root can make a mount namespace to watch /run and /var/lib");
        return None;
    }
    let probe = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .output();
    if !probe.is_ok_and(|output| output.status.success()) {
        eprintln!("skipped: `unshare -m` does not work here");
        return None;
    }
    let home = tempfile::tempdir().expect("a temporary HOME");
    let binary = std::env::current_exe().expect("this test binary's path");
    let mut command = Command::new("unshare");
    command
        .args(["-m", "--propagation", "private", "sh", "-c", SCRIPT, "sh"])
        .arg(&binary)
        .args(filters)
        .args(["--skip", "system_folders", "--test-threads", "2"])
        .env(INSIDE_ENV, "1")
        .env("HOME", home.path())
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_RUNTIME_DIR");
    let output = command.output().expect("unshare runs");
    let stdout = super::text(&output.stdout);
    let mut appeared: Vec<String> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("canary: "))
        .map(str::to_string)
        .collect();
    appeared.extend(
        files_under(home.path())
            .into_iter()
            .map(|path| format!("HOME/{}", path.display())),
    );
    Some(Watched {
        appeared,
        succeeded: output.status.success(),
        said: format!("{stdout}\n{}", super::text(&output.stderr)),
    })
}

/// What a watched run left, and how it went.
pub struct Watched {
    /// Every file or folder that appeared in /run, /var/lib or the empty HOME.
    pub appeared: Vec<String>,
    /// Whether every test inside passed.
    pub succeeded: bool,
    /// What the run inside printed.
    pub said: String,
}

/// Every path under `dir`, relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                folders.push(path.clone());
            }
            found.push(path.strip_prefix(dir).unwrap_or(&path).to_path_buf());
        }
    }
    found.sort();
    found
}

/// The test each binary runs: its `filters`, watched; nothing may appear, and the tests must
/// have run and passed there too (a test that needs the machine's folders fails inside).
pub fn assert_system_folders_untouched(filters: &[&str]) {
    let Some(watched) = watch_system_folders(filters) else {
        return;
    };
    assert!(
        watched.appeared.is_empty(),
        "tests ({filters:?}) wrote into the machine's own folders: {:#?}",
        watched.appeared
    );
    assert!(
        watched.succeeded,
        "the tests inside the namespace failed:\n{}",
        watched.said
    );
    assert!(
        watched.said.contains("test result: ok") && !watched.said.contains(" 0 passed"),
        "no test ran inside the namespace:\n{}",
        watched.said
    );
}
