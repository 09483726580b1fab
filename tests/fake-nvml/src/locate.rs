//! Finding the built fake library from a test binary.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The newest built `libnvidia_ml_fake*.so` next to the running executable (`target/<profile>/deps`
/// for a test binary) or in its parent folder (`target/<profile>`); `None` if there is none.
pub fn fake_library_path() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [Some(deps), deps.parent()]
        .into_iter()
        .flatten()
        .flat_map(candidates)
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, path)| path)
}

/// The fake libraries in `folder`, with when each was last built.
fn candidates(folder: &Path) -> Vec<(SystemTime, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libnvidia_ml_fake") && name.ends_with(".so")
        })
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            metadata.is_file().then_some(())?;
            Some((metadata.modified().ok()?, entry.path()))
        })
        .collect()
}
