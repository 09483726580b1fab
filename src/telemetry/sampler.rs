//! The device-owner thread: the only thread that talks to the GPU backend. It opens the
//! backend, samples every GPU on a tick and sends `Event`s; the UI never waits on hardware.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::device::{
    Backend, BackendKind, BackendOptions, Constraints, DeviceError, GpuIdentity, Telemetry,
    open_backend,
};
use crate::tuning::control::{ApplyOutcome, Controller, TuneCommand};
use crate::tuning::gui_trial::TrialStatus;

/// Default time between samples.
pub const DEFAULT_INTERVAL_MS: u64 = 500;
/// The sampling interval a user may choose, inclusive.
pub const INTERVAL_RANGE_MS: (u64, u64) = (100, 5_000);

/// A GPU as found when the backend opened.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    pub identity: GpuIdentity,
    pub constraints: Constraints,
}

/// What the device-owner thread reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The backend is open and these are its GPUs.
    Connected {
        backend: BackendKind,
        /// Why the simulator stands in for NVML, when it does.
        simulated_because: Option<String>,
        gpus: Vec<GpuInfo>,
    },
    /// One reading per GPU, in index order; a GPU that failed to read carries its error.
    Samples(Vec<Result<Telemetry, DeviceError>>),
    /// The backend could not be opened at all (only with `--backend nvml`).
    Failed(DeviceError),
    /// What an `Apply` did.
    Applied(ApplyOutcome),
    /// Where a trial stands (every sample while it runs, and once as it ends).
    Trial(Box<TrialStatus>),
    /// A message about tuning for one GPU (a fan curve started or failed).
    TuneMessage {
        gpu_index: u32,
        message: String,
        is_error: bool,
    },
}

/// What the UI asks of the device-owner thread.
#[derive(Debug, Clone, PartialEq)]
pub enum SamplerCommand {
    SetInterval { interval_ms: u64 },
    Tune(TuneCommand),
}

/// The UI's end of the device-owner thread. Dropping it stops the thread.
pub struct Sampler {
    commands: Option<Sender<SamplerCommand>>,
    events: Receiver<Event>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts the thread. `notify` runs after every event is sent (the UI passes
    /// `egui::Context::request_repaint`, so it repaints when data arrives, not on a timer).
    pub fn spawn(
        options: BackendOptions,
        interval_ms: u64,
        notify: impl Fn() + Send + 'static,
    ) -> Result<Sampler, std::io::Error> {
        let (command_sender, command_receiver) = mpsc::channel();
        let (event_sender, event_receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("gputune-device".to_string())
            .spawn(move || {
                let send = |event: Event| {
                    let delivered = event_sender.send(event).is_ok();
                    notify();
                    delivered
                };
                match open_backend(&options) {
                    Ok(opened) => run(
                        opened.backend,
                        opened.fallback_reason,
                        interval_ms,
                        &command_receiver,
                        &send,
                    ),
                    Err(error) => {
                        send(Event::Failed(error));
                    }
                }
            })?;
        Ok(Sampler {
            commands: Some(command_sender),
            events: event_receiver,
            thread: Some(thread),
        })
    }

    /// Events that arrived since the last call, oldest first; never blocks.
    pub fn drain_events(&self) -> Vec<Event> {
        self.events.try_iter().collect()
    }

    pub fn send(&self, command: SamplerCommand) {
        if let Some(commands) = &self.commands {
            // A closed channel means the thread ended; its last event already said why.
            let _ = commands.send(command);
        }
    }
}

/// How long closing the window waits for the device-owner thread to finish its current call.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Drop for Sampler {
    fn drop(&mut self) {
        // Closing the channel tells the thread to stop; it notices within one tick.
        self.commands = None;
        let Some(thread) = self.thread.take() else {
            return;
        };
        let deadline = std::time::Instant::now() + STOP_WAIT;
        while !thread.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            // A hung driver call must not hang the window's exit; the thread ends with the process.
            tracing::warn!("the device thread is stuck in a driver call; not waiting for it");
        }
    }
}

fn run(
    mut backend: Box<dyn Backend>,
    simulated_because: Option<String>,
    interval_ms: u64,
    commands: &Receiver<SamplerCommand>,
    send: &dyn Fn(Event) -> bool,
) {
    let connected = match connected_event(backend.as_mut(), simulated_because) {
        Ok(connected) => connected,
        Err(error) => {
            send(Event::Failed(error));
            return;
        }
    };
    let gpu_count = match &connected {
        Event::Connected { gpus, .. } => gpus.len(),
        _ => 0,
    };
    let constraints = match &connected {
        Event::Connected { gpus, .. } => gpus.iter().map(|gpu| gpu.constraints.clone()).collect(),
        _ => Vec::new(),
    };
    if !send(connected) {
        return;
    }
    let mut controller = Controller::new(constraints);
    // Whatever ends the loop (the window closing, or a panic in it), fans a curve was driving go
    // back to the driver.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sample_and_serve(
            backend.as_mut(),
            &mut controller,
            gpu_count,
            interval_ms,
            commands,
            send,
        );
    }));
    controller.release(backend.as_mut());
    if outcome.is_err() {
        tracing::error!(
            "the device thread stopped after a panic; fans were handed back to the driver"
        );
    }
}

fn sample_and_serve(
    backend: &mut dyn Backend,
    controller: &mut Controller,
    gpu_count: usize,
    mut interval_ms: u64,
    commands: &Receiver<SamplerCommand>,
    send: &dyn Fn(Event) -> bool,
) {
    loop {
        let samples = samples_event(backend, gpu_count);
        if let Event::Samples(readings) = &samples {
            if let Some(status) = controller.observe_trial(backend, readings) {
                send(Event::Trial(Box::new(status)));
            }
            for (gpu_index, error) in controller.drive_fans(backend, readings) {
                send(Event::TuneMessage {
                    gpu_index,
                    message: format!("The fan curve could not set the fans: {error}"),
                    is_error: true,
                });
            }
        }
        if !send(samples) {
            return;
        }
        match commands.recv_timeout(Duration::from_millis(interval_ms)) {
            Ok(SamplerCommand::SetInterval {
                interval_ms: requested,
            }) => {
                interval_ms = requested.clamp(INTERVAL_RANGE_MS.0, INTERVAL_RANGE_MS.1);
            }
            Ok(SamplerCommand::Tune(TuneCommand::Apply {
                gpu_index,
                settings,
            })) => {
                send(Event::Applied(
                    controller.apply(backend, gpu_index, &settings),
                ));
            }
            Ok(SamplerCommand::Tune(TuneCommand::SetFanCurve { gpu_index, curve })) => {
                let following = curve.is_some();
                let (message, is_error) = match controller.set_fan_curve(backend, gpu_index, curve)
                {
                    Ok(()) if following => ("The fans follow the curve.".to_string(), false),
                    Ok(()) => (
                        "The fans are back under the driver's control.".to_string(),
                        false,
                    ),
                    Err(error) => (error, true),
                };
                send(Event::TuneMessage {
                    gpu_index,
                    message,
                    is_error,
                });
            }
            Ok(SamplerCommand::Tune(TuneCommand::StartTrial {
                gpu_index,
                settings,
                duration_s,
            })) => {
                let status = controller.start_trial(backend, gpu_index, &settings, duration_s);
                send(Event::Trial(Box::new(status)));
            }
            Ok(SamplerCommand::Tune(TuneCommand::KeepTrial)) => {
                send(Event::Trial(Box::new(
                    controller.finish_trial(backend, true),
                )));
            }
            Ok(SamplerCommand::Tune(TuneCommand::RevertTrial)) => {
                send(Event::Trial(Box::new(
                    controller.finish_trial(backend, false),
                )));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The `Connected` event for an opened backend: its kind and every GPU's identity and limits.
pub fn connected_event(
    backend: &mut dyn Backend,
    simulated_because: Option<String>,
) -> Result<Event, DeviceError> {
    let gpus = (0..backend.gpu_count()?)
        .map(|index| {
            Ok(GpuInfo {
                identity: backend.identity(index)?,
                constraints: backend.constraints(index)?,
            })
        })
        .collect::<Result<Vec<_>, DeviceError>>()?;
    Ok(Event::Connected {
        backend: backend.kind(),
        simulated_because,
        gpus,
    })
}

/// One `Samples` event: a reading (or its error) from each of the first `gpu_count` GPUs.
pub fn samples_event(backend: &mut dyn Backend, gpu_count: usize) -> Event {
    Event::Samples(
        (0..gpu_count as u32)
            .map(|index| backend.telemetry(index))
            .collect(),
    )
}
