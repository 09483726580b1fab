//! `gputune daemon install`: writes `gputuned.service` (hardened, root) and creates the
//! `gputune` group. The unit runs a binary only root can change: one in a user's folder (what
//! `cargo install` makes) is refused with the command that copies it somewhere safe.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::fsafe::{self, Links};

/// The unit template: `@GPUTUNE@` the binary, `@ENVIRONMENT@` the `Environment=` lines,
/// `@GROUP@` the group.
pub const UNIT_TEMPLATE: &str = include_str!("../../assets/gputuned.service");
pub const UNIT_FILE_NAME: &str = "gputuned.service";
pub const SYSTEM_UNIT_DIR: &str = "/etc/systemd/system";
/// Overrides [`SYSTEM_UNIT_DIR`] (packaging into a staging folder, tests).
pub const UNIT_DIR_ENV: &str = "GPUTUNE_SYSTEMD_UNIT_DIR";
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

/// Refuses a binary that someone other than root could change: the file and every folder
/// above it must belong to root and be writable by nobody else (a sticky world-writable folder
/// such as /tmp does not count as safe either).
pub fn check_binary_for_root(path: &Path) -> Result<(), String> {
    let resolved = path
        .canonicalize()
        .map_err(|error| format!("{} cannot be found ({error}).", crate::text::path(path)))?;
    let copy_hint = format!(
        "copy it where only root can change it, e.g. `sudo install -m 0755 -o root -g root {} /usr/local/bin/gputune`, then run `sudo /usr/local/bin/gputune daemon install`",
        crate::text::path(path)
    );
    let mut current = Some(resolved.as_path());
    while let Some(step) = current {
        let metadata = std::fs::metadata(step)
            .map_err(|error| format!("{} cannot be checked ({error}).", crate::text::path(step)))?;
        if metadata.uid() != 0 {
            return Err(format!(
                "The daemon runs as root, and {} belongs to user {}, who could change what root runs: {copy_hint}.",
                crate::text::path(step),
                metadata.uid()
            ));
        }
        if metadata.permissions().mode() & 0o022 != 0 {
            return Err(format!(
                "The daemon runs as root, and {} can be written by others (mode {:o}): {copy_hint}.",
                crate::text::path(step),
                metadata.permissions().mode() & 0o7777
            ));
        }
        current = step.parent();
    }
    Ok(())
}

/// `gputune daemon install`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct InstallArgs {
    /// The gputune binary the unit runs (default: this one).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// The group whose members may change settings through the daemon.
    #[arg(long, default_value = super::DEFAULT_GROUP)]
    pub group: String,
    /// Print the unit instead of installing it.
    #[arg(long)]
    pub print: bool,
}

/// Runs `gputune daemon install`.
pub fn run_install(
    args: &InstallArgs,
    nvml_library: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let binary = match &args.binary {
        Some(binary) => binary.clone(),
        None => {
            std::env::current_exe().context("The path of the gputune binary cannot be found")?
        }
    };
    let binary = binary
        .canonicalize()
        .with_context(|| format!("{} cannot be found", crate::text::path(&binary)))?;
    let text = unit_text(&UnitSettings {
        gputune: binary.clone(),
        nvml_library: nvml_library.map(Path::to_path_buf),
        group: args.group.clone(),
    })?;
    if args.print {
        write!(out, "{text}")?;
        return Ok(());
    }
    if let Err(refusal) = check_binary_for_root(&binary) {
        bail!("{refusal}");
    }
    let (folder, system) = match std::env::var_os(UNIT_DIR_ENV).filter(|dir| !dir.is_empty()) {
        Some(dir) => (PathBuf::from(dir), false),
        None => (PathBuf::from(SYSTEM_UNIT_DIR), true),
    };
    let path = folder.join(UNIT_FILE_NAME);
    if system && fsafe::effective_uid() != 0 {
        bail!(
            "Installing the daemon writes {} and needs root: run `sudo {} daemon install`.",
            crate::text::path(&path),
            crate::text::path(&binary)
        );
    }
    match fsafe::read_limited(&path, 64 * 1024, Links::Refuse) {
        Ok(existing) if !String::from_utf8_lossy(&existing).contains(UNIT_MARK) => bail!(
            "{} exists and is not gputune's daemon unit; it was left as it is.",
            crate::text::path(&path)
        ),
        Ok(_) => {}
        Err(error) if error.is_not_found() => {}
        Err(error) => bail!("{error}"),
    }
    std::fs::create_dir_all(&folder).with_context(|| {
        format!(
            "The folder {} could not be created",
            crate::text::path(&folder)
        )
    })?;
    fsafe::write_atomically(&path, text.as_bytes(), 0o644)?;
    writeln!(out, "Wrote {}.", crate::text::path(&path))?;
    if system {
        ensure_group(&args.group, out)?;
    } else {
        writeln!(
            out,
            "Not a system install ({UNIT_DIR_ENV} is set): create the group \"{}\" on the target machine.",
            args.group
        )?;
    }
    writeln!(
        out,
        "Now run: systemctl daemon-reload && systemctl enable --now {UNIT_FILE_NAME}\n\
         Then let a user tune without root: usermod -aG {} USER (they log in again once).",
        args.group
    )?;
    Ok(())
}

/// Creates the group with `groupadd --system` when it does not exist yet.
fn ensure_group(group: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    if nix::unistd::Group::from_name(group)
        .ok()
        .flatten()
        .is_some()
    {
        writeln!(out, "The group \"{group}\" exists.")?;
        return Ok(());
    }
    let status = std::process::Command::new("groupadd")
        .args(["--system", group])
        .status()
        .with_context(|| {
            format!("groupadd could not be run; create the group \"{group}\" yourself")
        })?;
    if !status.success() {
        bail!("groupadd --system {group} failed ({status}); create the group yourself.");
    }
    writeln!(out, "Created the group \"{group}\".")?;
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

    #[test]
    fn a_binary_others_can_change_is_refused() {
        // /tmp is world-writable: whatever lies below it is not safe for root to run.
        let folder = tempfile::tempdir().unwrap();
        let binary = folder.path().join("gputune");
        std::fs::write(&binary, b"#!/bin/sh\n").unwrap();
        let refusal = check_binary_for_root(&binary).unwrap_err();
        assert!(
            refusal.contains("sudo install -m 0755 -o root -g root"),
            "{refusal}"
        );
        assert!(check_binary_for_root(Path::new("/no/such/gputune")).is_err());
        if fsafe::effective_uid() == 0
            && std::fs::metadata("/usr/bin/env").is_ok_and(|m| m.uid() == 0)
        {
            assert_eq!(check_binary_for_root(Path::new("/usr/bin/env")), Ok(()));
        }
    }
}
