//! Changing GPU settings safely. `limits` is the one gate every write passes.

pub mod control;
pub mod elevate;
pub mod fan_curve;
pub mod gui_trial;
pub mod journal;
pub mod limits;
pub mod request;
pub mod trial;
