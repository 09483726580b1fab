//! The Debian package (tools/deb/build), built from the binary this test build made, installed
//! for real with `dpkg -i`, checked (files, modes, the unit through `systemd-analyze verify`,
//! the group, the service enabled) and removed with `dpkg -r` and `dpkg -P`, leaving no file.
//!
//! It changes the machine, so it runs only as root with dpkg, and only where nothing of
//! gputune's is installed already (else it says why it skipped). A guard purges the package
//! (and removes the group when this test made it) even when an assertion fails halfway.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::programs::installed;
use crate::common::text;

const FILES: [(&str, u32); 5] = [
    ("/usr/bin/gputune", 0o755),
    ("/usr/lib/gputune/gputune_spank.so", 0o644),
    ("/lib/systemd/system/gputuned.service", 0o644),
    ("/usr/share/applications/gputune.desktop", 0o644),
    ("/usr/share/icons/hicolor/256x256/apps/gputune.png", 0o644),
];
const WANTS_LINK: &str = "/etc/systemd/system/multi-user.target.wants/gputuned.service";

fn run(program: &str, arguments: &[&str]) -> Output {
    Command::new(program)
        .args(arguments)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap_or_else(|error| panic!("{program} could not be run: {error}"))
}

fn group_exists() -> bool {
    run("getent", &["group", "gputune"]).status.success()
}

/// Why this machine must not be used, if so.
fn reason_to_skip() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("it installs a package and needs root".to_string());
    }
    for tool in ["dpkg", "dpkg-deb", "dpkg-query"] {
        if installed(tool).is_none() {
            return Some(format!("{tool} is missing (not a Debian-like system)"));
        }
    }
    let known = run("dpkg-query", &["-W", "-f=${Status}", "gputune"]);
    if known.status.success() && !text(&known.stdout).contains("not-installed") {
        return Some(format!(
            "gputune's package is on this machine ({}); it is left alone",
            text(&known.stdout).trim()
        ));
    }
    let state = ("/var/lib/gputune", 0);
    for (path, _) in FILES.iter().chain([&state]) {
        if std::fs::symlink_metadata(path).is_ok() {
            return Some(format!("{path} exists; it is left alone"));
        }
    }
    None
}

/// Purges the package and, when this test made it, the group: on success and on failure.
struct Cleanup {
    made_group: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let purged = run("dpkg", &["--purge", "gputune"]);
        if !purged.status.success() {
            eprintln!("dpkg --purge gputune: {}", text(&purged.stderr));
        }
        if self.made_group && group_exists() {
            let _ = run("groupdel", &["gputune"]);
        }
    }
}

/// Processes whose program is the packaged binary (a daemon left running).
fn packaged_processes() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let program = std::fs::read_link(entry.path().join("exe")).ok()?;
            program
                .to_string_lossy()
                .starts_with("/usr/bin/gputune")
                .then_some(pid)
        })
        .collect()
}

#[test]
fn the_debian_package_installs_verifies_and_purges_cleanly() {
    if let Some(reason) = reason_to_skip() {
        eprintln!("skipped: the Debian package test did not run: {reason}.");
        return;
    }
    let folder = tempfile::tempdir().expect("a temporary folder");
    let built = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/deb/build"))
        .args(["--binary", env!("CARGO_BIN_EXE_gputune"), "--out"])
        .arg(folder.path())
        // The test's package is thrown away: no time spent compressing 50 MB.
        .args(["--compression", "none"])
        .output()
        .expect("tools/deb/build runs");
    assert!(built.status.success(), "{}", text(&built.stderr));
    let package = PathBuf::from(text(&built.stdout).trim());
    assert!(package.is_file(), "{}", package.display());
    let package = package.to_str().expect("a UTF-8 path").to_string();

    // What the window needs at run time (dlopen'd, so not found by ldd) is declared.
    let depends = text(&run("dpkg-deb", &["--field", &package, "Depends"]).stdout);
    for library in [
        "libc6 (>= ",
        "libx11-6",
        "libxkbcommon0",
        "libwayland-client0",
        "libegl1",
    ] {
        assert!(
            depends.contains(library),
            "{library} missing from {depends}"
        );
    }

    let _cleanup = Cleanup {
        made_group: !group_exists(),
    };
    let installed = run("dpkg", &["--install", &package]);
    assert!(
        installed.status.success(),
        "dpkg -i failed (a missing dependency? `bash .ci/setup test` installs them): {}{}",
        text(&installed.stdout),
        text(&installed.stderr)
    );
    assert!(
        text(&installed.stdout).contains("newgrp gputune"),
        "{}",
        text(&installed.stdout)
    );

    // The files, root's, with their modes; the binary runs.
    for (path, mode) in FILES {
        let metadata = std::fs::metadata(path).unwrap_or_else(|error| panic!("{path}: {error}"));
        assert_eq!(metadata.permissions().mode() & 0o7777, mode, "{path}");
        assert_eq!((metadata.uid(), metadata.gid()), (0, 0), "{path}");
    }
    let version = run("/usr/bin/gputune", &["--version"]);
    assert!(text(&version.stdout).starts_with("gputune "), "{version:?}");
    let listed = text(&run("dpkg", &["--listfiles", "gputune"]).stdout);
    for (path, _) in FILES {
        assert!(
            listed.lines().any(|line| line == path),
            "{path} not in\n{listed}"
        );
    }

    // The unit: runs the packaged binary with the group, and systemd finds nothing wrong in
    // it (verify reads the file; it needs no running systemd).
    let unit = std::fs::read_to_string(FILES[2].0).expect("the unit");
    assert!(
        unit.lines()
            .any(|line| line == "ExecStart=/usr/bin/gputune daemon --group gputune"),
        "{unit}"
    );
    for placeholder in ["@GPUTUNE@", "@ENVIRONMENT@", "@GROUP@"] {
        assert!(
            !unit.contains(placeholder),
            "{placeholder} is left in\n{unit}"
        );
    }
    assert!(
        crate::common::programs::installed("systemd-analyze").is_some(),
        "systemd-analyze is missing: `bash .ci/setup test` installs Debian's systemd package"
    );
    let verified = run("systemd-analyze", &["verify", FILES[2].0]);
    assert!(
        verified.status.success(),
        "systemd-analyze verify: {}{}",
        text(&verified.stdout),
        text(&verified.stderr)
    );
    assert!(
        !text(&verified.stderr).contains("gputuned.service"),
        "{}",
        text(&verified.stderr)
    );

    // The group, and the service enabled (started too where systemd runs).
    assert!(group_exists());
    if Path::new("/run/systemd/system").is_dir() {
        let enabled = run("systemctl", &["is-enabled", "gputuned.service"]);
        assert_eq!(text(&enabled.stdout).trim(), "enabled");
    } else if Path::new("/usr/bin/deb-systemd-helper").exists() {
        // Enabled offline: it starts at the next boot with systemd.
        assert!(
            std::fs::symlink_metadata(WANTS_LINK).is_ok_and(|m| m.file_type().is_symlink()),
            "{WANTS_LINK} missing"
        );
    }

    // Removed: the files go and no daemon is left running.
    let removed = run("dpkg", &["--remove", "gputune"]);
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    for (path, _) in FILES {
        assert!(std::fs::symlink_metadata(path).is_err(), "{path} is left");
    }
    assert_eq!(packaged_processes(), Vec::<u32>::new());

    // Purged: nothing of it is left, not even the enablement; the group is kept on purpose.
    std::fs::create_dir_all("/var/lib/gputune/history").expect("the daemon's state folder");
    let purged = run("dpkg", &["--purge", "gputune"]);
    assert!(purged.status.success(), "{}", text(&purged.stderr));
    assert!(
        std::fs::symlink_metadata(WANTS_LINK).is_err(),
        "{WANTS_LINK} is left"
    );
    assert!(!Path::new("/var/lib/gputune").exists());
    for line in listed.lines() {
        let path = Path::new(line);
        let shared = [
            "/.",
            "/lib",
            "/usr",
            "/usr/bin",
            "/usr/lib",
            "/usr/share",
            "/usr/share/applications",
            "/usr/share/icons",
            "/usr/share/doc",
            "/lib/systemd",
            "/lib/systemd/system",
            "/usr/share/icons/hicolor",
            "/usr/share/icons/hicolor/256x256",
            "/usr/share/icons/hicolor/256x256/apps",
        ];
        if !shared.contains(&line) {
            assert!(std::fs::symlink_metadata(path).is_err(), "{line} is left");
        }
    }
    let status = run("dpkg-query", &["-W", "-f=${Status}", "gputune"]);
    assert!(
        !status.status.success() || text(&status.stdout).contains("not-installed"),
        "{}",
        text(&status.stdout)
    );
    assert!(group_exists(), "the group is kept on purge");
}
