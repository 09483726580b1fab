//! Changing GPU settings safely. `limits` is the one gate every write passes.

pub mod limits;
