//! Tuning against the user's own training job: step through power limits and clock caps while
//! the job runs, measure its throughput (from its own progress output, or a GPU-side proxy)
//! and its energy per unit of work at each setting, and recommend one. Everything is one
//! session of the tuning engine, so every ending puts the card back. A data-parallel job's
//! cards are swept together: each step held on every card in the one session, the box's
//! energy summed (`cards`), and a card that needs its own setting named (`advice`).

pub mod advice;
pub mod base;
pub mod cards;
pub mod measure;
pub mod objective;
pub mod profile;
pub mod report;
mod report_cards;
pub mod runner;
pub mod steps;
