//! Ranking the cards of a box (`gputune rank`, the window's Box view): the stability check's
//! checked GEMM at full load on each card at the same settings, one at a time (alone), then
//! all at once (together, as a data-parallel job loads them); each card's rate, clocks,
//! power, temperature and time throttled, set against the best, the cause named from the
//! evidence and a power limit that evens the box. docs/box.md, "Ranking the cards".
//!
//! options.rs  the phases' lengths, checked before anything runs
//! engine.rs   the ranking: refusals, a session on each card, the phases, the report
//! lane.rs     one card in it: its session, worker, run and figures (the check's own pieces)
//! watch.rs    one card's readings in one phase: clocks, power, temperature, throttle shares
//! verdict.rs  the ranking from the figures: against the best, the cause, the sentences
//! pace.rs     the box's pace (its slowest card's) and the faster cards' limits at it
//! remedy.rs   the power limit that keeps a hot card under its throttle temperature
//! drive.rs    the ranking driven to its end with a progress callback (CLI, window)

pub mod drive;
pub mod engine;
pub mod lane;
pub mod options;
pub mod pace;
pub mod remedy;
pub mod verdict;
pub mod watch;

pub use drive::rank_cards;
pub use engine::{RankProgress, RankTarget, Ranking};
pub use options::RankOptions;

#[cfg(test)]
mod tests;
