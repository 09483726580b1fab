//! `daemon install` / `uninstall` against a root someone prepared: links planted at every
//! level of the paths it writes or removes from, folders others can write, privileged groups
//! and an existing group with members. Victims lie outside the install root, and must be
//! exactly as they were.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::{INSTALLED, Staged, UNIT, nobody, text};

/// Every entry below `folder` (links not followed): a file's bytes, a folder, a link's target.
fn snapshot(folder: &Path) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(listing) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in listing.flatten() {
            let path = entry.path();
            let shown = path
                .strip_prefix(folder)
                .expect("below")
                .display()
                .to_string();
            let metadata = std::fs::symlink_metadata(&path).expect("an entry");
            let what = if metadata.file_type().is_symlink() {
                format!(
                    "link to {}",
                    std::fs::read_link(&path).expect("a link").display()
                )
            } else if metadata.is_dir() {
                pending.push(path.clone());
                format!("folder {:o}", metadata.permissions().mode() & 0o7777)
            } else {
                text(&std::fs::read(&path).expect("a file"))
            };
            entries.insert(shown, what);
        }
    }
    entries
}

/// Replaces `root/relative` (made if missing, with what it holds) by a link to a folder
/// outside the root holding the same, plus a victim file: what a following installer would
/// write into or remove from.
fn plant_link(staged: &Staged, relative: &str) {
    let inside = staged.at(relative);
    std::fs::create_dir_all(&inside).expect("folders");
    let elsewhere = staged.outside().join(relative.replace('/', "_"));
    std::fs::create_dir_all(elsewhere.parent().expect("a parent")).expect("outside");
    std::fs::rename(&inside, &elsewhere).expect("moved outside");
    std::fs::write(elsewhere.join("victim"), "keep me").expect("a victim");
    std::os::unix::fs::symlink(&elsewhere, &inside).expect("a planted link");
}

/// A refusal that changed nothing: said on stderr (naming `path` and `said`), nothing run but
/// look-ups, nothing outside touched.
fn refused(staged: &Staged, output: &std::process::Output, path: &str, said: &[&str]) {
    let stderr = text(&output.stderr);
    assert!(
        !output.status.success(),
        "not refused: {}",
        text(&output.stdout)
    );
    let shown = staged.at(path).display().to_string();
    assert!(stderr.contains(&shown), "{shown:?} missing from {stderr}");
    for said in said {
        assert!(stderr.contains(said), "{said:?} missing from {stderr}");
    }
    let changing: Vec<String> = staged
        .asked()
        .into_iter()
        .filter(|asked| !asked.starts_with("getent"))
        .collect();
    assert!(changing.is_empty(), "{changing:?} was run");
}

#[test]
fn install_never_writes_through_a_planted_link_nor_into_a_folder_others_can_write() {
    let sudo = [("SUDO_USER", "nobody")];
    for level in [
        "etc",
        "etc/systemd",
        "etc/systemd/system",
        "usr",
        "usr/local",
        "usr/local/libexec",
        "usr/local/libexec/gputune",
    ] {
        let staged = Staged::new();
        plant_link(&staged, level);
        let before = snapshot(&staged.outside());
        let output = staged.gputune(&["daemon", "install"], &sudo);
        refused(
            &staged,
            &output,
            level,
            &["is a symbolic link", "nothing was installed"],
        );
        assert_eq!(snapshot(&staged.outside()), before, "{level}");
        assert!(!staged.at(INSTALLED).exists(), "{level}");
    }
    for level in ["etc", "etc/systemd/system", "usr/local/libexec"] {
        let staged = Staged::new();
        std::fs::create_dir_all(staged.at(level)).expect("folders");
        std::fs::set_permissions(staged.at(level), std::fs::Permissions::from_mode(0o1777))
            .expect("a mode");
        let output = staged.gputune(&["daemon", "install"], &sudo);
        refused(
            &staged,
            &output,
            level,
            &[
                "can be written by others",
                "chmod go-w",
                "nothing was installed",
            ],
        );
        assert!(!staged.at(UNIT).exists(), "{level}");
        assert!(!staged.at(INSTALLED).exists(), "{level}");
    }
}

#[test]
fn uninstall_and_purge_never_remove_through_a_planted_link_nor_from_a_folder_others_can_write() {
    let installed = || {
        let staged = Staged::new();
        let output = staged.gputune(&["daemon", "install", "--user", "nobody"], &[]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        std::fs::create_dir_all(staged.at("var/lib/gputune")).expect("a state folder");
        std::fs::write(staged.at("var/lib/gputune/defaults.json"), "{}").expect("a default");
        staged.asked();
        staged
    };
    for (level, arguments) in [
        ("etc", &["daemon", "uninstall"][..]),
        ("etc/systemd", &["daemon", "uninstall"][..]),
        ("etc/systemd/system", &["daemon", "uninstall"][..]),
        (
            "etc/systemd/system/multi-user.target.wants",
            &["daemon", "uninstall"][..],
        ),
        ("usr/local/libexec", &["daemon", "uninstall"][..]),
        ("usr/local/libexec/gputune", &["daemon", "uninstall"][..]),
        ("var", &["daemon", "uninstall", "--purge"][..]),
        ("var/lib", &["daemon", "uninstall", "--purge"][..]),
        ("var/lib/gputune", &["daemon", "uninstall", "--purge"][..]),
    ] {
        let staged = installed();
        plant_link(&staged, level);
        let before = snapshot(&staged.outside());
        let output = staged.gputune(arguments, &[]);
        refused(
            &staged,
            &output,
            level,
            &["is a symbolic link", "nothing was removed"],
        );
        // The unit and the copy (moved outside with their folder, or still in place) are
        // exactly where they were.
        assert_eq!(snapshot(&staged.outside()), before, "{level}");
        assert!(
            staged.at(UNIT).exists() && staged.at(INSTALLED).exists(),
            "{level}"
        );
    }
    for (level, arguments) in [
        ("etc/systemd/system", &["daemon", "uninstall"][..]),
        ("usr/local/libexec/gputune", &["daemon", "uninstall"][..]),
        ("var/lib/gputune", &["daemon", "uninstall", "--purge"][..]),
    ] {
        let staged = installed();
        std::fs::set_permissions(staged.at(level), std::fs::Permissions::from_mode(0o777))
            .expect("a mode");
        let output = staged.gputune(arguments, &[]);
        refused(
            &staged,
            &output,
            level,
            &["can be written by others", "nothing was removed"],
        );
        assert!(staged.at(UNIT).exists(), "{level}");
        assert!(staged.at(INSTALLED).exists(), "{level}");
        assert!(
            staged.at("var/lib/gputune/defaults.json").exists(),
            "{level}"
        );
    }
    // A purge removes the state folder's own links, never what they point to.
    let staged = installed();
    std::fs::create_dir_all(staged.outside()).expect("outside");
    std::fs::write(staged.outside().join("victim"), "keep me").expect("a victim");
    std::os::unix::fs::symlink(staged.outside(), staged.at("var/lib/gputune/linked-folder"))
        .expect("a link");
    std::os::unix::fs::symlink(
        staged.outside().join("victim"),
        staged.at("var/lib/gputune/linked-file"),
    )
    .expect("a link");
    let output = staged.gputune(&["daemon", "uninstall", "--purge"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(!staged.at("var/lib/gputune").exists());
    assert!(staged.at("var/lib").is_dir());
    assert_eq!(
        std::fs::read_to_string(staged.outside().join("victim"))
            .ok()
            .as_deref(),
        Some("keep me")
    );
}

#[test]
fn install_refuses_privileged_groups_and_names_who_is_already_in_an_existing_one() {
    let staged = Staged::new();
    for group in [
        "sudo", "root", "adm", "wheel", "admin", "staff", "disk", "shadow",
    ] {
        let output = staged.gputune(
            &["daemon", "install", "--group", group, "--user", "nobody"],
            &[],
        );
        assert!(!output.status.success(), "{group}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(&format!("\"{group}\" is a privileged group")),
            "{group}: {stderr}"
        );
        assert!(staged.asked().is_empty(), "{group}");
        assert!(!staged.at(INSTALLED).exists());
    }
    // Another existing system group (gid below 1000): its members are the system's.
    std::fs::write(staged.tools.join("group"), "").expect("the group exists");
    std::fs::write(staged.tools.join("gid"), "44").expect("a system gid");
    let output = staged.gputune(
        &["daemon", "install", "--group", "video", "--user", "nobody"],
        &[],
    );
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("system group (gid 44)"), "{stderr}");
    assert_eq!(staged.asked(), ["getent group video"]);
    assert!(!staged.at(INSTALLED).exists());

    // An existing gputune group gputune did not make here: who is in it is said, and nothing
    // is done until the administrator trusts it.
    std::fs::write(staged.tools.join("gid"), "990").expect("a gid");
    std::fs::write(staged.tools.join("members"), "alice,bob").expect("members");
    std::fs::write(
        staged.tools.join("passwd"),
        "root:x:0:0:root:/root:/bin/sh\ncarol:x:1001:990::/home/carol:/bin/sh\ndave:x:1002:1002::/home/dave:/bin/sh\n",
    )
    .expect("users");
    let output = staged.gputune(&["daemon", "install", "--user", "nobody"], &[]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    for said in [
        "\"gputune\" already exists (gid 990)",
        "members alice, bob",
        "primary group of carol",
        "--trust-existing-group",
        "nothing was installed",
    ] {
        assert!(stderr.contains(said), "{said:?} missing from {stderr}");
    }
    assert!(!stderr.contains("dave"), "{stderr}");
    assert_eq!(staged.asked(), ["getent group gputune", "getent passwd"]);
    assert!(!staged.at(INSTALLED).exists());

    let output = staged.gputune(
        &[
            "daemon",
            "install",
            "--user",
            "nobody",
            "--trust-existing-group",
        ],
        &[],
    );
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", text(&output.stderr));
    assert!(
        stdout.contains("members alice, bob") && stdout.contains("primary group of carol"),
        "{stdout}"
    );
    assert!(
        staged
            .asked()
            .contains(&"usermod --append --groups gputune -- nobody".to_string())
    );
    assert!(staged.at(INSTALLED).is_file());

    // A reinstall: the unit installed names the group, so it was trusted then; who is in it
    // is still said.
    let sudo_user = nobody().name;
    let output = staged.gputune(&["daemon", "install"], &[("SUDO_USER", sudo_user.as_str())]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", text(&output.stderr));
    assert!(stdout.contains("members alice, bob"), "{stdout}");
}
