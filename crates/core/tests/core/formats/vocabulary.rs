//! Every name a closed set can take on the wire or on disk (session purposes, error kinds,
//! holds, device errors, trial phases, lock states, trends, fan modes, throttle reasons,
//! verdicts, ...): an old peer or file knows only these words, so a renamed variant must show.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use gputune_formats::card::{BackendKind, DeviceError, FanMode, ProcessKind};
use gputune_formats::profile::Verdict;
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::throttle::ThrottleReason;
use gputune_formats::tuning::{
    ClockLockInForce, EngineEvent, Hold, Notice, SessionPurpose, TemperatureTrend, TrialPhase,
    TuneErrorKind,
};

use super::{formats_dir, golden};

/// Each value as JSON, after checking it reads back to itself.
pub fn words<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(values: &[T]) -> Value {
    Value::Array(
        values
            .iter()
            .map(|value| {
                let json = match serde_json::to_value(value) {
                    Ok(json) => json,
                    Err(error) => panic!("{value:?} does not serialize: {error}"),
                };
                let back = serde_json::from_value::<T>(json.clone()).map_err(|e| e.to_string());
                assert_eq!(back.as_ref(), Ok(value), "{json}");
                json
            })
            .collect(),
    )
}

fn text(what: &str) -> String {
    what.to_string()
}

fn vocabulary() -> Value {
    let mut all = Map::new();
    all.insert(
        "session_purpose".into(),
        words(&[
            SessionPurpose::Trial,
            SessionPurpose::Run,
            SessionPurpose::FanCurve,
            SessionPurpose::KeptFanCurve,
            SessionPurpose::Sweep,
            SessionPurpose::Stability,
            SessionPurpose::Scan,
            SessionPurpose::BoxCheck,
            SessionPurpose::Job,
        ]),
    );
    all.insert(
        "tune_error_kind".into(),
        words(&[
            TuneErrorKind::Refused,
            TuneErrorKind::Held,
            TuneErrorKind::Permission,
            TuneErrorKind::Device,
            TuneErrorKind::NotFound,
            TuneErrorKind::NotAllowed,
            TuneErrorKind::State,
        ]),
    );
    all.insert("hold".into(), words(&Hold::ALL));
    all.insert(
        "device_error".into(),
        words(&[
            DeviceError::LibraryNotLoaded { detail: text("d") },
            DeviceError::DriverNotLoaded { detail: text("d") },
            DeviceError::NoGpus,
            DeviceError::GpuNotFound { query: text("q") },
            DeviceError::NoPermission { action: text("a") },
            DeviceError::NotSupported { what: text("w") },
            DeviceError::InvalidArgument { what: text("w") },
            DeviceError::GpuLost { index: 1 },
            DeviceError::Timeout {
                what: text("w"),
                waited_s: 5,
            },
            DeviceError::Other {
                what: text("w"),
                detail: text("d"),
            },
        ]),
    );
    all.insert(
        "trial_phase".into(),
        words(&[
            TrialPhase::Measuring { left_s: 1 },
            TrialPhase::Running { left_s: 2 },
            TrialPhase::Ended,
        ]),
    );
    all.insert(
        "clock_lock".into(),
        words(&[
            ClockLockInForce::Unlocked,
            ClockLockInForce::Locked {
                min_mhz: 1,
                max_mhz: 2,
            },
            ClockLockInForce::Unknown,
        ]),
    );
    all.insert(
        "temperature_trend".into(),
        words(&[
            TemperatureTrend::TooShort,
            TemperatureTrend::Settled,
            TemperatureTrend::Moving { c_per_min: -0.5 },
        ]),
    );
    all.insert(
        "fan_mode".into(),
        words(&[FanMode::Automatic, FanMode::Manual { speed_pct: 40 }]),
    );
    all.insert(
        "backend".into(),
        words(&[BackendKind::Nvml, BackendKind::Sim]),
    );
    all.insert(
        "process_kind".into(),
        words(&[
            ProcessKind::Compute,
            ProcessKind::Graphics,
            ProcessKind::ComputeAndGraphics,
        ]),
    );
    all.insert("throttle_reason".into(), words(&ThrottleReason::ALL));
    all.insert(
        "notice".into(),
        words(&[
            Notice::Info(text("i")),
            Notice::Warning(text("w")),
            Notice::Error(text("e")),
        ]),
    );
    all.insert(
        "verdict".into(),
        words(&[
            Verdict::Stable,
            Verdict::Unstable,
            Verdict::Stopped,
            Verdict::NotRun,
        ]),
    );
    Value::Object(all)
}

#[test]
fn every_word_of_every_closed_set_is_pinned() {
    let vocabulary = vocabulary();
    let mut bytes = serde_json::to_vec_pretty(&vocabulary).unwrap_or_default();
    bytes.push(b'\n');
    golden("vocabulary.json", &bytes);
    let read = std::fs::read(formats_dir().join("vocabulary.json"))
        .map_err(|error| error.to_string())
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string()));
    assert_eq!(read, Ok(vocabulary));
}

/// Never called: a variant added to any of these fails to compile here, which is the reminder
/// to add it to the vocabulary above (or to the messages in wire.rs) and bless the golden file.
#[allow(dead_code)]
fn every_variant_is_listed(
    (purpose, kind, error): (SessionPurpose, TuneErrorKind, DeviceError),
    (phase, lock, trend): (TrialPhase, ClockLockInForce, TemperatureTrend),
    (fan, backend, process): (FanMode, BackendKind, ProcessKind),
    (notice, verdict): (Notice, Verdict),
    (request, response, event, engine): (Request, Response, Event, EngineEvent),
) {
    use SessionPurpose as P;
    match purpose {
        P::Trial
        | P::Run
        | P::FanCurve
        | P::KeptFanCurve
        | P::Sweep
        | P::Stability
        | P::Scan
        | P::BoxCheck
        | P::Job => {}
    }
    use TuneErrorKind as K;
    match kind {
        K::Refused
        | K::Held
        | K::Permission
        | K::Device
        | K::NotFound
        | K::NotAllowed
        | K::State => {}
    }
    use DeviceError as D;
    match error {
        D::LibraryNotLoaded { .. }
        | D::DriverNotLoaded { .. }
        | D::NoGpus
        | D::GpuNotFound { .. }
        | D::NoPermission { .. }
        | D::NotSupported { .. }
        | D::InvalidArgument { .. }
        | D::GpuLost { .. }
        | D::Timeout { .. }
        | D::Other { .. } => {}
    }
    match phase {
        TrialPhase::Measuring { .. } | TrialPhase::Running { .. } | TrialPhase::Ended => {}
    }
    match lock {
        ClockLockInForce::Unlocked
        | ClockLockInForce::Locked { .. }
        | ClockLockInForce::Unknown => {}
    }
    use TemperatureTrend as T;
    match trend {
        T::TooShort | T::Settled | T::Moving { .. } => {}
    }
    match (fan, backend, process) {
        (FanMode::Automatic | FanMode::Manual { .. }, BackendKind::Nvml | BackendKind::Sim, _) => {}
    }
    match process {
        ProcessKind::Compute | ProcessKind::Graphics | ProcessKind::ComputeAndGraphics => {}
    }
    match notice {
        Notice::Info(_) | Notice::Warning(_) | Notice::Error(_) => {}
    }
    match verdict {
        Verdict::Stable | Verdict::Unstable | Verdict::Stopped | Verdict::NotRun => {}
    }
    use Request as Q;
    match request {
        Q::Hello { .. }
        | Q::Snapshot
        | Q::Subscribe { .. }
        | Q::Apply { .. }
        | Q::StartSession { .. }
        | Q::SessionApply { .. }
        | Q::EndSession { .. }
        | Q::SessionJob { .. }
        | Q::StartTrial { .. }
        | Q::StartGroupTrial { .. }
        | Q::FinishTrial { .. }
        | Q::FollowFanCurve { .. }
        | Q::SetFanCurve { .. }
        | Q::SetTemperatureHold { .. }
        | Q::SetBootDefault { .. }
        | Q::BootDefaults
        | Q::History { .. }
        | Q::Jobs { .. }
        | Q::Job { .. } => {}
    }
    use Response as R;
    match response {
        R::Welcome(_)
        | R::Snapshot(_)
        | R::Applied { .. }
        | R::SessionStarted(_)
        | R::SessionEnded { .. }
        | R::Trial { .. }
        | R::Trials { .. }
        | R::BootDefaults { .. }
        | R::History(_)
        | R::Jobs { .. }
        | R::Job { .. }
        | R::Done
        | R::Error { .. } => {}
    }
    match event {
        Event::Samples { .. } | Event::Engine { .. } => {}
    }
    use EngineEvent as E;
    match engine {
        E::Tuning { .. }
        | E::Trial { .. }
        | E::SessionEnded { .. }
        | E::Critical { .. }
        | E::Notice { .. } => {}
    }
}
