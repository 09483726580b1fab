//! A scheduler's job as the daemon records it when the job's session ends (`jobs/` in the
//! daemon's state folder, `gputune jobs`), and the electricity price and carbon intensity an
//! admin (`/etc/gputune/cost.toml`) or a user (their config folder's `cost.toml`) sets.

use serde::{Deserialize, Serialize};

use super::card::Setting;
use super::tuning::{JobInfo, SessionId, ThrottleTime};

/// The job record's `format_version`.
pub const JOB_RECORD_FORMAT: u32 = 1;
/// Joules in a kilowatt-hour.
pub const JOULES_PER_KWH: f64 = 3_600_000.0;

/// What one job did on one node's GPUs, from its session's start to its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRecord {
    pub format_version: u32,
    pub job: JobInfo,
    /// The node's host name.
    pub node: String,
    /// The daemon's session that held the job's cards.
    pub session: SessionId,
    /// Unix ms.
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    /// The session's ending sentence ("Put back", "gputune is stopping: put back", an Xid's).
    pub ended: String,
    pub gpus: Vec<JobGpu>,
    /// Every GPU's energy together.
    pub energy_j: f64,
    pub energy_kwh: f64,
    /// At least one GPU's energy is power times time, not its energy counter's.
    pub energy_estimated: bool,
    /// The cost and CO₂ at the daemon's price; `None` when the admin set none.
    pub cost: Option<JobCost>,
}

/// One GPU's part of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobGpu {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub name: String,
    /// The difference of NVML's energy counter between the session's start and its last
    /// reading; power times time where the card has no counter (`energy_estimated`).
    pub energy_j: f64,
    pub energy_kwh: f64,
    pub energy_estimated: bool,
    pub mean_power_w: Option<f64>,
    pub peak_power_w: Option<f64>,
    pub peak_temperature_c: Option<u32>,
    /// Seconds spent in each throttle reason that was seen at all.
    pub throttle: Vec<ThrottleTime>,
    /// The readings taken, and the first and last one's time (Unix ms).
    pub readings: u64,
    pub first_reading_ms: Option<u64>,
    pub last_reading_ms: Option<u64>,
    /// The settings the session held on the card when it ended.
    pub settings_held: Vec<Setting>,
}

/// A job's energy at a price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobCost {
    /// The price used, as the config file says it.
    pub price: CostConfig,
    /// Energy × price per kWh, in the price's currency.
    pub cost: Option<f64>,
    /// Energy × grams of CO₂ per kWh, in kilograms.
    pub co2_kg: Option<f64>,
    /// Whose price ("the daemon's /etc/gputune/cost.toml").
    pub from: String,
}

/// `cost.toml`: what a kWh costs and how much CO₂ it emits. Either may be left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostConfig {
    /// Price of one kWh, in `currency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_kwh: Option<f64>,
    /// How the price is written: a symbol put before the number ("€", "$", "£") or a code put
    /// after it ("EUR", "CHF").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// Grams of CO₂ per kWh of the grid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2_grams_per_kwh: Option<f64>,
}
