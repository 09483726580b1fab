//! `gputune boot-service`: the systemd unit that applies every card's default profile at boot
//! (after nvidia-persistenced, as root, retrying until the driver answers), printed or, with
//! `--install`, written to /etc/systemd/system.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::profiles::store::{CONFIG_DIR_ENV, PROFILES_FOLDER, ProfileStore};

/// The unit template; `@GPUTUNE@` is the binary's absolute path, `@ENVIRONMENT@` the
/// `Environment=` lines.
pub const UNIT_TEMPLATE: &str = include_str!("../../assets/gputune-boot.service");
/// The unit's file name.
pub const UNIT_FILE_NAME: &str = "gputune-boot.service";
/// Where `--install` writes the unit.
pub const SYSTEM_UNIT_DIR: &str = "/etc/systemd/system";
/// Overrides [`SYSTEM_UNIT_DIR`] (packaging into a staging folder, tests).
pub const UNIT_DIR_ENV: &str = "GPUTUNE_SYSTEMD_UNIT_DIR";
/// What to run after installing.
pub const NEXT_STEP: &str =
    "systemctl daemon-reload && systemctl enable --now gputune-boot.service";

/// `gputune boot-service`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BootServiceArgs {
    /// Write the unit to /etc/systemd/system/gputune-boot.service (needs root) instead of
    /// printing it.
    #[arg(long)]
    pub install: bool,
    /// The config folder whose profiles the service applies (default: yours; under sudo, the
    /// invoking user's).
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
}

/// What goes into the unit besides the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSettings {
    /// Absolute path of the gputune binary.
    pub gputune: PathBuf,
    /// The config folder holding `profiles/` (root's own would be empty).
    pub config_dir: Option<PathBuf>,
    /// `--nvml-lib` / `GPUTUNE_NVML_LIB`, when the user needs one.
    pub nvml_library: Option<PathBuf>,
}

/// The unit text for these settings.
pub fn unit_text(settings: &UnitSettings) -> anyhow::Result<String> {
    let mut environment = String::new();
    if let Some(config_dir) = &settings.config_dir {
        environment.push_str(&format!(
            "Environment={}\n",
            quote(&format!("{CONFIG_DIR_ENV}={}", text_of(config_dir)?))
        ));
    }
    if let Some(library) = &settings.nvml_library {
        environment.push_str(&format!(
            "Environment={}\n",
            quote(&format!("GPUTUNE_NVML_LIB={}", text_of(library)?))
        ));
    }
    Ok(UNIT_TEMPLATE
        .replace("@ENVIRONMENT@", &environment)
        .replace("@GPUTUNE@", &quote(&text_of(&settings.gputune)?)))
}

/// A path as unit text: UTF-8, one line.
fn text_of(path: &Path) -> anyhow::Result<String> {
    let Some(text) = path.to_str() else {
        bail!(
            "The path {} is not UTF-8 text, which a systemd unit cannot hold.",
            path.display()
        );
    };
    if text.contains(['\n', '\r']) {
        bail!("The path {text:?} holds a line break, which a systemd unit cannot hold.");
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

/// The config folder the service should read: `--config-dir`, else `GPUTUNE_CONFIG_DIR`, else
/// under sudo the invoking user's `~/.config/gputune`, else this user's.
fn config_dir_for_service(args: &BootServiceArgs) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &args.config_dir {
        return std::path::absolute(dir)
            .with_context(|| format!("The folder {} cannot be made absolute.", dir.display()));
    }
    if std::env::var_os(CONFIG_DIR_ENV).is_none_or(|dir| dir.is_empty())
        && effective_uid() == Some(0)
        && let Some(home) = std::env::var("SUDO_USER")
            .ok()
            .and_then(|user| home_of(&user))
    {
        return Ok(home.join(".config").join("gputune"));
    }
    let store = ProfileStore::open_default()?;
    let folder = store.folder();
    let config = if folder
        .file_name()
        .is_some_and(|name| name == PROFILES_FOLDER)
    {
        folder.parent().unwrap_or(folder)
    } else {
        folder
    };
    std::path::absolute(config)
        .with_context(|| format!("The folder {} cannot be made absolute.", config.display()))
}

/// A user's home folder from /etc/passwd.
fn home_of(user: &str) -> Option<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[0] == user && !fields[5].is_empty())
            .then(|| PathBuf::from(fields[5]))
    })
}

/// This process's effective user id, from /proc (no libc call needed).
pub fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The error for an install without root, or `None` when allowed.
pub fn install_refusal(effective_uid: Option<u32>, unit_path: &Path) -> Option<String> {
    match effective_uid {
        Some(0) => None,
        _ => Some(format!(
            "Installing the boot service writes {} and needs root: run `sudo {} boot-service --install`.",
            unit_path.display(),
            std::env::current_exe()
                .ok()
                .and_then(|path| path.to_str().map(str::to_string))
                .unwrap_or_else(|| "gputune".to_string())
        )),
    }
}

/// Runs `gputune boot-service`.
pub fn run_command(
    args: &BootServiceArgs,
    nvml_library: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let gputune = std::env::current_exe()
        .and_then(|path| path.canonicalize())
        .context("The path of the gputune binary cannot be found")?;
    let settings = UnitSettings {
        gputune,
        config_dir: Some(config_dir_for_service(args)?),
        nvml_library: nvml_library.map(Path::to_path_buf),
    };
    let text = unit_text(&settings)?;
    if !args.install {
        write!(out, "{text}")?;
        return Ok(());
    }
    let (folder, needs_root) = match std::env::var_os(UNIT_DIR_ENV).filter(|dir| !dir.is_empty()) {
        Some(dir) => (PathBuf::from(dir), false),
        None => (PathBuf::from(SYSTEM_UNIT_DIR), true),
    };
    let path = folder.join(UNIT_FILE_NAME);
    if needs_root && let Some(refusal) = install_refusal(effective_uid(), &path) {
        bail!("{refusal}");
    }
    install(&path, &text)?;
    writeln!(out, "Wrote {}. Now run: {NEXT_STEP}", path.display())?;
    Ok(())
}

/// Writes the unit atomically; refuses to replace a file that is not a gputune unit.
fn install(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Ok(existing) = std::fs::read_to_string(path)
        && !existing.contains("profile apply-defaults")
    {
        bail!(
            "{} exists and is not gputune's boot service; it was left as it is.",
            path.display()
        );
    }
    let folder = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)
        .with_context(|| format!("The folder {} could not be created", folder.display()))?;
    let temporary = folder.join(format!(".{UNIT_FILE_NAME}.{}.tmp", std::process::id()));
    let written = std::fs::File::create(&temporary).and_then(|mut file| {
        file.write_all(text.as_bytes())?;
        file.sync_all()
    });
    if let Err(error) = written.and_then(|()| std::fs::rename(&temporary, path)) {
        let _ = std::fs::remove_file(&temporary);
        bail!("{} could not be written ({error}).", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_apply_defaults_after_persistenced_as_root() {
        let text = unit_text(&UnitSettings {
            gputune: PathBuf::from("/usr/local/bin/gputune"),
            config_dir: Some(PathBuf::from("/home/ada/.config/gputune")),
            nvml_library: None,
        })
        .unwrap();
        assert!(
            text.contains("\nAfter=nvidia-persistenced.service\n"),
            "{text}"
        );
        assert!(
            text.contains("\nWants=nvidia-persistenced.service\n"),
            "{text}"
        );
        assert!(text.contains("\nUser=root\n"), "{text}");
        assert!(
            text.contains(
                "\nExecStart=/usr/local/bin/gputune profile apply-defaults --retry-s 120\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("\nEnvironment=GPUTUNE_CONFIG_DIR=/home/ada/.config/gputune\n"),
            "{text}"
        );
        assert!(!text.contains('@'), "{text}");
    }

    #[test]
    fn odd_paths_are_quoted_and_percent_signs_escaped() {
        let text = unit_text(&UnitSettings {
            gputune: PathBuf::from("/opt/my tools/gputune"),
            config_dir: Some(PathBuf::from("/home/a%b/.config/gputune")),
            nvml_library: Some(PathBuf::from("/usr/lib/wsl/lib/libnvidia-ml.so.1")),
        })
        .unwrap();
        assert!(
            text.contains("\nExecStart=\"/opt/my tools/gputune\" profile apply-defaults"),
            "{text}"
        );
        assert!(
            text.contains("Environment=GPUTUNE_CONFIG_DIR=/home/a%%b/.config/gputune"),
            "{text}"
        );
        assert!(
            text.contains("Environment=GPUTUNE_NVML_LIB=/usr/lib/wsl/lib/libnvidia-ml.so.1"),
            "{text}"
        );
        assert!(
            unit_text(&UnitSettings {
                gputune: PathBuf::from("/bin/x\ny"),
                config_dir: None,
                nvml_library: None,
            })
            .is_err()
        );
    }

    #[test]
    fn installing_without_root_is_refused_with_what_to_run() {
        let path = Path::new("/etc/systemd/system/gputune-boot.service");
        assert_eq!(install_refusal(Some(0), path), None);
        let refusal = install_refusal(Some(1000), path).unwrap_or_default();
        assert!(refusal.contains("needs root"), "{refusal}");
        assert!(refusal.contains("sudo"), "{refusal}");
        assert!(
            refusal.contains(path.to_str().unwrap_or_default()),
            "{refusal}"
        );
    }
}
