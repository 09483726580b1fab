//! What the window knows about the GPUs: the connection, each GPU's identity, latest reading and
//! history. Fed only by events from the device-owner thread.

use crate::device::{BackendKind, DeviceError, Telemetry};
use crate::telemetry::history::GpuHistory;
use crate::telemetry::sampler::{Event, GpuInfo};

/// Where the connection to the GPUs stands.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Connection {
    /// The device-owner thread is still opening the backend.
    #[default]
    Connecting,
    Connected {
        backend: BackendKind,
        /// Why the simulator stands in for NVML, when it does.
        simulated_because: Option<String>,
    },
    Failed(String),
}

/// One GPU as the window knows it.
pub struct GpuModel {
    pub info: GpuInfo,
    /// The latest reading, or why it failed; `None` before the first sample.
    pub latest: Option<Result<Telemetry, DeviceError>>,
    pub history: GpuHistory,
    /// The last word from the device thread about tuning this GPU, and whether it is an error.
    pub tune_message: Option<(String, bool)>,
    /// The trial running on this GPU, or the last one that ended.
    pub trial: Option<crate::tuning::gui_trial::TrialStatus>,
    /// Settings the driver refused for lack of rights, which "Apply as administrator" can retry.
    pub needs_administrator: Option<Vec<crate::device::Setting>>,
}

/// Everything the panels show, built from sampler events.
pub struct Model {
    pub connection: Connection,
    pub gpus: Vec<GpuModel>,
    /// Samples each GPU's history keeps (24 h at 10 Hz by default).
    history_capacity: usize,
}

impl Default for Model {
    fn default() -> Model {
        Model::with_history_capacity(crate::telemetry::history::DAY_AT_10_HZ)
    }
}

impl Model {
    pub fn with_history_capacity(history_capacity: usize) -> Model {
        Model {
            connection: Connection::Connecting,
            gpus: Vec::new(),
            history_capacity,
        }
    }

    /// Takes in one event from the device-owner thread. `received_at_ms` (Unix ms) stamps a
    /// failed read, which has no timestamp of its own.
    pub fn apply(&mut self, event: Event, received_at_ms: u64) {
        match event {
            Event::Connected {
                backend,
                simulated_because,
                gpus,
            } => {
                self.connection = Connection::Connected {
                    backend,
                    simulated_because,
                };
                self.gpus = gpus
                    .into_iter()
                    .map(|info| GpuModel {
                        info,
                        latest: None,
                        history: GpuHistory::with_capacity(self.history_capacity),
                        tune_message: None,
                        trial: None,
                        needs_administrator: None,
                    })
                    .collect();
            }
            Event::Samples(samples) => {
                for (gpu, sample) in self.gpus.iter_mut().zip(samples) {
                    match &sample {
                        Ok(reading) => gpu.history.push(reading.sampled_at_ms, Some(reading)),
                        Err(_) => gpu.history.push(received_at_ms, None),
                    }
                    gpu.latest = Some(sample);
                }
            }
            Event::Failed(error) => self.connection = Connection::Failed(error.to_string()),
            Event::Applied(outcome) => {
                if let Some(gpu) = self.gpus.get_mut(outcome.gpu_index as usize) {
                    gpu.tune_message = Some((outcome.summary(), outcome.error.is_some()));
                    gpu.needs_administrator =
                        outcome.permission_denied.then(|| outcome.requested.clone());
                }
            }
            Event::Trial(status) => {
                if let Some(gpu) = self.gpus.get_mut(status.gpu_index as usize) {
                    gpu.trial = Some(*status);
                }
            }
            Event::TuneMessage {
                gpu_index,
                message,
                is_error,
            } => {
                if let Some(gpu) = self.gpus.get_mut(gpu_index as usize) {
                    gpu.tune_message = Some((message, is_error));
                }
            }
        }
    }

    /// The GPU with this NVML UUID, if present.
    pub fn index_of_uuid(&self, uuid: &str) -> Option<usize> {
        self.gpus
            .iter()
            .position(|gpu| gpu.info.identity.uuid == uuid)
    }
}
