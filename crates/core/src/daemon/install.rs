//! `gputune daemon install`: the whole job in one command. It creates the `gputune` group,
//! copies this binary where only root can change it (the unit runs that copy, never a file in
//! a user's folder), writes `gputuned.service` (hardened), adds the user who ran sudo to the
//! group, and enables and starts the service where systemd runs. `daemon uninstall` undoes it.
//! `GPUTUNE_INSTALL_ROOT` and `GPUTUNE_INSTALL_COMMANDS` point all of it at a folder and at
//! stand-in programs (tests, image builds).

mod target;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::fsafe::{self, Links};

/// The unit template: `@GPUTUNE@` the binary, `@ENVIRONMENT@` the `Environment=` lines,
/// `@GROUP@` the group.
pub const UNIT_TEMPLATE: &str = include_str!("../../../../assets/gputuned.service");
pub const UNIT_FILE_NAME: &str = "gputuned.service";
pub const SYSTEM_UNIT_DIR: &str = "/etc/systemd/system";
pub use target::{INSTALL_COMMANDS_ENV, INSTALL_ROOT_ENV};
use target::{Target, Tools};
/// Marks a unit file as gputune's, so `install` replaces its own and nothing else.
const UNIT_MARK: &str = "Made by `gputune daemon install`.";

/// What goes into the unit besides the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSettings {
    /// Absolute path of the gputune binary.
    pub gputune: PathBuf,
    /// `--nvml-lib` / `GPUTUNE_NVML_LIB`, when the machine needs one (WSL).
    pub nvml_library: Option<PathBuf>,
    pub group: String,
}

/// The unit text for these settings.
pub fn unit_text(settings: &UnitSettings) -> anyhow::Result<String> {
    check_group_name(&settings.group)?;
    let mut environment = String::new();
    if let Some(library) = &settings.nvml_library {
        environment.push_str(&format!(
            "Environment={}\n",
            quote(&format!("GPUTUNE_NVML_LIB={}", text_of(library)?))
        ));
    }
    Ok(UNIT_TEMPLATE
        .replace("@ENVIRONMENT@", &environment)
        .replace("@GPUTUNE@", &quote(&text_of(&settings.gputune)?))
        .replace("@GROUP@", &settings.group))
}

/// A group name as `groupadd` accepts it (and nothing a unit file would read differently).
fn check_group_name(group: &str) -> anyhow::Result<()> {
    let mut characters = group.chars();
    let first_ok = characters
        .next()
        .is_some_and(|first| first.is_ascii_lowercase() || first == '_');
    let rest_ok = characters.all(|character| {
        character.is_ascii_lowercase()
            || character.is_ascii_digit()
            || matches!(character, '_' | '-')
    });
    if !first_ok || !rest_ok || group.len() > 32 {
        bail!(
            "\"{}\" is not a usable group name: lowercase letters, digits, '_' and '-', starting with a letter, at most 32.",
            crate::text::printable(group)
        );
    }
    Ok(())
}

/// A path as unit text: UTF-8, one line.
fn text_of(path: &Path) -> anyhow::Result<String> {
    let Some(text) = path.to_str() else {
        bail!(
            "The path {} is not UTF-8 text, which a systemd unit cannot hold.",
            crate::text::path(path)
        );
    };
    if text.chars().any(crate::text::is_unsafe) {
        bail!(
            "The path {} holds control characters, which a systemd unit cannot hold.",
            crate::text::printable(text)
        );
    }
    Ok(text.to_string())
}

/// systemd's quoting: `%` is a specifier (`%%`), and a value with spaces, quotes or
/// backslashes goes in double quotes with `\` escapes.
fn quote(text: &str) -> String {
    let escaped = text.replace('%', "%%");
    if escaped.contains([' ', '\t', '"', '\'', '\\', ';']) {
        format!("\"{}\"", escaped.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        escaped
    }
}

/// `gputune daemon install`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct InstallArgs {
    /// The gputune program to install (default: this one). It is copied where only root can
    /// change it, and the unit runs the copy.
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// The group whose members may change settings through the daemon.
    #[arg(long, default_value = super::DEFAULT_GROUP)]
    pub group: String,
    /// The user to add to the group (default: the one who ran sudo).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Print the unit instead of installing it.
    #[arg(long)]
    pub print: bool,
}

/// `gputune daemon uninstall`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UninstallArgs {
    /// Also remove /var/lib/gputune: the boot defaults and the history the daemon kept.
    #[arg(long)]
    pub purge: bool,
}

/// Where the unit runs the daemon from: a folder of gputune's own, off everyone's `PATH`, so
/// the copy never shadows the `gputune` a user runs (e.g. `~/.cargo/bin`'s) and `uninstall`
/// removes exactly what `install` put there and nothing an administrator placed in
/// /usr/local/bin.
pub const INSTALLED_BINARY: &str = "/usr/local/libexec/gputune/gputune";
/// Where the Debian package puts its unit; when it is there the package runs the daemon.
const PACKAGE_UNITS: [&str; 2] = [
    "/lib/systemd/system/gputuned.service",
    "/usr/lib/systemd/system/gputuned.service",
];
/// The link `systemctl enable` makes.
const WANTS_LINK: &str = "/etc/systemd/system/multi-user.target.wants/gputuned.service";

/// Who install adds to the group, as the command line resolved it (see `cli::daemon`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserToAdd {
    /// This account (a real user, not root).
    Named(String),
    /// Nobody: root ran it without sudo.
    Nobody,
}

/// Runs `gputune daemon install`: the group, the binary's copy, the unit, the user in the
/// group, the service enabled and started; then says the one thing left.
pub fn run_install(
    args: &InstallArgs,
    nvml_library: Option<&Path>,
    user: &UserToAdd,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let text = unit_text(&UnitSettings {
        gputune: PathBuf::from(INSTALLED_BINARY),
        nvml_library: nvml_library.map(Path::to_path_buf),
        group: args.group.clone(),
    })?;
    if args.print {
        write!(out, "{text}")?;
        return Ok(());
    }
    let target = Target::from_env()?;
    needs_root(&target, "install")?;
    let group = args.group.as_str();
    let unit_path = target.path(SYSTEM_UNIT_DIR).join(UNIT_FILE_NAME);
    let packaged = packaged_unit(&target);
    // Everything that can refuse is checked before anything changes.
    let mut source = None;
    if packaged.is_none() {
        if unit_found(&unit_path)? == UnitFound::Foreign {
            bail!(
                "{} exists and is not gputune's daemon unit; it was left as it is, and nothing was installed.",
                crate::text::path(&unit_path)
            );
        }
        source = Some(target::open_binary(args.binary.as_deref())?);
        // The folders that exist; a missing one is made (root's, 0755) when copying.
        let destination = target.path(INSTALLED_BINARY);
        target::trusted_folder(
            &target.root,
            destination.parent().unwrap_or(Path::new("/")),
            false,
        )?;
    }

    ensure_group(&target, group, out)?;
    if let Some(packaged) = &packaged {
        writeln!(
            out,
            "gputune's Debian package runs the daemon ({}): the unit and the service are left to it.",
            crate::text::path(packaged)
        )?;
    } else if let Some((mut file, shown)) = source.take() {
        let destination = target.path(INSTALLED_BINARY);
        let folder = destination.parent().unwrap_or(Path::new("/"));
        target::trusted_folder(&target.root, folder, true)?;
        target::copy_binary(&mut file, &destination)?;
        writeln!(
            out,
            "Copied {} to {} (root's, mode 0755): the daemon runs this copy.",
            crate::text::path(&shown),
            INSTALLED_BINARY
        )?;
        let unit_folder = unit_path.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(unit_folder).with_context(|| {
            format!(
                "The folder {} could not be created",
                crate::text::path(unit_folder)
            )
        })?;
        fsafe::write_atomically(&unit_path, text.as_bytes(), 0o644)?;
        writeln!(out, "Wrote {}.", crate::text::path(&unit_path))?;
    }
    let joined = add_user(&target, group, user, out)?;
    if packaged.is_none() {
        start_service(&target, out)?;
    }
    match (user, joined) {
        (UserToAdd::Named(name), Joined::Now) => writeln!(
            out,
            "One thing left: {} joins the group \"{group}\" at the next login: log out and in again, or run `newgrp {group}` in a terminal.",
            crate::text::printable(name)
        )?,
        (UserToAdd::Named(name), Joined::Already) => writeln!(
            out,
            "{} is already in the group \"{group}\": gputune can tune without root now.",
            crate::text::printable(name)
        )?,
        (UserToAdd::Nobody, _) => writeln!(
            out,
            "No user was added (gputune was not run through sudo): let a user tune with `usermod -aG {group} NAME`; they log out and in again once."
        )?,
        // Installed into a folder: the command for the target machine was printed.
        (UserToAdd::Named(_), Joined::Skipped) => {}
    }
    Ok(())
}

/// Refuses a system install or uninstall without root.
fn needs_root(target: &Target, what: &str) -> anyhow::Result<()> {
    if target.is_system() && fsafe::effective_uid() != 0 {
        let binary = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gputune"));
        bail!(
            "The daemon's {what} changes the system and needs root: run `sudo {} daemon {what}`.",
            crate::text::path(&binary)
        );
    }
    Ok(())
}

/// What lies at the unit's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnitFound {
    Absent,
    Ours,
    /// Someone else's unit of that name: never replaced, stopped or removed.
    Foreign,
}

fn unit_found(path: &Path) -> anyhow::Result<UnitFound> {
    match fsafe::read_limited(path, 64 * 1024, Links::Refuse) {
        Ok(existing) if String::from_utf8_lossy(&existing).contains(UNIT_MARK) => {
            Ok(UnitFound::Ours)
        }
        Ok(_) => Ok(UnitFound::Foreign),
        Err(error) if error.is_not_found() => Ok(UnitFound::Absent),
        Err(error) => bail!("{error}"),
    }
}

/// The Debian package's unit, when the package is installed.
fn packaged_unit(target: &Target) -> Option<PathBuf> {
    PACKAGE_UNITS
        .iter()
        .map(|unit| target.path(unit))
        .find(|unit| std::fs::symlink_metadata(unit).is_ok())
}

/// The group, made with `groupadd --system` when it does not exist.
fn ensure_group(target: &Target, group: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    if let Tools::Skipped = target.tools {
        writeln!(
            out,
            "Installing into {} ({INSTALL_ROOT_ENV}): on the target machine, create the group with `groupadd --system {group}`.",
            crate::text::path(&target.root)
        )?;
        return Ok(());
    }
    if group_entry(target, group)?.is_some() {
        writeln!(out, "The group \"{group}\" exists.")?;
        return Ok(());
    }
    target.run_checked("groupadd", &["--system", group])?;
    writeln!(out, "Created the group \"{group}\".")?;
    Ok(())
}

/// The group's entry, `None` when there is no such group.
fn group_entry(target: &Target, group: &str) -> anyhow::Result<Option<target::GroupEntry>> {
    let Some(output) = target.run("getent", &["group", group])? else {
        return Ok(None);
    };
    // getent: 0 found, 2 not found.
    match output.status.code() {
        Some(0) => {
            let line = String::from_utf8_lossy(&output.stdout);
            match target::parse_group_line(line.lines().next().unwrap_or("")) {
                Some(entry) => Ok(Some(entry)),
                None => bail!(
                    "`getent group {group}` gave a line that is not a group ({}).",
                    crate::text::printable(line.trim())
                ),
            }
        }
        Some(2) => Ok(None),
        _ => bail!(
            "`getent group {group}` failed ({}{}).",
            output.status,
            target::said(&output)
        ),
    }
}

/// What happened to the user's membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Joined {
    Now,
    Already,
    Skipped,
}

fn add_user(
    target: &Target,
    group: &str,
    user: &UserToAdd,
    out: &mut dyn Write,
) -> anyhow::Result<Joined> {
    let UserToAdd::Named(name) = user else {
        return Ok(Joined::Skipped);
    };
    let shown = crate::text::printable(name);
    if let Tools::Skipped = target.tools {
        writeln!(
            out,
            "On the target machine, let {shown} tune with `usermod -aG {group} {shown}`."
        )?;
        return Ok(Joined::Skipped);
    }
    if group_entry(target, group)?.is_some_and(|entry| entry.members.iter().any(|m| m == name)) {
        return Ok(Joined::Already);
    }
    target.run_checked("usermod", &["--append", "--groups", group, "--", name])?;
    writeln!(out, "Added {shown} to the group \"{group}\".")?;
    Ok(Joined::Now)
}

/// Enables and (re)starts the service where systemd runs; else says what to run later.
fn start_service(target: &Target, out: &mut dyn Write) -> anyhow::Result<()> {
    let later =
        format!("sudo systemctl daemon-reload && sudo systemctl enable --now {UNIT_FILE_NAME}");
    if matches!(target.tools, Tools::Skipped) {
        writeln!(
            out,
            "On the target machine, enable and start the daemon with `systemctl enable --now {UNIT_FILE_NAME}`."
        )?;
        return Ok(());
    }
    if !target.systemd_runs() {
        writeln!(
            out,
            "systemd is not running here (a container, or a system started without it), so the daemon was not started. Where systemd runs, start it with:\n  {later}\nor run it in the foreground: sudo {INSTALLED_BINARY} daemon"
        )?;
        return Ok(());
    }
    target.run_checked("systemctl", &["daemon-reload"])?;
    target.run_checked("systemctl", &["enable", UNIT_FILE_NAME])?;
    // restart, not start: a reinstall replaces the binary, and a running daemon keeps the old
    // one until it restarts (its sessions are put back first, as on any stop).
    target
        .run_checked("systemctl", &["restart", UNIT_FILE_NAME])
        .with_context(|| {
            format!("The daemon did not start: `journalctl -u {UNIT_FILE_NAME}` says why")
        })?;
    writeln!(
        out,
        "Enabled and started {UNIT_FILE_NAME} (`systemctl status {UNIT_FILE_NAME}` shows it)."
    )?;
    Ok(())
}

/// Runs `gputune daemon uninstall`: stops and disables the service, removes the unit and the
/// binary's copy. The group is kept, and so is /var/lib/gputune unless `--purge`.
pub fn run_uninstall(args: &UninstallArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let target = Target::from_env()?;
    needs_root(&target, "uninstall")?;
    let unit_path = target.path(SYSTEM_UNIT_DIR).join(UNIT_FILE_NAME);
    let found = unit_found(&unit_path)?;
    if found == UnitFound::Absent
        && let Some(packaged) = packaged_unit(&target)
    {
        bail!(
            "gputune's Debian package runs the daemon ({}): remove it with `sudo apt remove gputune`.",
            crate::text::path(&packaged)
        );
    }
    let ours = found == UnitFound::Ours;
    if found == UnitFound::Foreign {
        writeln!(
            out,
            "{} is not gputune's daemon unit: that service was left as it is.",
            crate::text::path(&unit_path)
        )?;
    }
    if ours {
        if matches!(target.tools, Tools::Skipped) || !target.systemd_runs() {
            writeln!(out, "systemd is not running here: nothing to stop.")?;
            remove_link(&target.path(WANTS_LINK))?;
        } else {
            target
                .run_checked("systemctl", &["disable", "--now", UNIT_FILE_NAME])
                .context("The daemon could not be stopped; nothing was removed")?;
            writeln!(out, "Stopped and disabled {UNIT_FILE_NAME}.")?;
        }
        remove_file(&unit_path, out)?;
        if !matches!(target.tools, Tools::Skipped) && target.systemd_runs() {
            target.run_checked("systemctl", &["daemon-reload"])?;
        }
    } else {
        writeln!(
            out,
            "No unit of gputune's at {}.",
            crate::text::path(&unit_path)
        )?;
    }
    let binary = target.path(INSTALLED_BINARY);
    remove_file(&binary, out)?;
    if let Some(folder) = binary.parent() {
        // Only when empty: whatever else is there is not ours.
        let _ = std::fs::remove_dir(folder);
    }
    let state = target.path(super::DEFAULT_STATE_DIR);
    match std::fs::symlink_metadata(&state) {
        Ok(metadata) if args.purge && metadata.is_dir() => {
            std::fs::remove_dir_all(&state)
                .with_context(|| format!("{} could not be removed", crate::text::path(&state)))?;
            writeln!(
                out,
                "Removed {} (boot defaults, history).",
                crate::text::path(&state)
            )?;
        }
        Ok(_) if args.purge => writeln!(
            out,
            "{} is not a folder; it was left as it is.",
            crate::text::path(&state)
        )?,
        Ok(_) => writeln!(
            out,
            "Kept {} (the boot defaults and the history the daemon kept): `gputune daemon uninstall --purge` removes it.",
            crate::text::path(&state)
        )?,
        Err(_) => {}
    }
    // A removed group's id can later be given to a new group, which would then own whatever
    // files still carry the old id; members are harmless without a daemon. (Debian packages
    // keep their system groups for the same reason.)
    writeln!(
        out,
        "Kept the group \"{}\" (its id may still own files); `sudo groupdel {}` removes it.",
        super::DEFAULT_GROUP,
        super::DEFAULT_GROUP
    )?;
    Ok(())
}

/// Removes a file (a link itself, never what it points to), saying so; absent is fine.
fn remove_file(path: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => writeln!(out, "Removed {}.", crate::text::path(path))?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => bail!(
            "{} could not be removed ({error}).",
            crate::text::path(path)
        ),
    }
    Ok(())
}

/// Removes `path` when it is a symlink (what `systemctl enable` left).
fn remove_link(path: &Path) -> anyhow::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.file_type().is_symlink()) {
        std::fs::remove_file(path)
            .with_context(|| format!("{} could not be removed", crate::text::path(path)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_hardened_runs_the_daemon_after_persistenced_and_names_the_group() {
        let text = unit_text(&UnitSettings {
            gputune: PathBuf::from("/usr/local/bin/gputune"),
            nvml_library: None,
            group: "gputune".to_string(),
        })
        .unwrap();
        for line in [
            "\nAfter=nvidia-persistenced.service systemd-modules-load.service\n",
            "\nWants=nvidia-persistenced.service\n",
            "\nExecStart=/usr/local/bin/gputune daemon --group gputune\n",
            "\nNoNewPrivileges=yes\n",
            "\nProtectSystem=strict\n",
            "\nProtectHome=yes\n",
            "\nPrivateTmp=yes\n",
            "\nRestrictAddressFamilies=AF_UNIX\n",
            "\nCapabilityBoundingSet=CAP_SYS_ADMIN CAP_CHOWN\n",
            "\nRuntimeDirectory=gputune\n",
            "\nStateDirectory=gputune\n",
            // Hardening that costs the daemon nothing (see docs/benchmarks.md for the score).
            "\nMemoryDenyWriteExecute=yes\n",
            "\nIPAddressDeny=any\n",
            "\nPrivateMounts=yes\n",
            "\nDevicePolicy=closed\n",
            "\nDeviceAllow=char-nvidia-frontend rw\n",
            "\nDeviceAllow=char-nvidia rw\n",
            "\nProtectProc=invisible\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        // Every device the daemon may open is the NVIDIA driver's.
        for line in text.lines().filter(|line| line.starts_with("DeviceAllow=")) {
            assert!(line.starts_with("DeviceAllow=char-nvidia"), "{line}");
        }
        // It would hide /proc/driver/nvidia and the boot id.
        assert!(!text.contains("\nProcSubset="), "{text}");
        for placeholder in ["@GPUTUNE@", "@ENVIRONMENT@", "@GROUP@"] {
            assert!(!text.contains(placeholder), "{text}");
        }
        assert!(text.contains(UNIT_MARK));
    }

    #[test]
    fn odd_paths_are_quoted_and_hostile_ones_refused() {
        let text = unit_text(&UnitSettings {
            gputune: PathBuf::from("/opt/my tools/gputune"),
            nvml_library: Some(PathBuf::from("/usr/lib/wsl/lib/lib%nvidia-ml.so.1")),
            group: "gputune".to_string(),
        })
        .unwrap();
        assert!(
            text.contains("\nExecStart=\"/opt/my tools/gputune\" daemon"),
            "{text}"
        );
        assert!(
            text.contains("Environment=GPUTUNE_NVML_LIB=/usr/lib/wsl/lib/lib%%nvidia-ml.so.1"),
            "{text}"
        );
        for hostile in ["/bin/x\ny", "/bin/x\u{1b}[2J"] {
            assert!(
                unit_text(&UnitSettings {
                    gputune: PathBuf::from(hostile),
                    nvml_library: None,
                    group: "gputune".to_string(),
                })
                .is_err()
            );
        }
        for group in ["", "Root", "a b", "x\nExecStartPre=/bin/sh", "9lives"] {
            assert!(
                unit_text(&UnitSettings {
                    gputune: PathBuf::from("/usr/bin/gputune"),
                    nvml_library: None,
                    group: group.to_string(),
                })
                .is_err(),
                "{group:?}"
            );
        }
    }
}
