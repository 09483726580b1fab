//! Pieces shared by the panels.

pub mod banner;
pub mod change_marks;
pub mod gpu_switcher;
pub mod labelled;
pub mod processes;
pub mod throttle_strip;
pub mod time_axis;
pub mod time_plot;
