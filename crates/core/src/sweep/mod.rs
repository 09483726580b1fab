//! Tuning against the user's own training job: step through power limits and clock caps while
//! the job runs, measure its throughput (from its own progress output, or a GPU-side proxy)
//! and its energy per unit of work at each setting, and recommend one. Everything is one
//! session of the tuning engine, so every ending puts the card back.

pub mod base;
pub mod measure;
pub mod objective;
pub mod report;
pub mod runner;
pub mod steps;
