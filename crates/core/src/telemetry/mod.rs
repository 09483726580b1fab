//! Readings as data: history, decimation for plots, CSV and health hints. No threads, no
//! hardware: the device-owner threads are the tuning service's (`service`).

pub mod csv;
pub mod decimate;
pub mod health;
pub mod history;
pub mod store;
