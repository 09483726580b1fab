//! What clients ask the engine for: a session, a trial on one GPU or on several (the types are
//! formats, defined in `formats::tuning`), and the bounds the engine holds them to.

pub use crate::formats::tuning::{
    GpuFanCurve, GroupTrialRequest, SessionRequest, SessionStarted, TrialRequest,
};

/// The longest trial: a day. Longer is a setting to apply, not to try.
pub const LONGEST_TRIAL_S: u64 = 86_400;
/// The longest baseline a trial waits for.
pub const LONGEST_BASELINE_S: u64 = 600;
