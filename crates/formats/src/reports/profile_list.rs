//! `gputune profile list --json`: every profile in the user's folder, and the files that could
//! not be read.

use serde::Serialize;

use crate::profile::Profile;

/// The profile list's `format_version`.
pub const PROFILE_LIST_FORMAT: u32 = 1;

/// The whole of `profile list --json`.
#[derive(Debug, Serialize)]
pub struct ProfileList<'a> {
    pub format_version: u32,
    /// The folder the profiles were read from.
    pub folder: String,
    pub profiles: Vec<ListedProfile<'a>>,
    pub problems: Vec<ListedProblem>,
}

/// One profile: its file, then the profile's own fields as the file holds them.
#[derive(Debug, Serialize)]
pub struct ListedProfile<'a> {
    pub path: String,
    #[serde(flatten)]
    pub profile: &'a Profile,
}

/// A file in the folder that is not a readable profile, and why.
#[derive(Debug, Serialize)]
pub struct ListedProblem {
    pub path: String,
    pub message: String,
}
