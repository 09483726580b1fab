//! Energy and cost per job: the running figures the engine keeps for each card of a
//! scheduler's job (`tally`), the records the daemon keeps when a job ends (`store`), and what
//! a kWh costs (`cost`). The record's format is `formats::jobs`.

pub mod cost;
pub mod store;
pub mod tally;
