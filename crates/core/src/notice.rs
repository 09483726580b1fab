//! A message for the user about something that happened (a profile clamped to a card, a
//! setting restored, the fan safety net engaged), with how much it matters.

use serde::{Deserialize, Serialize};

/// One sentence for the user, and whether it is news, a warning or an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "level", content = "text", rename_all = "snake_case")]
pub enum Notice {
    Info(String),
    Warning(String),
    Error(String),
}

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
