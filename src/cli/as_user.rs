//! Running a user's command as that user: under `sudo`, `gputune run` starts the command as the
//! user who ran sudo (their groups, home and name), so a training job never runs as root just
//! because gputune needed rights to tune.

use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::unistd::{Gid, Uid, User};

/// Sets `command` to run as the user behind `sudo` when this process is root under sudo.
/// Returns that user's name, `None` when nothing changes (not root, or not under sudo).
pub fn drop_to_invoking_user(command: &mut Command) -> Result<Option<String>, String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let Some(uid) = std::env::var("SUDO_UID")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|uid| *uid != 0)
    else {
        return Ok(None);
    };
    let user = User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten()
        .ok_or_else(|| format!("The user with uid {uid} (from SUDO_UID) does not exist; the command was not started."))?;
    let name = std::ffi::CString::new(user.name.as_bytes()).map_err(|_| {
        "The invoking user's name is not usable; the command was not started.".to_string()
    })?;
    let groups: Vec<Gid> = nix::unistd::getgrouplist(&name, user.gid).map_err(|error| {
        format!(
            "The groups of {} cannot be read ({error}); the command was not started.",
            user.name
        )
    })?;
    let (uid, gid) = (user.uid, user.gid);
    command
        .env("HOME", &user.dir)
        .env("USER", &user.name)
        .env("LOGNAME", &user.name);
    // SAFETY: the closure runs in the child between fork and exec and only makes the three
    // system calls (no allocation, no lock): groups first, then the group, then the user, as
    // dropping root must be ordered.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setgroups(&groups).map_err(std::io::Error::from)?;
            nix::unistd::setgid(gid).map_err(std::io::Error::from)?;
            nix::unistd::setuid(uid).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    Ok(Some(user.name))
}
