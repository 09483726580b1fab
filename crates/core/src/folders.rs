//! Where gputune keeps its files, found from the environment once, at the start of the program
//! (`Folders::from_env` in the binary's `main`, for the CLI, the window and the daemon alike).
//! The engine and the stores take these folders as values and never read the environment
//! themselves, so a test names its own folders without touching its process's environment.

use std::ffi::OsString;
use std::path::PathBuf;

/// Environment variable that overrides the state folder (tests, unusual set-ups).
pub const STATE_DIR_ENV: &str = "GPUTUNE_STATE_DIR";
/// Environment variable that names the folder where an engine other than the daemon records
/// the clock locks it sets (tests, unusual set-ups); see `state_folder::SHARED_RECORD_DIR`.
pub const RECORD_DIR_ENV: &str = "GPUTUNE_RECORD_DIR";
/// Environment variable that overrides the config folder (tests, unusual set-ups).
pub const CONFIG_DIR_ENV: &str = "GPUTUNE_CONFIG_DIR";

/// The folders of this user's gputune. `None` where no folder could be found (no home folder):
/// what needs it then says so and names the variable to set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folders {
    /// The engine's locks, journals and clock-lock records when it runs in this process:
    /// `GPUTUNE_STATE_DIR`, else the platform's state (or local data) folder.
    pub state_dir: Option<PathBuf>,
    /// Where an engine other than the daemon records the clock locks it sets, when named
    /// (`GPUTUNE_RECORD_DIR`); `None` keeps the engine's own rule (the daemon's folder for
    /// root on the real driver, else the state folder).
    pub record_dir: Option<PathBuf>,
    /// The config folder (profiles in its `profiles` subfolder): `GPUTUNE_CONFIG_DIR`, else,
    /// for root under `sudo`, the invoking user's, else the platform's config folder.
    pub config_dir: Option<PathBuf>,
}

impl Folders {
    /// This process's folders, as its environment says (an empty variable is an unset one).
    pub fn from_env() -> Folders {
        Folders::from_vars(
            |name| std::env::var_os(name),
            nix::unistd::geteuid().is_root(),
        )
    }

    /// The folders as the variables `var` returns say, for a process that runs as root or not.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>, is_root: bool) -> Folders {
        let named = |name: &str| var(name).filter(|dir| !dir.is_empty()).map(PathBuf::from);
        let platform = directories::ProjectDirs::from("", "", "gputune");
        let state_dir = named(STATE_DIR_ENV).or_else(|| {
            platform.as_ref().map(|dirs| {
                dirs.state_dir()
                    .unwrap_or_else(|| dirs.data_local_dir())
                    .to_path_buf()
            })
        });
        let config_dir = named(CONFIG_DIR_ENV)
            .or_else(|| {
                let sudo_uid = var("SUDO_UID")?;
                invoking_user_config(is_root, sudo_uid.to_str()?)
            })
            .or_else(|| {
                platform
                    .as_ref()
                    .map(|dirs| dirs.config_dir().to_path_buf())
            });
        Folders {
            state_dir,
            record_dir: named(RECORD_DIR_ENV),
            config_dir,
        }
    }

    /// Every folder inside `dir` (tests, tools): `state` (the clock-lock records too) and
    /// `config`.
    pub fn inside(dir: &std::path::Path) -> Folders {
        Folders {
            state_dir: Some(dir.join("state")),
            record_dir: Some(dir.join("state")),
            config_dir: Some(dir.join("config")),
        }
    }
}

/// When root runs gputune through `sudo` (`sudo_uid`, sudo's `SUDO_UID`), the invoking user's
/// config folder (`~USER/.config/gputune`), so `sudo gputune profile apply Quiet` finds that
/// user's profile.
fn invoking_user_config(is_root: bool, sudo_uid: &str) -> Option<PathBuf> {
    if !is_root {
        return None;
    }
    let uid: u32 = sudo_uid.trim().parse().ok()?;
    if uid == 0 {
        return None;
    }
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()?;
    Some(user.dir.join(".config").join("gputune"))
}
