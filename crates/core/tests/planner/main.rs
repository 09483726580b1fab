//! The planner's tests, one binary (each module is a former test file of the same name:
//! `cargo test -p gputune-core --test planner plan_accuracy`). Data in the repository's
//! tests/data/.

mod plan_accuracy;
mod plan_calibration;
mod plan_cuda;
mod plan_families;
mod plan_import_export;
mod plan_properties;
