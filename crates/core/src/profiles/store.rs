//! Where profiles live: one hand-editable TOML file per profile in `<config>/profiles/`
//! (`folders::Folders::config_dir`; `GPUTUNE_CONFIG_DIR` overrides it). Files are read with `fsafe` (a FIFO, a
//! device or a huge file is refused at once, never waited on) and written with
//! `fsafe::write_atomically` (an exclusive temporary file in the same folder, then a rename; a
//! link at the target is replaced, never followed). A file that does not read as a profile —
//! corrupt, truncated, from a newer gputune, hostile — is reported with its path (escaped) and
//! never overwritten, renamed or deleted; the other profiles still load.

use crate::profiles::profile::ProfileOnCard;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::folders::{CONFIG_DIR_ENV, Folders};
use crate::fsafe::{self, FileError, Links};
use crate::text;
use gputune_formats::profile::{Profile, SCHEMA_VERSION};

/// The folder inside the config folder that holds the profile files.
pub const PROFILES_FOLDER: &str = "profiles";
/// A profile file's extension.
pub const EXTENSION: &str = "toml";
/// The largest profile file read. A real one is about a kilobyte; anything far bigger is not a
/// profile, and reading it whole would only cost memory.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;
/// The deepest nesting of tables and arrays a profile file may have (a real one has 2).
const MAX_NESTING: usize = 8;
/// The longest file-name stem made from a profile name.
const SLUG_MAX_CHARS: usize = 64;
/// The permissions of a new profile file (an existing file keeps its own).
const NEW_FILE_MODE: u32 = 0o644;

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

    /// Makes this profile its card's default (applied at boot) and clears the flag on every
    /// other profile of the same card.
    pub fn set_default(&self, name: &str) -> Result<(), StoreError> {
        let chosen = self.load(name)?;
        let (profiles, _) = self.for_card(&chosen.profile.card.uuid);
        for stored in profiles {
            let is_chosen = stored.path == chosen.path;
            if stored.profile.default_for_card != is_chosen {
                let updated = Profile {
                    default_for_card: is_chosen,
                    ..stored.profile.clone()
                };
                write_profile_file(&stored.path, &updated)?;
            }
        }
        Ok(())
    }

    /// The default profile of the card with this UUID, if one is marked (the first by name if a
    /// hand edit marked several).
    pub fn default_for(&self, uuid: &str) -> Option<StoredProfile> {
        let (profiles, _) = self.for_card(uuid);
        profiles
            .into_iter()
            .find(|stored| stored.profile.default_for_card)
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

/// Reads and checks one profile file. Any problem is an error naming the file; nothing here
/// writes. The file may be a symbolic link (its target is checked), but a FIFO, a device or a
/// folder is refused without being read or waited on, and a file over [`MAX_FILE_BYTES`] is
/// refused before it is read.
pub fn read_profile_file(path: &Path) -> Result<Profile, StoreError> {
    let content = fsafe::read_limited(path, MAX_FILE_BYTES, Links::Follow)
        .map_err(|error| read_failure(path, error))?;
    parse_profile(&content).map_err(|problem| problem.at(path))
}

/// The store's error for a file `fsafe` would not read.
fn read_failure(path: &Path, error: FileError) -> StoreError {
    let path = path.to_path_buf();
    match error {
        FileError::TooLarge { bytes, .. } => StoreError::TooLarge { path, bytes },
        FileError::NotRegular { kind, .. } => StoreError::NotRegular { path, kind },
        FileError::NotFound { .. } => StoreError::Read {
            path,
            detail: "it does not exist".to_string(),
        },
        FileError::Symlink { .. } => StoreError::Read {
            path,
            detail: "it is a symbolic link".to_string(),
        },
        FileError::Unsafe { reason: detail, .. }
        | FileError::Read { detail, .. }
        | FileError::Write { detail, .. } => StoreError::Read { path, detail },
    }
}

/// What is wrong with a profile's text, before it is tied to a file.
#[derive(Debug, Clone, PartialEq)]
pub enum ParseProblem {
    Corrupt(String),
    FutureVersion(i64),
    Invalid(String),
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

/// Parses a profile file's bytes: UTF-8, TOML, a known schema version, every field checked.
/// Never panics, whatever the bytes (a property test feeds it random and mutated files).
pub fn parse_profile(content: &[u8]) -> Result<Profile, ParseProblem> {
    if content.len() as u64 > MAX_FILE_BYTES {
        return Err(ParseProblem::Corrupt(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    let text = std::str::from_utf8(content)
        .map_err(|error| ParseProblem::Corrupt(format!("not UTF-8 text: {error}")))?;
    if nesting_depth(text) > MAX_NESTING {
        return Err(ParseProblem::Corrupt(format!(
            "tables or arrays nested deeper than {MAX_NESTING} levels"
        )));
    }
    let table: toml::Table = toml::from_str(text)
        .map_err(|error| ParseProblem::Corrupt(one_line(&error.to_string())))?;
    match table.get("schema_version") {
        None => {
            return Err(ParseProblem::Corrupt(
                "no schema_version: it is not a gputune profile".to_string(),
            ));
        }
        Some(toml::Value::Integer(version)) if *version > i64::from(SCHEMA_VERSION) => {
            return Err(ParseProblem::FutureVersion(*version));
        }
        Some(toml::Value::Integer(version)) if *version < 1 => {
            return Err(ParseProblem::Invalid(format!(
                "schema_version = {version} is not a version"
            )));
        }
        Some(toml::Value::Integer(_)) => {}
        Some(_) => {
            return Err(ParseProblem::Corrupt(
                "schema_version is not a whole number".to_string(),
            ));
        }
    }
    // Parsed again as a profile, so a wrong field's message has its line number.
    let profile: Profile = toml::from_str(text)
        .map_err(|error| ParseProblem::Corrupt(one_line(&error.to_string())))?;
    profile
        .check()
        .map_err(|error| ParseProblem::Invalid(error.to_string()))?;
    Ok(profile)
}

/// The profile as its file holds it: pretty TOML with a comment on top.
pub fn profile_to_toml(profile: &Profile) -> Result<String, String> {
    let mut body = toml::to_string_pretty(profile).map_err(|error| error.to_string())?;
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Ok(format!(
        "# gputune profile (hand edits are fine; `gputune profile show NAME` checks them).\n\
         # power_limit: watts on the card below, percent_of_default on any other card.\n\
         # Settings left out are left as they are when the profile is applied.\n\n{body}"
    ))
}

/// Writes a profile atomically with `fsafe::write_atomically`: an exclusively created temporary
/// file in the same folder (never a planted file or link), synced, then renamed over `path`. A
/// crash leaves the old file or the new one, never half of one; a symbolic link at `path` is
/// replaced, never written through. Whatever is at `path` must read as a profile, else it stays.
/// A new file gets mode 0644, a replaced one keeps its permissions.
fn write_profile_file(path: &Path, profile: &Profile) -> Result<(), StoreError> {
    let failed = |detail: String| StoreError::Write {
        path: path.to_path_buf(),
        detail,
    };
    if fsafe::occupied(path) {
        // The last guard: whatever the caller thought, a file that is not a profile stays
        // (a dangling link, a FIFO or a device included).
        if read_profile_file(path).is_err() {
            return Err(StoreError::WouldOverwrite {
                path: path.to_path_buf(),
            });
        }
    }
    let mode = std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map_or(NEW_FILE_MODE, |metadata| {
            metadata.permissions().mode() & 0o777
        });
    let text = profile_to_toml(profile).map_err(failed)?;
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(folder).map_err(|error| failed(error.to_string()))?;
    fsafe::write_atomically(path, text.as_bytes(), mode).map_err(|error| match error {
        FileError::Write { detail, .. } | FileError::Read { detail, .. } => failed(detail),
        other => failed(other.to_string()),
    })
}

/// The deepest nesting of `[` / `{` outside strings and comments. Deliberately simple (it
/// over-counts table headers like `[[a]]` by one): only a bound, checked before the parser
/// recurses.
fn nesting_depth(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'#' => {
                while index < bytes.len() && bytes[index] != b'\n' {
                    index += 1;
                }
            }
            quote @ (b'"' | b'\'') => {
                let triple = bytes.get(index..index + 3) == Some(&[quote, quote, quote][..]);
                index += if triple { 3 } else { 1 };
                while index < bytes.len() {
                    if quote == b'"' && bytes[index] == b'\\' {
                        index += 2;
                        continue;
                    }
                    if triple {
                        if bytes.get(index..index + 3) == Some(&[quote, quote, quote][..]) {
                            index += 2;
                            break;
                        }
                    } else if bytes[index] == quote || bytes[index] == b'\n' {
                        break;
                    }
                    index += 1;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        index += 1;
    }
    deepest
}

/// The TOML parser's message on one line (it draws the offending line with carets).
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !is_source_echo(line))
        .collect();
    // The parser quotes the file (keys, values): escape what a terminal would act on.
    let joined = text::printable(&lines.join("; "));
    if joined.chars().count() > 300 {
        let cut: String = joined.chars().take(300).collect();
        format!("{cut}...")
    } else {
        joined
    }
}

/// "|", "3 | [card", "  |      ^": the parser's picture of the line, not its message.
fn is_source_echo(line: &str) -> bool {
    let after_number = line.trim_start_matches(|character: char| character.is_ascii_digit());
    after_number.trim_start().starts_with('|')
}
