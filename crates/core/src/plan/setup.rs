//! How a model is trained: method, precision, optimizer, batch, parallelism and overheads.
//! The types are a format (`plan --json` prints them): they live in
//! `formats::reports::plan_setup`, and the planner names them from here.

pub use crate::formats::reports::plan_setup::{
    Allocator, Attention, Checkpointing, DEFAULT_CUDA_CONTEXT_MIB, Method, Offload, Optimizer,
    Overheads, Precision, Sharding, Task, TrainingSetup,
};
