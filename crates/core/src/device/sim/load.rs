//! What the simulated GPU is asked to do over time.

use serde::{Deserialize, Serialize};

/// A workload the simulator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LoadPattern {
    /// Nothing running: the card rests in P8.
    Idle,
    /// A steady training job: tensor cores busy all the time, the card sits at its power limit.
    #[default]
    Training,
    /// A training job whose data loader cannot keep up: 2.5 s busy, 1.5 s waiting for data.
    StopAndGo,
    /// A 4K game, lighter than training; used to calibrate against published game measurements.
    Game,
}

/// The load at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadPoint {
    /// Whether kernels are running right now.
    pub busy: bool,
    /// Switching activity relative to a typical game frame (1.0); scales dynamic power.
    pub activity: f64,
    /// Fraction of time a kernel ran (what NVML reports as GPU utilization).
    pub gpu_utilization: f64,
    /// Fraction of time the memory controller was busy.
    pub memory_utilization: f64,
}

/// Period of the stop-and-go pattern and how long of each period the GPU is busy.
const STOP_AND_GO_PERIOD_MS: u64 = 4_000;
const STOP_AND_GO_BUSY_MS: u64 = 2_500;

impl LoadPattern {
    /// The load at `time_ms`; `jitter` in [-1, 1] adds run-to-run variation like a real job's.
    pub fn at(self, time_ms: u64, jitter: f64) -> LoadPoint {
        let idle = LoadPoint {
            busy: false,
            activity: 0.0,
            gpu_utilization: 0.0,
            memory_utilization: 0.0,
        };
        let training = LoadPoint {
            busy: true,
            activity: 1.45 * (1.0 + 0.03 * jitter),
            gpu_utilization: (0.985 + 0.015 * jitter).min(1.0),
            memory_utilization: 0.35 + 0.05 * jitter,
        };
        match self {
            LoadPattern::Idle => idle,
            LoadPattern::Training => training,
            LoadPattern::StopAndGo => {
                if time_ms % STOP_AND_GO_PERIOD_MS < STOP_AND_GO_BUSY_MS {
                    training
                } else {
                    // The CUDA context is alive and a little work trickles in: clocks stay up.
                    LoadPoint {
                        activity: 0.06,
                        ..idle
                    }
                }
            }
            LoadPattern::Game => LoadPoint {
                busy: true,
                activity: 0.98 * (1.0 + 0.05 * jitter),
                gpu_utilization: (0.95 + 0.04 * jitter).min(1.0),
                memory_utilization: 0.6 + 0.05 * jitter,
            },
        }
    }
}
