//! Running a user's command as that user: under `sudo`, `gputune run`, `gputune sweep` and
//! `gputune plan --measure` start the command as the user who ran sudo (their groups, home and name), so a training job
//! never runs as root just because gputune needed rights to tune.
//!
//! It fails closed: as root, when `SUDO_UID` or `SUDO_USER` says sudo is involved but does not
//! name a real non-root user (`SUDO_UID=abc`, `-1`, empty, a uid or name with no account), the
//! command is refused rather than run as root. `--keep-root` runs it as root on purpose.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::unistd::{Gid, Uid, User};

/// The user a command is started as, resolved before anything is applied.
#[derive(Debug, Clone)]
pub struct InvokingUser {
    pub name: String,
    uid: Uid,
    gid: Gid,
    home: std::path::PathBuf,
    groups: Vec<Gid>,
}

/// What the environment says about who ran sudo, read once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SudoEnvironment {
    pub sudo_uid: Option<OsString>,
    pub sudo_user: Option<OsString>,
}

impl SudoEnvironment {
    pub fn from_env() -> SudoEnvironment {
        SudoEnvironment {
            sudo_uid: std::env::var_os("SUDO_UID"),
            sudo_user: std::env::var_os("SUDO_USER"),
        }
    }
}

/// Who the command runs as, decided from the environment alone (no user database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// As this process's user: not root, root not under sudo, or root who ran sudo as root.
    Unchanged,
    /// As the account with this uid.
    Uid(u32),
    /// As the account with this name (`SUDO_USER` without `SUDO_UID`).
    Name(String),
}

const NOT_STARTED: &str =
    "the command was not started (add --keep-root to run it as root on purpose)";

/// The decision, from whether this process is root and what sudo left in the environment. An
/// `Err` is the one sentence that refuses the command.
pub fn decide(is_root: bool, environment: &SudoEnvironment) -> Result<RunAs, String> {
    if !is_root {
        return Ok(RunAs::Unchanged);
    }
    match (&environment.sudo_uid, &environment.sudo_user) {
        (None, None) => Ok(RunAs::Unchanged),
        (Some(raw), _) => {
            let shown = crate::text::printable(&raw.to_string_lossy());
            let uid = raw
                .to_str()
                .map(str::trim)
                .filter(|text| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
                .and_then(|text| text.parse::<u32>().ok())
                .ok_or_else(|| {
                    format!(
                        "gputune runs as root under sudo, but SUDO_UID (\"{shown}\") is not a user id, so the user who ran sudo is unknown; {NOT_STARTED}."
                    )
                })?;
            // u32::MAX is (uid_t)-1, "no user", to the kernel.
            if uid == u32::MAX {
                return Err(format!(
                    "gputune runs as root under sudo, but SUDO_UID ({uid}) is not a user id; {NOT_STARTED}."
                ));
            }
            // Root who ran sudo as root: running as root is not a change of user.
            Ok(if uid == 0 {
                RunAs::Unchanged
            } else {
                RunAs::Uid(uid)
            })
        }
        (None, Some(raw)) => {
            let shown = crate::text::printable(&raw.to_string_lossy());
            match raw.to_str().map(str::trim) {
                Some(name) if !name.is_empty() => {
                    if name == "root" {
                        Ok(RunAs::Unchanged)
                    } else {
                        Ok(RunAs::Name(name.to_string()))
                    }
                }
                _ => Err(format!(
                    "gputune runs as root under sudo, but SUDO_USER (\"{shown}\") names no user and SUDO_UID is not set; {NOT_STARTED}."
                )),
            }
        }
    }
}

/// The user the command must run as, or `None` to leave it as this process's; `Err` when sudo
/// is involved but names no real non-root user. `keep_root` keeps this process's user.
pub fn invoking_user(keep_root: bool) -> Result<Option<InvokingUser>, String> {
    if keep_root {
        return Ok(None);
    }
    let is_root = nix::unistd::geteuid().is_root();
    let found = match decide(is_root, &SudoEnvironment::from_env())? {
        RunAs::Unchanged => return Ok(None),
        RunAs::Uid(uid) => User::from_uid(Uid::from_raw(uid))
            .map_err(|error| {
                format!("The user with uid {uid} (SUDO_UID) cannot be looked up ({error}); {NOT_STARTED}.")
            })?
            .ok_or_else(|| {
                format!("There is no user with uid {uid} (SUDO_UID); {NOT_STARTED}.")
            })?,
        RunAs::Name(name) => {
            let shown = crate::text::printable(&name);
            User::from_name(&name)
                .map_err(|error| {
                    format!("The user \"{shown}\" (SUDO_USER) cannot be looked up ({error}); {NOT_STARTED}.")
                })?
                .ok_or_else(|| {
                    format!("There is no user named \"{shown}\" (SUDO_USER); {NOT_STARTED}.")
                })?
        }
    };
    if found.uid.is_root() {
        // A second account with uid 0 is root by another name.
        return Ok(None);
    }
    let shown = crate::text::printable(&found.name);
    let name = std::ffi::CString::new(found.name.as_bytes())
        .map_err(|_| format!("The user name \"{shown}\" is not usable; {NOT_STARTED}."))?;
    let groups = nix::unistd::getgrouplist(&name, found.gid).map_err(|error| {
        format!("The groups of {shown} cannot be read ({error}); {NOT_STARTED}.")
    })?;
    Ok(Some(InvokingUser {
        name: found.name,
        uid: found.uid,
        gid: found.gid,
        home: found.dir,
        groups,
    }))
}

/// What every front end says when the command runs as the user who ran sudo.
pub fn runs_as_sentence(user: &InvokingUser) -> String {
    format!(
        "the command runs as {}, not as root (add --keep-root to keep root).",
        crate::text::printable(&user.name)
    )
}

/// Sets `command` to run as `user`: their home and names in its environment, their groups,
/// group and uid set in the child before it executes.
pub fn run_as(command: &mut Command, user: &InvokingUser) {
    let (uid, gid, groups) = (user.uid, user.gid, user.groups.clone());
    command
        .env("HOME", &user.home)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sudo(uid: Option<&str>, user: Option<&str>) -> SudoEnvironment {
        SudoEnvironment {
            sudo_uid: uid.map(OsString::from),
            sudo_user: user.map(OsString::from),
        }
    }

    #[test]
    fn a_malformed_sudo_environment_refuses_instead_of_running_as_root() {
        for (uid, user) in [
            (Some("abc"), None),
            (Some("-1"), None),
            (Some(""), None),
            (Some("  "), Some("alice")),
            (Some("4294967295"), None),
            (Some("99999999999"), None),
            (Some("+5"), None),
            (None, Some("")),
        ] {
            let decided = decide(true, &sudo(uid, user));
            let error = decided.expect_err(&format!("{uid:?} {user:?} is refused"));
            assert!(error.contains("--keep-root"), "{error}");
        }
        // With escape characters, the message shows them escaped.
        let error = decide(true, &sudo(Some("\u{1b}[2J"), None)).unwrap_err();
        assert!(
            error.contains("\\u{1b}[2J") && !error.contains('\u{1b}'),
            "{error}"
        );
    }

    #[test]
    fn a_well_formed_sudo_environment_names_the_user_and_no_sudo_changes_nothing() {
        assert_eq!(
            decide(true, &sudo(Some("1000"), Some("alice"))),
            Ok(RunAs::Uid(1000))
        );
        assert_eq!(
            decide(true, &sudo(Some(" 1000\n"), None)),
            Ok(RunAs::Uid(1000))
        );
        assert_eq!(
            decide(true, &sudo(None, Some("alice"))),
            Ok(RunAs::Name("alice".to_string()))
        );
        assert_eq!(
            decide(true, &sudo(Some("0"), Some("root"))),
            Ok(RunAs::Unchanged)
        );
        assert_eq!(decide(true, &sudo(None, None)), Ok(RunAs::Unchanged));
        // Not root: nothing to drop, whatever the environment says.
        assert_eq!(
            decide(false, &sudo(Some("abc"), None)),
            Ok(RunAs::Unchanged)
        );
    }
}
