//! The daemon's systemd unit: its text from the template (the binary, the NVML library, the
//! group; systemd's quoting, nothing a unit would read differently), and what lies at its path
//! (ours, someone else's, or the Debian package's). Installing and removing it is `install.rs`
//! and `uninstall.rs`.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::target::Target;
use crate::fsafe::{self, Links};

/// The unit template: `@GPUTUNE@` the binary, `@ENVIRONMENT@` the `Environment=` lines,
/// `@GROUP@` the group.
const UNIT_TEMPLATE: &str = include_str!("../../../../../assets/gputuned.service");
/// The unit's file name, and the service's name for systemctl.
pub(super) const UNIT_FILE_NAME: &str = "gputuned.service";
/// Where install writes the unit.
pub(super) const SYSTEM_UNIT_DIR: &str = "/etc/systemd/system";
/// Marks a unit file as gputune's, so `install` replaces its own and nothing else.
const UNIT_MARK: &str = "Made by `gputune daemon install`.";

/// What goes into the unit besides the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UnitSettings {
    /// Absolute path of the gputune binary.
    pub gputune: PathBuf,
    /// `--nvml-lib` / `GPUTUNE_NVML_LIB`, when the machine needs one (WSL).
    pub nvml_library: Option<PathBuf>,
    pub group: String,
}

/// The unit text for these settings.
pub(super) fn unit_text(settings: &UnitSettings) -> anyhow::Result<String> {
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

/// Where the Debian package puts its unit; when it is there the package runs the daemon.
const PACKAGE_UNITS: [&str; 2] = [
    "/lib/systemd/system/gputuned.service",
    "/usr/lib/systemd/system/gputuned.service",
];
/// A unit file larger than this is not one `install` wrote.
pub(super) const UNIT_LIMIT_BYTES: u64 = 64 * 1024;

/// Whether a unit runs the daemon for `group` (its `ExecStart=` ends `daemon --group NAME`).
pub(super) fn names_group(unit: &str, group: &str) -> bool {
    let ending = format!(" daemon --group {group}");
    unit.lines()
        .any(|line| line.starts_with("ExecStart=") && line.trim_end().ends_with(&ending))
}

/// What lies at the unit's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UnitFound {
    Absent,
    Ours,
    /// Someone else's unit of that name: never replaced, stopped or removed.
    Foreign,
}

pub(super) fn unit_found(existing: Option<&[u8]>) -> UnitFound {
    match existing {
        None => UnitFound::Absent,
        Some(text) if String::from_utf8_lossy(text).contains(UNIT_MARK) => UnitFound::Ours,
        Some(_) => UnitFound::Foreign,
    }
}

/// The Debian package's unit and its text, when the package is installed (read only: a
/// link there, /lib to /usr/lib, is how merged-/usr systems look).
pub(super) fn packaged_unit(target: &Target) -> Option<(PathBuf, Vec<u8>)> {
    PACKAGE_UNITS
        .iter()
        .map(|unit| target.path(unit))
        .find_map(|unit| {
            std::fs::symlink_metadata(&unit).ok()?;
            let text =
                fsafe::read_limited(&unit, UNIT_LIMIT_BYTES, Links::Follow).unwrap_or_default();
            Some((unit, text))
        })
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
