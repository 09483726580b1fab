//! Changing GPU settings safely. Every write passes `device::gate`.

pub mod control;
pub mod elevate;
pub mod fan_curve;
pub mod gui_trial;
pub mod in_force;
pub mod journal;
pub mod request;
pub mod state_folder;
pub mod trial;
