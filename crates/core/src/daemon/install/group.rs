//! Which group `daemon install` hands tuning rights to. Its members change GPU settings
//! through the daemon, so a group that already means something else is refused: a
//! privileged one by name, any other system group (gid below 1000) unless it is gputune's own
//! (`gputune`, which `groupadd --system` and the Debian package make, or the group the
//! installed unit already names). An existing group's members (listed, and users whose
//! primary group it is) are said before it is trusted; a group gputune's unit does not
//! already name needs `--trust-existing-group` when anyone besides the user being added is in
//! it.

use std::io::Write;

use anyhow::bail;

use super::target::{Target, Tools, said};

/// Groups that already give their members power over the machine (or read access to its
/// disks and passwords): giving them tuning rights as well is never what was meant.
pub const PRIVILEGED_GROUPS: [&str; 8] = [
    "root", "sudo", "wheel", "adm", "admin", "staff", "disk", "shadow",
];
/// Groups below this id are the system's (`SYS_GID_MAX` is 999 on Debian and Red Hat).
pub const FIRST_USER_GID: u32 = 1000;

/// Refuses a privileged group by name, before anything is looked up or changed.
pub fn refuse_privileged(group: &str) -> anyhow::Result<()> {
    if PRIVILEGED_GROUPS.contains(&group) {
        bail!(
            "\"{group}\" is a privileged group: its members would get tuning rights without being asked, and adding a user to it gives far more than tuning. Use gputune's own group (the default, --group {}) or a group of your own; nothing was installed.",
            super::super::DEFAULT_GROUP
        );
    }
    Ok(())
}

/// A group as `getent group NAME` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    pub gid: u32,
    pub members: Vec<String>,
}

/// Parses a `name:password:gid:member,member` line.
pub fn parse_group_line(line: &str) -> Option<GroupEntry> {
    let fields: Vec<&str> = line.trim_end().split(':').collect();
    if fields.len() != 4 {
        return None;
    }
    Some(GroupEntry {
        gid: fields[2].parse().ok()?,
        members: fields[3]
            .split(',')
            .filter(|member| !member.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

/// The group's entry, `None` when there is no such group.
pub fn group_entry(target: &Target, group: &str) -> anyhow::Result<Option<GroupEntry>> {
    let Some(output) = target.run("getent", &["group", group])? else {
        return Ok(None);
    };
    // getent: 0 found, 2 not found.
    match output.status.code() {
        Some(0) => {
            let line = String::from_utf8_lossy(&output.stdout);
            match parse_group_line(line.lines().next().unwrap_or("")) {
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
            said(&output)
        ),
    }
}

/// Whether the administrator already vouched for an existing group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trust {
    /// gputune's installed unit (or the Debian package's) names this group: a previous install
    /// made or trusted it.
    pub own: bool,
    /// `--trust-existing-group`.
    pub confirmed: bool,
}

/// Checks an existing group before anything changes and says who is in it; `Ok(true)` when
/// it exists, `Ok(false)` when install is to make it (or, into a folder, cannot look).
pub fn vet(
    target: &Target,
    group: &str,
    adding: Option<&str>,
    trust: Trust,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    if matches!(target.tools, Tools::Skipped) {
        return Ok(false);
    }
    let Some(entry) = group_entry(target, group)? else {
        return Ok(false);
    };
    let gid = entry.gid;
    if gid == 0 {
        bail!(
            "The group \"{group}\" has gid 0, root's group; name another group with --group NAME; nothing was installed."
        );
    }
    if gid < FIRST_USER_GID && group != super::super::DEFAULT_GROUP && !trust.own {
        bail!(
            "\"{group}\" is a system group (gid {gid}): its members are there for other programs and would all get tuning rights. Use gputune's own group (the default, --group {}) or a group of your own (gid {FIRST_USER_GID} or above); nothing was installed.",
            super::super::DEFAULT_GROUP
        );
    }
    let primary = primary_members(target, gid)?;
    let who = describe(&entry.members, &primary);
    let others = entry
        .members
        .iter()
        .chain(&primary)
        .any(|name| Some(name.as_str()) != adding);
    if !others {
        writeln!(out, "The group \"{group}\" exists (gid {gid}; {who}).")?;
    } else if trust.own {
        writeln!(
            out,
            "The group \"{group}\" exists (gid {gid}): its {who} can change GPU settings through the daemon."
        )?;
    } else if trust.confirmed {
        writeln!(
            out,
            "Trusting the existing group \"{group}\" (gid {gid}, --trust-existing-group): its {who} can change GPU settings through the daemon."
        )?;
    } else {
        bail!(
            "The group \"{group}\" already exists (gid {gid}) and gputune's unit does not name it: its {who} would be able to change GPU settings through the daemon; nothing was installed. If each of them should, run again with --trust-existing-group; else take them out (`gpasswd -d NAME {group}`) or name another group with --group NAME."
        );
    }
    Ok(true)
}

/// The users whose primary group is `gid` (`getent passwd`): members without being listed.
fn primary_members(target: &Target, gid: u32) -> anyhow::Result<Vec<String>> {
    let Some(output) = target.run("getent", &["passwd"])? else {
        return Ok(Vec::new());
    };
    if !output.status.success() {
        bail!(
            "`getent passwd` failed ({}{}), so who is in the group cannot be told; nothing was installed.",
            output.status,
            said(&output)
        );
    }
    let gid = gid.to_string();
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() >= 4 && fields[3] == gid).then(|| fields[0].to_string())
        })
        .collect())
}

/// "members alice, bob; primary group of carol", or "no members".
fn describe(members: &[String], primary: &[String]) -> String {
    let list = |names: &[String]| {
        names
            .iter()
            .map(|name| crate::text::printable(name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (members.is_empty(), primary.is_empty()) {
        (true, true) => "no members".to_string(),
        (false, true) => format!("members {}", list(members)),
        (true, false) => format!("primary group of {}", list(primary)),
        (false, false) => format!(
            "members {}; primary group of {}",
            list(members),
            list(primary)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_line_gives_its_gid_and_members() {
        assert_eq!(
            parse_group_line("gputune:x:998:alice,bob\n"),
            Some(GroupEntry {
                gid: 998,
                members: vec!["alice".to_string(), "bob".to_string()]
            })
        );
        assert_eq!(
            parse_group_line("gputune:x:998:"),
            Some(GroupEntry {
                gid: 998,
                members: vec![]
            })
        );
        assert_eq!(parse_group_line("nonsense"), None);
        assert_eq!(parse_group_line("gputune:x:abc:"), None);
    }

    #[test]
    fn privileged_groups_are_refused_by_name() {
        for group in PRIVILEGED_GROUPS {
            let refusal = refuse_privileged(group).unwrap_err().to_string();
            assert!(refusal.contains("is a privileged group"), "{refusal}");
        }
        assert!(refuse_privileged("gputune").is_ok());
        assert!(refuse_privileged("ml-team").is_ok());
    }
}
