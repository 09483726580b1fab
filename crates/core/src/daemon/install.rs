//! `gputune daemon install`: the whole job in one command. It creates the `gputune` group,
//! copies this binary where only root can change it (the unit runs that copy, never a file in
//! a user's folder), writes `gputuned.service` (hardened), adds the user who ran sudo to the
//! group, and enables and starts the service where systemd runs. `daemon uninstall` undoes it.
//! `GPUTUNE_INSTALL_ROOT` and `GPUTUNE_INSTALL_COMMANDS` point all of it at a folder and at
//! stand-in programs (tests, image builds). The unit's text and what lies at its path are
//! `install/unit.rs`; removing it all, `install/uninstall.rs`.

mod folders;
mod group;
mod target;
mod uninstall;
mod unit;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::fsafe;

pub use target::{INSTALL_COMMANDS_ENV, INSTALL_ROOT_ENV};
use target::{Target, Tools};
pub use uninstall::run_uninstall;
use unit::{
    SYSTEM_UNIT_DIR, UNIT_FILE_NAME, UNIT_LIMIT_BYTES, UnitFound, UnitSettings, names_group,
    packaged_unit, unit_found, unit_text,
};
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
    /// Use the group although it already exists with other members (they are listed first):
    /// they all get tuning rights.
    #[arg(long)]
    pub trust_existing_group: bool,
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
/// [`INSTALLED_BINARY`]'s folder and name.
const BINARY_DIR: &str = "/usr/local/libexec/gputune";
const BINARY_NAME: &str = "gputune";
/// Where `systemctl enable` makes its link (named `UNIT_FILE_NAME`).
const WANTS_DIR: &str = "/etc/systemd/system/multi-user.target.wants";

/// Who install adds to the group, as the command line resolved it (see `cli::daemon`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserToAdd {
    /// This account (a real user, not root).
    Named(String),
    /// Nobody: root ran it without sudo.
    Nobody,
}

/// Ends every refusal of install's: it comes before anything changed.
const NOT_INSTALLED: &str = "nothing was installed";
/// Ends every refusal of uninstall's.
const NOT_REMOVED: &str = "nothing was removed";
/// Runs `gputune daemon install`: the group, the binary's copy, the unit, the user in the
/// group, the service enabled and started; then says the one thing left. Every folder it
/// writes in is opened without following links (see `folders`).
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
    group::refuse_privileged(&args.group)?;
    if args.print {
        write!(out, "{text}")?;
        return Ok(());
    }
    let target = Target::from_env()?;
    needs_root(&target, "install")?;
    let group = args.group.as_str();
    let packaged = packaged_unit(&target);
    // Everything that can refuse is checked before anything changes.
    let mut source = None;
    let mut own_group = packaged
        .as_ref()
        .is_some_and(|unit| names_group(&String::from_utf8_lossy(&unit.1), group));
    if packaged.is_none() {
        // The folders that exist, checked; a missing one is made (root's, 0755) when writing.
        let unit_folder = folders::open(&target.root, SYSTEM_UNIT_DIR, false, NOT_INSTALLED)?;
        let existing = match &unit_folder {
            Some(folder) => folder.read(UNIT_FILE_NAME, UNIT_LIMIT_BYTES)?,
            None => None,
        };
        match unit_found(existing.as_deref()) {
            UnitFound::Foreign => bail!(
                "{} exists and is not gputune's daemon unit; it was left as it is, and {NOT_INSTALLED}.",
                crate::text::path(&target.path(SYSTEM_UNIT_DIR).join(UNIT_FILE_NAME))
            ),
            UnitFound::Ours => {
                own_group = names_group(
                    &String::from_utf8_lossy(existing.as_deref().unwrap_or(&[])),
                    group,
                );
            }
            UnitFound::Absent => {}
        }
        folders::open(&target.root, BINARY_DIR, false, NOT_INSTALLED)?;
        source = Some(target::open_binary(args.binary.as_deref())?);
    }
    let adding = match user {
        UserToAdd::Named(name) => Some(name.as_str()),
        UserToAdd::Nobody => None,
    };
    let trust = group::Trust {
        own: own_group,
        confirmed: args.trust_existing_group,
    };
    let group_exists = group::vet(&target, group, adding, trust, out)?;

    ensure_group(&target, group, group_exists, out)?;
    if let Some((packaged, _)) = &packaged {
        writeln!(
            out,
            "gputune's Debian package runs the daemon ({}): the unit and the service are left to it.",
            crate::text::path(packaged)
        )?;
    } else if let Some((mut file, shown)) = source.take() {
        let binary_folder = folders::open(&target.root, BINARY_DIR, true, NOT_INSTALLED)?;
        let Some(binary_folder) = binary_folder else {
            bail!("{BINARY_DIR} could not be made; {NOT_INSTALLED}.");
        };
        binary_folder.replace(BINARY_NAME, &mut file, 0o755)?;
        writeln!(
            out,
            "Copied {} to {} (root's, mode 0755): the daemon runs this copy.",
            crate::text::path(&shown),
            INSTALLED_BINARY
        )?;
        let Some(unit_folder) = folders::open(&target.root, SYSTEM_UNIT_DIR, true, NOT_INSTALLED)?
        else {
            bail!("{SYSTEM_UNIT_DIR} could not be made.");
        };
        unit_folder.replace(UNIT_FILE_NAME, &mut text.as_bytes(), 0o644)?;
        writeln!(
            out,
            "Wrote {}.",
            crate::text::path(&unit_folder.path.join(UNIT_FILE_NAME))
        )?;
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

/// Makes the group with `groupadd --system` when [`group::vet`] found none.
fn ensure_group(
    target: &Target,
    group: &str,
    exists: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if let Tools::Skipped = target.tools {
        writeln!(
            out,
            "Installing into {} ({INSTALL_ROOT_ENV}): on the target machine, create the group with `groupadd --system {group}` (a group of that name that exists there already gives its members tuning rights: check who is in it with `getent group {group}`).",
            crate::text::path(&target.root)
        )?;
        return Ok(());
    }
    if !exists {
        target.run_checked("groupadd", &["--system", group])?;
        writeln!(out, "Created the group \"{group}\".")?;
    }
    Ok(())
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
    if group::group_entry(target, group)?
        .is_some_and(|entry| entry.members.iter().any(|m| m == name))
    {
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
