//! Changing GPU settings safely: what a user asks for (`request`), fan curves, what a card
//! runs (`in_force`), the statistics of a trial, and the one engine that writes (`engine`),
//! with its state folder of locks, journals and records. Every write passes `device::gate`.

pub mod engine;
pub use crate::formats::fan_curve;
pub mod in_force;
pub mod lock_evidence;
pub mod request;
pub mod state_folder;
pub mod stats;

use crate::device::Setting;

/// "power limit 450 W, GPU clock reset".
pub fn describe_all(settings: &[Setting]) -> String {
    settings
        .iter()
        .map(Setting::describe)
        .collect::<Vec<_>>()
        .join(", ")
}
