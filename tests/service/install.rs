//! `gputune daemon install` and `uninstall`, each step run for real into a folder standing for
//! the machine's root (`GPUTUNE_INSTALL_ROOT`), with stand-in `getent`, `groupadd`, `usermod`
//! and `systemctl` programs that record what they were asked (`GPUTUNE_INSTALL_COMMANDS`).
//! The Debian package's test is in tests/service/package_deb.rs; planted links, folders others
//! can write and privileged or populated groups are in install/hostile.rs.

mod hostile;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const BINARY: &str = env!("CARGO_BIN_EXE_gputune");
pub(crate) const INSTALLED: &str = "usr/local/libexec/gputune/gputune";
pub(crate) const UNIT: &str = "etc/systemd/system/gputuned.service";

/// A root folder and the stand-ins, in one temporary folder.
pub(crate) struct Staged {
    folder: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) tools: PathBuf,
}

impl Staged {
    fn new() -> Staged {
        let folder = tempfile::tempdir().expect("a temporary folder");
        let root = folder.path().join("root");
        let tools = folder.path().join("tools");
        for made in [&root, &tools] {
            std::fs::create_dir(made).expect("a folder");
            // The install checks every folder from its root down: this one is like /.
            std::fs::set_permissions(made, std::fs::Permissions::from_mode(0o755)).expect("a mode");
        }
        // Stand-ins: each records its name and arguments; the group "database" is two files.
        let log = tools.join("log");
        let script = |name: &str, body: &str| {
            let path = tools.join(name);
            std::fs::write(
                &path,
                format!(
                    "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}\n",
                    log.display()
                ),
            )
            .expect("a stand-in");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .expect("a mode");
        };
        let tools_path = tools.display().to_string();
        // `getent passwd` lists the file `passwd`; a group exists when the file `group` does,
        // with the gid in `gid` (990 without it) and the members in `members`.
        script(
            "getent",
            &format!(
                "[ \"$1\" != passwd ] || {{ cat '{tools_path}/passwd' 2>/dev/null; exit 0; }}\n[ -f '{tools_path}/group' ] || exit 2\nprintf '%s:x:%s:%s\\n' \"$2\" \"$(cat '{tools_path}/gid' 2>/dev/null || echo 990)\" \"$(cat '{tools_path}/members' 2>/dev/null)\""
            ),
        );
        script("groupadd", &format!("touch '{tools_path}/group'"));
        script(
            "usermod",
            &format!(
                "{{ [ ! -s '{tools_path}/members' ] || printf ','; printf '%s' \"$5\"; }} >> '{tools_path}/members'"
            ),
        );
        script(
            "systemctl",
            &format!(
                "[ \"$1\" != restart ] || [ ! -f '{tools_path}/systemctl-fails' ] || {{ echo 'Job for gputuned.service failed.' >&2; exit 1; }}"
            ),
        );
        Staged {
            folder,
            root,
            tools,
        }
    }

    pub(crate) fn gputune(&self, arguments: &[&str], sudo: &[(&str, &str)]) -> Output {
        let mut command = Command::new(BINARY);
        command
            .args(arguments)
            .env("GPUTUNE_INSTALL_ROOT", &self.root)
            .env("GPUTUNE_INSTALL_COMMANDS", &self.tools)
            .env_remove("SUDO_UID")
            .env_remove("SUDO_USER")
            .env_remove("GPUTUNE_NVML_LIB")
            .env_remove("GPUTUNE_LOG");
        for (name, value) in sudo {
            command.env(name, value);
        }
        command.output().expect("gputune runs")
    }

    /// What the stand-ins were asked since the last call, one line each.
    pub(crate) fn asked(&self) -> Vec<String> {
        let log = self.tools.join("log");
        let lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        let _ = std::fs::remove_file(&log);
        lines
    }

    /// A folder beside the root: what a planted link points to, which nothing may touch.
    pub(crate) fn outside(&self) -> PathBuf {
        self.folder.path().join("outside")
    }

    pub(crate) fn at(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }
}

pub(crate) fn nobody() -> nix::unistd::User {
    nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .expect("a nobody user")
}

pub(crate) fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("it exists")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn install_copies_itself_writes_the_unit_makes_the_group_adds_the_sudo_user_and_uninstall_undoes_it()
 {
    let staged = Staged::new();
    let nobody = nobody();
    let uid = nobody.uid.to_string();
    let sudo = [("SUDO_UID", uid.as_str()), ("SUDO_USER", "nobody")];

    // systemd is not running (no run/systemd/system): everything else is done, and the
    // command to start the daemon later is printed.
    let output = staged.gputune(&["daemon", "install"], &sudo);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", text(&output.stderr));
    assert_eq!(
        staged.asked(),
        [
            "getent group gputune",
            "groupadd --system gputune",
            "getent group gputune",
            "usermod --append --groups gputune -- nobody",
        ]
    );
    for said in [
        "Created the group \"gputune\".",
        "to /usr/local/libexec/gputune/gputune (root's, mode 0755)",
        "Added nobody to the group \"gputune\".",
        "systemd is not running here",
        "sudo systemctl daemon-reload && sudo systemctl enable --now gputuned.service",
        "log out and in again, or run `newgrp gputune`",
    ] {
        assert!(stdout.contains(said), "{said:?} missing from\n{stdout}");
    }
    // The copy: this very program, mode 0755, this process's user's (root's in CI), in
    // folders nobody else may write.
    let installed = staged.at(INSTALLED);
    assert_eq!(
        std::fs::read(&installed).expect("the copy"),
        std::fs::read(BINARY).expect("the built binary")
    );
    assert_eq!(mode(&installed), 0o755);
    assert_eq!(
        std::fs::metadata(&installed).expect("the copy").uid(),
        nix::unistd::geteuid().as_raw()
    );
    for folder in [
        "usr",
        "usr/local",
        "usr/local/libexec",
        "usr/local/libexec/gputune",
    ] {
        assert_eq!(mode(&staged.at(folder)), 0o755, "{folder}");
    }
    let version = Command::new(&installed)
        .arg("--version")
        .output()
        .expect("the copy runs");
    assert!(text(&version.stdout).starts_with("gputune "));
    // The unit runs the copy, and is what --print shows.
    let unit = std::fs::read_to_string(staged.at(UNIT)).expect("the unit");
    assert!(
        unit.lines()
            .any(|line| line
                == "ExecStart=/usr/local/libexec/gputune/gputune daemon --group gputune"),
        "{unit}"
    );
    let printed = staged.gputune(&["daemon", "install", "--print"], &[]);
    assert_eq!(text(&printed.stdout), unit);
    assert!(staged.asked().is_empty());

    // Again, where systemd runs and someone planted a link where the copy goes: the link is
    // replaced, never written through; the service is enabled and restarted; the user is in.
    std::fs::create_dir_all(staged.at("run/systemd/system")).expect("systemd runs");
    let victim = staged.at("victim");
    std::fs::write(&victim, "keep me").expect("a file");
    std::fs::remove_file(&installed).expect("the copy goes");
    std::os::unix::fs::symlink(&victim, &installed).expect("a planted link");
    let output = staged.gputune(&["daemon", "install"], &sudo);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", text(&output.stderr));
    assert_eq!(
        staged.asked(),
        [
            "getent group gputune",
            "getent passwd",
            "getent group gputune",
            "systemctl daemon-reload",
            "systemctl enable gputuned.service",
            "systemctl restart gputuned.service",
        ]
    );
    assert_eq!(
        std::fs::read_to_string(&victim).ok().as_deref(),
        Some("keep me")
    );
    assert!(
        std::fs::symlink_metadata(&installed)
            .expect("the copy")
            .is_file()
    );
    assert!(
        stdout.contains("Enabled and started gputuned.service"),
        "{stdout}"
    );
    assert!(
        stdout.contains("nobody is already in the group"),
        "{stdout}"
    );
    assert!(!stdout.contains("newgrp"), "{stdout}");

    // A service that does not start: the install says so and fails.
    std::fs::write(staged.tools.join("systemctl-fails"), "").expect("a marker");
    let output = staged.gputune(&["daemon", "install"], &sudo);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("journalctl -u gputuned.service"),
        "{}",
        text(&output.stderr)
    );
    staged.asked();
    std::fs::remove_file(staged.tools.join("systemctl-fails")).expect("the marker goes");

    // Uninstall: stopped and disabled, then the unit and the copy go; the state folder and
    // the group stay (said), until --purge.
    let state = staged.at("var/lib/gputune");
    std::fs::create_dir_all(&state).expect("a state folder");
    std::fs::write(state.join("defaults.json"), "{}").expect("a boot default");
    let output = staged.gputune(&["daemon", "uninstall"], &[]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", text(&output.stderr));
    assert_eq!(
        staged.asked(),
        [
            "systemctl disable --now gputuned.service",
            "systemctl daemon-reload"
        ]
    );
    assert!(!staged.at(UNIT).exists());
    assert!(!staged.at("usr/local/libexec/gputune").exists());
    assert!(state.join("defaults.json").exists());
    assert!(stdout.contains("Kept the group \"gputune\""), "{stdout}");
    assert!(stdout.contains("--purge"), "{stdout}");
    let output = staged.gputune(&["daemon", "uninstall", "--purge"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(!state.exists());
    // Nothing is asked of systemctl for a unit that is gone.
    assert!(staged.asked().is_empty());
}

#[test]
fn install_refuses_before_changing_anything() {
    let staged = Staged::new();
    let nothing_changed = |staged: &Staged, output: &Output, said: &str| {
        assert!(!output.status.success());
        let stderr = text(&output.stderr);
        assert!(stderr.contains(said), "{said:?} missing from {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!staged.at(INSTALLED).exists());
        assert!(staged.asked().is_empty(), "nothing is run");
    };
    // sudo's variables that name nobody real: who to add is unknown, so nothing is done
    // (never a silent install without the user, never root added).
    for sudo in [
        vec![("SUDO_UID", "abc")],
        vec![("SUDO_UID", "-1"), ("SUDO_USER", "nobody")],
        vec![("SUDO_UID", "4000000000")],
        vec![("SUDO_USER", "no-such-user-gputune")],
        vec![("SUDO_USER", "")],
    ] {
        let output = staged.gputune(&["daemon", "install"], &sudo);
        nothing_changed(&staged, &output, "--user NAME");
    }
    let output = staged.gputune(&["daemon", "install", "--user", "root"], &[]);
    nothing_changed(&staged, &output, "is root");

    // A folder on the way others may write: they could replace what root runs.
    std::fs::create_dir_all(staged.at("usr/local")).expect("folders");
    std::fs::set_permissions(
        staged.at("usr/local"),
        std::fs::Permissions::from_mode(0o2775),
    )
    .expect("a mode");
    let output = staged.gputune(&["daemon", "install"], &[]);
    nothing_changed(&staged, &output, "chmod go-w");
    std::fs::set_permissions(
        staged.at("usr/local"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("a mode");

    // Someone else's unit of that name is left alone.
    std::fs::create_dir_all(staged.at("etc/systemd/system")).expect("folders");
    std::fs::write(staged.at(UNIT), "[Unit]\n").expect("a foreign unit");
    let output = staged.gputune(&["daemon", "install"], &[]);
    nothing_changed(&staged, &output, "is not gputune's daemon unit");
    assert_eq!(
        std::fs::read_to_string(staged.at(UNIT)).ok().as_deref(),
        Some("[Unit]\n")
    );
    // ... and uninstall neither stops that service nor removes its unit.
    let output = staged.gputune(&["daemon", "uninstall"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(staged.asked().is_empty());
    assert!(staged.at(UNIT).exists());

    // A --binary that is not a program.
    std::fs::remove_file(staged.at(UNIT)).expect("the foreign unit goes");
    let script = staged.root.with_file_name("script");
    std::fs::write(&script, "#!/bin/sh\n").expect("a script");
    let output = staged.gputune(
        &[
            "daemon",
            "install",
            "--binary",
            script.to_str().expect("UTF-8"),
        ],
        &[],
    );
    nothing_changed(&staged, &output, "no ELF header");
}

#[test]
fn install_into_a_folder_without_stand_ins_prints_the_commands_for_the_target_machine() {
    let staged = Staged::new();
    let output = Command::new(BINARY)
        .args(["daemon", "install", "--user", "nobody"])
        .env("GPUTUNE_INSTALL_ROOT", &staged.root)
        .env_remove("GPUTUNE_INSTALL_COMMANDS")
        .env_remove("GPUTUNE_NVML_LIB")
        .output()
        .expect("gputune runs");
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", text(&output.stderr));
    for said in [
        "groupadd --system gputune",
        "usermod -aG gputune nobody",
        "systemctl enable --now gputuned.service",
    ] {
        assert!(stdout.contains(said), "{said:?} missing from\n{stdout}");
    }
    assert!(staged.at(INSTALLED).is_file());
    assert!(staged.at(UNIT).is_file());
    assert!(staged.asked().is_empty());
}

#[test]
fn install_without_root_on_the_real_system_says_to_use_sudo() {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(BINARY);
    command
        .args(["daemon", "install"])
        .env_remove("GPUTUNE_INSTALL_ROOT")
        .env_remove("GPUTUNE_INSTALL_COMMANDS")
        .env_remove("SUDO_UID")
        .env_remove("SUDO_USER");
    if nix::unistd::geteuid().is_root() {
        // As root it would install for real (tests/service/package_deb.rs does that): as nobody.
        let nobody = nobody();
        command.uid(nobody.uid.as_raw()).gid(nobody.gid.as_raw());
    }
    let output = command.output().expect("gputune runs");
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("needs root: run `sudo "), "{stderr}");
}

#[test]
fn with_the_debian_package_installed_install_only_adds_the_user_and_uninstall_points_to_apt() {
    let staged = Staged::new();
    std::fs::create_dir_all(staged.at("lib/systemd/system")).expect("folders");
    std::fs::write(staged.at("lib/systemd/system/gputuned.service"), "[Unit]\n")
        .expect("the package's unit");
    let output = staged.gputune(&["daemon", "install", "--user", "nobody"], &[]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", text(&output.stderr));
    assert_eq!(
        staged.asked(),
        [
            "getent group gputune",
            "groupadd --system gputune",
            "getent group gputune",
            "usermod --append --groups gputune -- nobody",
        ]
    );
    assert!(
        stdout.contains("Debian package runs the daemon"),
        "{stdout}"
    );
    assert!(stdout.contains("newgrp gputune"), "{stdout}");
    assert!(!staged.at(INSTALLED).exists());
    assert!(!staged.at(UNIT).exists());
    let output = staged.gputune(&["daemon", "uninstall"], &[]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("sudo apt remove gputune"),
        "{}",
        text(&output.stderr)
    );
    assert!(staged.asked().is_empty());
}

#[test]
fn install_by_root_without_sudo_adds_nobody_and_says_how_to_add_a_user() {
    let staged = Staged::new();
    let output = staged.gputune(&["daemon", "install"], &[]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", text(&output.stderr));
    assert_eq!(
        staged.asked(),
        ["getent group gputune", "groupadd --system gputune"]
    );
    assert!(
        stdout.contains("No user was added") && stdout.contains("usermod -aG gputune NAME"),
        "{stdout}"
    );
    assert!(!stdout.contains("newgrp"), "{stdout}");
}
