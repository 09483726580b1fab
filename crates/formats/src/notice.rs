//! A notice's text and level, for a terminal's `gputune: warning: ...` and the window.

use crate::tuning::Notice;

impl Notice {
    pub fn text(&self) -> &str {
        match self {
            Notice::Info(text) | Notice::Warning(text) | Notice::Error(text) => text,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Notice::Error(_))
    }

    /// "notice", "warning" or "error", for a terminal's `gputune: warning: ...`.
    pub fn level_word(&self) -> &'static str {
        match self {
            Notice::Info(_) => "notice",
            Notice::Warning(_) => "warning",
            Notice::Error(_) => "error",
        }
    }
}

impl std::fmt::Display for Notice {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.text())
    }
}
