//! Pieces shared by the panels.

pub mod banner;
pub mod time_axis;
