//! Colours more than one panel uses, on the dark theme. A panel's own colours stay in its
//! file; a colour two panels share lives here, so no panel imports another for a constant.

use eframe::egui::Color32;

/// Text colour for errors.
pub const ERROR_TEXT: Color32 = Color32::from_rgb(0xff, 0x8a, 0x80);
/// Text colour for what is fine (a setting held, a check passed).
pub const GOOD_TEXT: Color32 = Color32::from_rgb(0x5c, 0xd6, 0x7a);
/// Text colour for what needs the user's eye but is not an error.
pub const WARNING_TEXT: Color32 = Color32::from_rgb(0xff, 0xc1, 0x4d);
