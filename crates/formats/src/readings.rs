//! A card's reading on the wire: `{"type":"ok","telemetry":{…}}` or
//! `{"type":"error","error":{"type":"gpu_lost",…}}`, internally tagged like every other value
//! with a kind (serde's own `Result` would be `{"Ok":…}`). Used through `#[serde(with)]`, so
//! the code keeps its `Result<Telemetry, DeviceError>`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::card::{DeviceError, Telemetry};

/// One reading as it is written.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ReadingOut<'a> {
    Ok { telemetry: &'a Telemetry },
    Error { error: &'a DeviceError },
}

/// One reading as it is read.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ReadingIn {
    Ok { telemetry: Box<Telemetry> },
    Error { error: DeviceError },
}

impl<'a> From<&'a Result<Telemetry, DeviceError>> for ReadingOut<'a> {
    fn from(reading: &'a Result<Telemetry, DeviceError>) -> ReadingOut<'a> {
        match reading {
            Ok(telemetry) => ReadingOut::Ok { telemetry },
            Err(error) => ReadingOut::Error { error },
        }
    }
}

impl From<ReadingIn> for Result<Telemetry, DeviceError> {
    fn from(reading: ReadingIn) -> Result<Telemetry, DeviceError> {
        match reading {
            ReadingIn::Ok { telemetry } => Ok(*telemetry),
            ReadingIn::Error { error } => Err(error),
        }
    }
}

/// `Vec<Result<Telemetry, DeviceError>>`: one reading per card (the samples event).
pub mod each {
    use super::*;

    pub fn serialize<S: Serializer>(
        readings: &[Result<Telemetry, DeviceError>],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(readings.iter().map(ReadingOut::from))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Result<Telemetry, DeviceError>>, D::Error> {
        let readings = Vec::<ReadingIn>::deserialize(deserializer)?;
        Ok(readings.into_iter().map(Into::into).collect())
    }
}

/// `Vec<Option<Result<Telemetry, DeviceError>>>`: each card's latest reading, `null` before
/// its first (the snapshot).
pub mod latest {
    use super::*;

    pub fn serialize<S: Serializer>(
        readings: &[Option<Result<Telemetry, DeviceError>>],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(
            readings
                .iter()
                .map(|reading| reading.as_ref().map(ReadingOut::from)),
        )
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Option<Result<Telemetry, DeviceError>>>, D::Error> {
        let readings = Vec::<Option<ReadingIn>>::deserialize(deserializer)?;
        Ok(readings
            .into_iter()
            .map(|reading| reading.map(Into::into))
            .collect())
    }
}
