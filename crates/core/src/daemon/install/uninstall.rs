//! `gputune daemon uninstall`: stops and disables the service, removes the unit and the
//! binary's copy, and with `--purge` the state folder. Every folder it removes from is opened
//! without following links and checked before anything changes (see `folders`); each removal
//! acts on that open folder, so a link planted later cannot steer it either.

use std::io::Write;

use anyhow::{Context, bail};

use super::folders::{self, Folder};
use super::target::{Target, Tools};
use super::unit::{
    SYSTEM_UNIT_DIR, UNIT_FILE_NAME, UNIT_LIMIT_BYTES, UnitFound, packaged_unit, unit_found,
};
use super::{BINARY_DIR, BINARY_NAME, NOT_REMOVED, UninstallArgs, WANTS_DIR, needs_root};
use crate::daemon::{DEFAULT_GROUP, DEFAULT_STATE_DIR};

/// Runs `gputune daemon uninstall`. The group is kept, and so is /var/lib/gputune unless
/// `--purge`.
pub fn run_uninstall(args: &UninstallArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let target = Target::from_env()?;
    needs_root(&target, "uninstall")?;
    let unit_path = target.path(SYSTEM_UNIT_DIR).join(UNIT_FILE_NAME);
    // Every folder, opened and checked before anything changes.
    let unit_folder = folders::open(&target.root, SYSTEM_UNIT_DIR, false, NOT_REMOVED)?;
    let existing = match &unit_folder {
        Some(folder) => folder.read(UNIT_FILE_NAME, UNIT_LIMIT_BYTES)?,
        None => None,
    };
    let found = unit_found(existing.as_deref());
    if found == UnitFound::Absent
        && let Some((packaged, _)) = packaged_unit(&target)
    {
        bail!(
            "gputune's Debian package runs the daemon ({}): remove it with `sudo apt remove gputune`.",
            crate::text::path(&packaged)
        );
    }
    let wants_folder = folders::open(&target.root, WANTS_DIR, false, NOT_REMOVED)?;
    let (binary_parent, binary_name) = split(BINARY_DIR);
    let binary_parent = folders::open(&target.root, binary_parent, false, NOT_REMOVED)?;
    let binary_folder = match &binary_parent {
        Some(parent) => parent.child(binary_name.as_ref(), false, NOT_REMOVED)?,
        None => None,
    };
    let (state_parent, state_name) = split(DEFAULT_STATE_DIR);
    let state = if args.purge {
        match folders::open(&target.root, state_parent, false, NOT_REMOVED)? {
            Some(parent) => parent
                .child(state_name.as_ref(), false, NOT_REMOVED)?
                .map(|state| (parent, state)),
            None => None,
        }
    } else {
        None
    };

    match (found, &unit_folder) {
        (UnitFound::Ours, Some(unit_folder)) => {
            if matches!(target.tools, Tools::Skipped) || !target.systemd_runs() {
                writeln!(out, "systemd is not running here: nothing to stop.")?;
                if let Some(wants_folder) = &wants_folder {
                    wants_folder.remove_link(UNIT_FILE_NAME)?;
                }
            } else {
                target
                    .run_checked("systemctl", &["disable", "--now", UNIT_FILE_NAME])
                    .context("The daemon could not be stopped; nothing was removed")?;
                writeln!(out, "Stopped and disabled {UNIT_FILE_NAME}.")?;
            }
            remove_file(unit_folder, UNIT_FILE_NAME, out)?;
            if !matches!(target.tools, Tools::Skipped) && target.systemd_runs() {
                target.run_checked("systemctl", &["daemon-reload"])?;
            }
        }
        (UnitFound::Foreign, _) => writeln!(
            out,
            "{} is not gputune's daemon unit: that service was left as it is.",
            crate::text::path(&unit_path)
        )?,
        _ => writeln!(
            out,
            "No unit of gputune's at {}.",
            crate::text::path(&unit_path)
        )?,
    }
    if let (Some(parent), Some(folder)) = (&binary_parent, &binary_folder) {
        remove_file(folder, BINARY_NAME, out)?;
        // Only when empty: whatever else is there is not ours.
        parent.remove_empty_folder(binary_name);
    }
    let state_path = target.path(DEFAULT_STATE_DIR);
    if let Some((parent, state)) = state {
        parent.remove_tree(state)?;
        writeln!(
            out,
            "Removed {} (boot defaults, history).",
            crate::text::path(&state_path)
        )?;
    } else if !args.purge && std::fs::symlink_metadata(&state_path).is_ok() {
        writeln!(
            out,
            "Kept {} (the boot defaults and the history the daemon kept): `gputune daemon uninstall --purge` removes it.",
            crate::text::path(&state_path)
        )?;
    }
    // A removed group's id can later be given to a new group, which would then own whatever
    // files still carry the old id; members are harmless without a daemon. (Debian packages
    // keep their system groups for the same reason.)
    writeln!(
        out,
        "Kept the group \"{DEFAULT_GROUP}\" (its id may still own files); `sudo groupdel {DEFAULT_GROUP}` removes it."
    )?;
    Ok(())
}

/// "/a/b/c" as ("/a/b", "c").
fn split(absolute: &str) -> (&str, &str) {
    absolute.rsplit_once('/').unwrap_or(("/", absolute))
}

/// Removes a file (a link itself, never what it points to), saying so; absent is fine.
fn remove_file(folder: &Folder, name: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    if folder.remove_file(name)? {
        writeln!(
            out,
            "Removed {}.",
            crate::text::path(&folder.path.join(name))
        )?;
    }
    Ok(())
}
