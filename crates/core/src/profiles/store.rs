//! Where profiles live: one hand-editable TOML file per profile in `<config>/profiles/`
//! (`folders::Folders::config_dir`; `GPUTUNE_CONFIG_DIR` overrides it). Files are read with `fsafe` (a FIFO, a
//! device or a huge file is refused at once, never waited on) and written with
//! `fsafe::write_atomically` (an exclusive temporary file in the same folder, then a rename; a
//! link at the target is replaced, never followed). A file that does not read as a profile —
//! corrupt, truncated, from a newer gputune, hostile — is reported with its path (escaped) and
//! never overwritten, renamed or deleted; the other profiles still load. A file's text (TOML
//! to and from a `Profile`, every field checked) is `toml_text.rs`; reading and writing one file safely, `profile_file.rs`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::folders::{CONFIG_DIR_ENV, Folders};
use crate::fsafe;
use crate::profiles::profile::ProfileOnCard;
use crate::profiles::profile_file::{read_profile_file, write_profile_file};
use crate::profiles::toml_text::{MAX_FILE_BYTES, ParseProblem};
use crate::text;
use gputune_formats::profile::{Profile, SCHEMA_VERSION};

/// The folder inside the config folder that holds the profile files.
pub const PROFILES_FOLDER: &str = "profiles";
/// A profile file's extension.
pub const EXTENSION: &str = "toml";
/// The longest file-name stem made from a profile name.
const SLUG_MAX_CHARS: usize = 64;

/// Why a profile could not be found, read or written. Every message names the file (or, when
/// there is none, the folder and the name), escaped with `text::printable`: a file called
/// "\x1b[2J.toml" must not clear the terminal that shows the message.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "No config folder for profiles could be found: set {CONFIG_DIR_ENV} to a writable folder."
    )]
    NoConfigFolder,
    #[error(
        "The profile file {} could not be read ({}).",
        shown(path),
        text::printable(detail)
    )]
    Read { path: PathBuf, detail: String },
    #[error(
        "The profile file {} could not be written ({}).",
        shown(path),
        text::printable(detail)
    )]
    Write { path: PathBuf, detail: String },
    #[error(
        "The profile file {} is {kind}, not a regular file; it was not read and was left as it is.",
        shown(path)
    )]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "The profile file {} is damaged ({}); it was left as it is: fix it in an editor or delete it.",
        shown(path),
        text::printable(detail)
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "The profile file {} has schema version {found}, but this gputune reads version {SCHEMA_VERSION}; it was left as it is (a newer gputune wrote it).",
        shown(path)
    )]
    FutureVersion { path: PathBuf, found: i64 },
    #[error(
        "The profile file {} holds a value gputune will not use: {}; it was left as it is.",
        shown(path),
        text::printable(detail)
    )]
    Invalid { path: PathBuf, detail: String },
    #[error(
        "The profile file {} is {bytes} bytes, too large to be a profile (at most {MAX_FILE_BYTES}); it was left as it is.",
        shown(path)
    )]
    TooLarge { path: PathBuf, bytes: u64 },
    #[error(
        "No profile named \"{}\" in {} (see `gputune profile list`).",
        text::printable(name),
        shown(folder)
    )]
    NotFound { name: String, folder: PathBuf },
    #[error(
        "Several files in {} hold a profile named \"{}\": {}; rename or delete all but one.",
        shown(folder),
        text::printable(name),
        paths.iter().map(|path| shown(path)).collect::<Vec<_>>().join(", ")
    )]
    Ambiguous {
        name: String,
        folder: PathBuf,
        paths: Vec<PathBuf>,
    },
    #[error(
        "A profile named \"{}\" already exists ({}); delete or rename it first.",
        text::printable(name),
        shown(path)
    )]
    AlreadyExists { name: String, path: PathBuf },
    #[error(
        "The file {} exists and is not a gputune profile; it was not overwritten.",
        shown(path)
    )]
    WouldOverwrite { path: PathBuf },
    #[error(
        "The profile \"{}\" cannot be saved to {}: {}.",
        text::printable(name),
        shown(folder),
        text::printable(detail)
    )]
    InvalidProfile {
        name: String,
        folder: PathBuf,
        detail: String,
    },
}

/// A path as messages show it: control and bidirectional characters escaped.
fn shown(path: &Path) -> String {
    text::printable(&path.to_string_lossy())
}

/// A profile and the file it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredProfile {
    pub path: PathBuf,
    pub profile: Profile,
}

/// A file in the profiles folder that did not read as a profile; it is left untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadProblem {
    pub path: PathBuf,
    /// One sentence that names the file and says what is wrong.
    pub message: String,
}

/// The profiles folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileStore {
    folder: PathBuf,
}

impl ProfileStore {
    /// The profiles in the config folder `folders` names (`<config>/profiles`); under `sudo`,
    /// those of the user who ran it, not root's (`Folders::from_env`).
    pub fn open(folders: &Folders) -> Result<ProfileStore, StoreError> {
        let config = folders
            .config_dir
            .as_ref()
            .ok_or(StoreError::NoConfigFolder)?;
        Ok(ProfileStore::at(config.join(PROFILES_FOLDER)))
    }

    /// Profiles in `directory` itself (the folder that holds the `.toml` files). It is created
    /// on the first save.
    pub fn at(directory: PathBuf) -> ProfileStore {
        ProfileStore { folder: directory }
    }

    /// The folder that holds the profile files.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Every profile, sorted by name (then file), and every file that did not read as one.
    /// A missing folder is an empty store.
    pub fn list(&self) -> (Vec<StoredProfile>, Vec<LoadProblem>) {
        let mut profiles = Vec::new();
        let mut problems = Vec::new();
        let entries = match std::fs::read_dir(&self.folder) {
            Ok(entries) => entries,
            Err(error) if error.kind() == ErrorKind::NotFound => return (profiles, problems),
            Err(error) => {
                problems.push(LoadProblem {
                    path: self.folder.clone(),
                    message: format!(
                        "The profiles folder {} could not be read ({error}).",
                        shown(&self.folder)
                    ),
                });
                return (profiles, problems);
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| is_profile_file_name(path))
            .collect();
        paths.sort();
        for path in paths {
            match read_profile_file(&path) {
                Ok(profile) => profiles.push(StoredProfile { path, profile }),
                Err(error) => problems.push(LoadProblem {
                    message: error.to_string(),
                    path,
                }),
            }
        }
        profiles.sort_by(|a, b| {
            a.profile
                .name
                .to_lowercase()
                .cmp(&b.profile.name.to_lowercase())
                .then_with(|| a.profile.name.cmp(&b.profile.name))
                .then_with(|| a.path.cmp(&b.path))
        });
        (profiles, problems)
    }

    /// The profiles saved from the card with this UUID (and every problem file).
    pub fn for_card(&self, uuid: &str) -> (Vec<StoredProfile>, Vec<LoadProblem>) {
        let (mut profiles, problems) = self.list();
        profiles.retain(|stored| stored.profile.is_for(uuid));
        (profiles, problems)
    }

    /// The profile with this name (exactly, else the one whose name differs only in case, else
    /// the one whose file is `<name>.toml`).
    pub fn load(&self, name: &str) -> Result<StoredProfile, StoreError> {
        let (profiles, problems) = self.list();
        let exact: Vec<&StoredProfile> = profiles
            .iter()
            .filter(|stored| stored.profile.name == name)
            .collect();
        let candidates = if exact.is_empty() {
            let folded: Vec<&StoredProfile> = profiles
                .iter()
                .filter(|stored| stored.profile.name.to_lowercase() == name.to_lowercase())
                .collect();
            if folded.is_empty() {
                profiles
                    .iter()
                    .filter(|stored| {
                        stored.path.file_stem().and_then(|stem| stem.to_str()) == Some(name)
                    })
                    .collect()
            } else {
                folded
            }
        } else {
            exact
        };
        match candidates.as_slice() {
            [] => {
                // A file that would hold it but does not read says more than "not found".
                let wanted = [name.to_string(), slug(name)];
                let unreadable = problems.iter().find(|problem| {
                    problem
                        .path
                        .file_stem()
                        .and_then(|stem| stem.to_str())
                        .is_some_and(|stem| wanted.iter().any(|name| name == stem))
                });
                match unreadable.map(|problem| read_profile_file(&problem.path)) {
                    Some(Err(error)) => Err(error),
                    _ => Err(StoreError::NotFound {
                        name: name.to_string(),
                        folder: self.folder.clone(),
                    }),
                }
            }
            [one] => Ok((*one).clone()),
            several => Err(StoreError::Ambiguous {
                name: name.to_string(),
                folder: self.folder.clone(),
                paths: several.iter().map(|stored| stored.path.clone()).collect(),
            }),
        }
    }

    /// Saves `profile`: over the file that holds the profile of the same name, else to a new
    /// file named after it. Never overwrites a file that does not read as a profile.
    pub fn save(&self, profile: &Profile) -> Result<PathBuf, StoreError> {
        self.check_savable(profile)?;
        let path = match self.find_exact(&profile.name)? {
            Some(existing) => existing.path,
            None => self.free_path(&profile.name)?,
        };
        write_profile_file(&path, profile)?;
        Ok(path)
    }

    /// Deletes the profile's file.
    pub fn delete(&self, name: &str) -> Result<(), StoreError> {
        let stored = self.load(name)?;
        std::fs::remove_file(&stored.path).map_err(|error| StoreError::Write {
            path: stored.path.clone(),
            detail: format!("it could not be deleted: {error}"),
        })
    }

    /// Renames a profile (its name and its file).
    pub fn rename(&self, old: &str, new: &str) -> Result<(), StoreError> {
        let stored = self.load(old)?;
        if stored.profile.name == new {
            return Ok(());
        }
        if let Some(existing) = self.find_exact(new)? {
            return Err(StoreError::AlreadyExists {
                name: new.to_string(),
                path: existing.path,
            });
        }
        let renamed = Profile {
            name: new.to_string(),
            ..stored.profile.clone()
        };
        self.check_savable(&renamed)?;
        let wanted = self.folder.join(format!("{}.{EXTENSION}", slug(new)));
        if wanted == stored.path {
            // Same file name (only the case or punctuation changed): rewrite in place.
            return write_profile_file(&stored.path, &renamed);
        }
        let path = self.free_path(new)?;
        write_profile_file(&path, &renamed)?;
        std::fs::remove_file(&stored.path).map_err(|error| StoreError::Write {
            path: stored.path.clone(),
            detail: format!(
                "the profile was saved as {}, but the old file could not be removed: {error}",
                shown(&path)
            ),
        })
    }

    /// Copies a profile file from anywhere into the store, checked like any other; refused
    /// when a profile of that name exists. A default flag is dropped: the card's default is
    /// chosen here, with `set_default`.
    pub fn import(&self, path: &Path) -> Result<StoredProfile, StoreError> {
        let mut profile = read_profile_file(path)?;
        if let Some(existing) = self.find_exact(&profile.name)? {
            return Err(StoreError::AlreadyExists {
                name: profile.name,
                path: existing.path,
            });
        }
        profile.default_for_card = false;
        let saved = self.save(&profile)?;
        Ok(StoredProfile {
            path: saved,
            profile,
        })
    }

    /// Writes a copy of a profile to `path`. Overwrites a profile file there, nothing else.
    pub fn export(&self, name: &str, path: &Path) -> Result<(), StoreError> {
        let stored = self.load(name)?;
        // `write_profile_file` refuses to replace anything that is not a profile.
        write_profile_file(path, &stored.profile)
    }

    /// The stored profile named exactly `name`; an error only when several files hold it.
    fn find_exact(&self, name: &str) -> Result<Option<StoredProfile>, StoreError> {
        let (profiles, _) = self.list();
        let mut matching: Vec<StoredProfile> = profiles
            .into_iter()
            .filter(|stored| stored.profile.name == name)
            .collect();
        match matching.len() {
            0 => Ok(None),
            1 => Ok(matching.pop()),
            _ => Err(StoreError::Ambiguous {
                name: name.to_string(),
                folder: self.folder.clone(),
                paths: matching.into_iter().map(|stored| stored.path).collect(),
            }),
        }
    }

    fn check_savable(&self, profile: &Profile) -> Result<(), StoreError> {
        profile.check().map_err(|error| StoreError::InvalidProfile {
            name: profile.name.clone(),
            folder: self.folder.clone(),
            detail: error.to_string(),
        })
    }

    /// `<slug>.toml`, or `<slug>-2.toml`, ... when that file exists (whatever it holds).
    fn free_path(&self, name: &str) -> Result<PathBuf, StoreError> {
        let stem = slug(name);
        for number in 1..1000 {
            let file_name = if number == 1 {
                format!("{stem}.{EXTENSION}")
            } else {
                format!("{stem}-{number}.{EXTENSION}")
            };
            let path = self.folder.join(file_name);
            if !fsafe::occupied(&path) {
                return Ok(path);
            }
        }
        Err(StoreError::Write {
            path: self.folder.join(format!("{stem}.{EXTENSION}")),
            detail: "every file name for this profile is taken".to_string(),
        })
    }
}

/// A safe file-name stem for a profile name: lower-case ASCII letters, digits, `-` and `_`;
/// everything else becomes `-`. Never empty, never a hidden file, at most 64 characters.
pub fn slug(name: &str) -> String {
    let mut stem = String::new();
    for character in name.chars() {
        let kept = match character {
            'a'..='z' | '0'..='9' | '_' => character,
            'A'..='Z' => character.to_ascii_lowercase(),
            _ => '-',
        };
        if kept == '-' && (stem.is_empty() || stem.ends_with('-')) {
            continue;
        }
        stem.push(kept);
        if stem.len() >= SLUG_MAX_CHARS {
            break;
        }
    }
    let stem = stem.trim_end_matches('-');
    if stem.is_empty() {
        "profile".to_string()
    } else {
        stem.to_string()
    }
}

/// `*.toml`, not hidden (temporary files start with a dot). Whatever it is (a FIFO, a device,
/// a link to one, a folder) is then read with `fsafe`, which reports it rather than hanging.
fn is_profile_file_name(path: &Path) -> bool {
    let Some(file_name) = path.file_name().and_then(|name| name.to_str()) else {
        return false;
    };
    !file_name.starts_with('.')
        && path.extension().and_then(|extension| extension.to_str()) == Some(EXTENSION)
}

impl ParseProblem {
    /// The error for the file at `path`.
    pub fn at(self, path: &Path) -> StoreError {
        let path = path.to_path_buf();
        match self {
            ParseProblem::Corrupt(detail) => StoreError::Corrupt { path, detail },
            ParseProblem::FutureVersion(found) => StoreError::FutureVersion { path, found },
            ParseProblem::Invalid(detail) => StoreError::Invalid { path, detail },
        }
    }
}
