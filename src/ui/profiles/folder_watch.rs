//! Glue, beside actions.rs: notices profiles that another program (`gputune profile save`,
//! `scan --save-profile`, an editor) saved, changed or removed while the window runs. It
//! reads only the folder's entries (name, size, modification time) when the Profiles tab
//! comes into view and every few seconds while it stays there, and reads the profiles again
//! only when those changed. The panel never touches files.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use crate::ui::profiles::ProfilesPanel;
use gputune_core::folders::Folders;
use gputune_core::profiles::store::ProfileStore;

/// How often the folder is looked at while the Profiles tab is shown.
pub const LOOK_EVERY: Duration = Duration::from_secs(3);

/// One entry of the folder as last seen.
type Entry = (OsString, u64, Option<SystemTime>);

/// The profile folder as last seen, and when.
pub struct ProfileFolderWatch {
    /// `None` when no config folder could be found (the tab says so on its own).
    folder: Option<PathBuf>,
    seen: Option<Vec<Entry>>,
    looked_at: Option<Instant>,
    shown_before: bool,
}

impl ProfileFolderWatch {
    /// Watches the profile folder of `folders` (not looked at yet).
    pub fn new(folders: &Folders) -> ProfileFolderWatch {
        ProfileFolderWatch {
            folder: ProfileStore::open(folders)
                .ok()
                .map(|store| store.folder().to_path_buf()),
            seen: None,
            looked_at: None,
            shown_before: false,
        }
    }

    /// Whether the folder's entries differ from the last look. It looks only when the tab
    /// `shown` has just come into view or [`LOOK_EVERY`] has passed since the last look.
    pub fn changed(&mut self, shown: bool, now: Instant) -> bool {
        let just_shown = shown && !self.shown_before;
        self.shown_before = shown;
        let due = self
            .looked_at
            .is_none_or(|looked_at| now.saturating_duration_since(looked_at) >= LOOK_EVERY);
        let Some(folder) = self
            .folder
            .as_ref()
            .filter(|_| just_shown || (shown && due))
        else {
            return false;
        };
        self.looked_at = Some(now);
        let entries = entries(folder);
        let changed = self.seen.as_ref() != Some(&entries);
        self.seen = Some(entries);
        changed
    }

    /// Reads the profiles into `panel` again when the folder changed (see [`Self::changed`]);
    /// true when it did.
    pub fn reload_if_changed(
        &mut self,
        panel: &mut ProfilesPanel,
        shown: bool,
        now: Instant,
    ) -> bool {
        if !self.changed(shown, now) {
            return false;
        }
        let Some(folder) = &self.folder else {
            return false;
        };
        let (profiles, problems) = ProfileStore::at(folder.clone()).list();
        panel.profiles = profiles;
        panel.problems = problems;
        true
    }
}

/// The folder's entries, sorted by name; none when it is missing or cannot be read (the
/// store's own listing says why).
fn entries(folder: &std::path::Path) -> Vec<Entry> {
    let Ok(read) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut entries: Vec<Entry> = read
        .filter_map(Result::ok)
        .map(|entry| {
            let metadata = entry.metadata().ok();
            (
                entry.file_name(),
                metadata.as_ref().map_or(0, std::fs::Metadata::len),
                metadata.and_then(|metadata| metadata.modified().ok()),
            )
        })
        .collect();
    entries.sort();
    entries
}
