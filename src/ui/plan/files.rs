//! The Plan tab's file work, which the app glue (`GpuTuneApp`) does when the panel asks
//! (`PlanAction::OpenModelFile`, `PlanAction::LoadModelPath`): the panel never touches files.
//! Loading reads at most a config.json and safetensors headers (`plan::import`, kilobytes),
//! so it runs on the UI thread like the file dialog itself.

use std::path::{Path, PathBuf};

use super::PlanPanel;

/// What the tab says when the file dialog gave no file: a cancelled dialog, or none opened.
pub const NO_FILE_CHOSEN: &str = "No file was chosen. If no file dialog opened, this desktop has no file chooser gputune can use (an XDG desktop portal, or zenity): type or paste the path in the field below and press Load.";

/// What the export buttons say when the save dialog gave no file.
pub const NOT_SAVED: &str = "Not saved: no file was chosen. If no file dialog opened, this desktop has no file chooser gputune can use (an XDG desktop portal, or zenity): write the file with gputune plan --export FILE --format FORMAT and the same options instead.";

/// Takes the file dialog's answer: loads the file it picked, or says that none was chosen and
/// how to give the path instead.
pub fn model_file_picked(plan: &mut PlanPanel, picked: Option<PathBuf>) {
    match picked {
        Some(path) => load(plan, &path),
        None => plan.model_message = Some(NO_FILE_CHOSEN.to_string()),
    }
}

/// Loads the model at the path typed or pasted in the tab's field.
pub fn load_typed_model_path(plan: &mut PlanPanel, typed: &str) {
    match typed_path(typed) {
        Some(path) => load(plan, &path),
        None => {
            plan.model_message = Some("Type or paste the path of the model's config.json, one of its .safetensors files or its folder, then press Load.".to_string());
        }
    }
}

fn load(plan: &mut PlanPanel, path: &Path) {
    match gputune_core::plan::import::load_model(path) {
        Ok(model) => {
            plan.model = model;
            plan.model_message = None;
            plan.model_path = path.display().to_string();
            plan.match_fields_to_model();
        }
        Err(error) => plan.model_message = Some(error.to_string()),
    }
}

/// A path as people paste it: surrounding spaces and quotes dropped, a `file://` URI (what
/// file managers copy) decoded, `~` for the home folder. `None` when nothing is left.
pub fn typed_path(typed: &str) -> Option<PathBuf> {
    let mut text = typed.trim();
    for quote in ['"', '\''] {
        if text.len() >= 2 && text.starts_with(quote) && text.ends_with(quote) {
            text = text[1..text.len() - 1].trim();
        }
    }
    if text.is_empty() {
        return None;
    }
    if let Some(uri_path) = text.strip_prefix("file://") {
        // file:///home/you/x: the host part is empty (or localhost) on a local file.
        let uri_path = uri_path.strip_prefix("localhost").unwrap_or(uri_path);
        return Some(PathBuf::from(percent_decoded(uri_path)));
    }
    if (text == "~" || text.starts_with("~/"))
        && let Some(home) = std::env::var_os("HOME").filter(|home| !home.is_empty())
    {
        return Some(PathBuf::from(home).join(text[1..].trim_start_matches('/')));
    }
    Some(PathBuf::from(text))
}

/// `%20` and the like decoded; a malformed escape is kept as it is.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escape = (bytes[index] == b'%')
            .then(|| bytes.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escape {
            Some(byte) => {
                decoded.push(byte);
                index += 3;
            }
            None => {
                decoded.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pasted_paths_are_cleaned_up() {
        assert_eq!(typed_path("  \t"), None);
        assert_eq!(typed_path("''"), None);
        assert_eq!(
            typed_path(" '/models/my model/config.json' "),
            Some(PathBuf::from("/models/my model/config.json"))
        );
        assert_eq!(
            typed_path("file:///models/my%20model/config.json"),
            Some(PathBuf::from("/models/my model/config.json"))
        );
        assert_eq!(
            typed_path("file://localhost/a%2"),
            Some(PathBuf::from("/a%2"))
        );
        assert_eq!(
            typed_path("relative/config.json"),
            Some(PathBuf::from("relative/config.json"))
        );
    }
}
