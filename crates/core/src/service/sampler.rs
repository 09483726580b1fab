//! The sampler thread: reads every GPU on its own driver handle at the interval the clients
//! ask for, and the settings back once a second, and hands both to the engine thread. It is
//! the only reader that may be slow: a driver that takes a second per call slows the readings,
//! never a trial's revert, which runs on the engine's own handle.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Input;
use crate::device::{Backend, Reopener};
use gputune_formats::card::{DeviceError, GpuProcess, Telemetry};

/// How often the settings are read back (to see changes made by other programs).
const SETTINGS_EVERY: Duration = Duration::from_secs(1);
/// How often the processes on each GPU are listed (two NVML calls and /proc per process):
/// they change slowly, and the samples in between carry the last list.
const PROCESSES_EVERY: Duration = Duration::from_secs(1);

/// The sampling interval the clients asked for, and a way to wake the sampler when it changes
/// or when it must stop: the sampler sleeps until its next sample instead of in short naps (an
/// idle daemon does not wake 20 times a second).
pub(crate) struct Pace {
    interval_ms: AtomicU64,
    stop: AtomicBool,
    /// Counts the changes, so a waiter knows whether it missed one.
    changes: Mutex<u64>,
    changed: Condvar,
}

impl Pace {
    pub fn new(interval_ms: u64) -> Arc<Pace> {
        Arc::new(Pace {
            interval_ms: AtomicU64::new(interval_ms),
            stop: AtomicBool::new(false),
            changes: Mutex::new(0),
            changed: Condvar::new(),
        })
    }

    /// A new interval: the sampler takes it at once (a faster one does not wait out the old).
    pub fn set_interval_ms(&self, interval_ms: u64) {
        if self.interval_ms.swap(interval_ms, Ordering::SeqCst) != interval_ms {
            self.wake();
        }
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms.load(Ordering::SeqCst).max(1))
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn wake(&self) {
        let mut changes = self
            .changes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *changes += 1;
        self.changed.notify_all();
    }

    /// Sleeps until `deadline`, a new interval, or a stop.
    fn sleep_until(&self, deadline: Instant) {
        let mut changes = self
            .changes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let seen = *changes;
        while !self.stopped() && *changes == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            changes = match self.changed.wait_timeout(changes, left) {
                Ok((changes, _)) => changes,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

pub(super) struct SamplerHandle {
    stop: Arc<AtomicBool>,
    pace: Arc<Pace>,
    thread: Option<JoinHandle<()>>,
    /// The thread that waits for critical errors (Xids), when the driver reports them.
    events: Option<JoinHandle<()>>,
}

impl SamplerHandle {
    /// Asks the threads to stop; waits briefly, never on a hung driver call.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.pace.stop();
        for thread in [self.thread.take(), self.events.take()]
            .into_iter()
            .flatten()
        {
            crate::join::join_within(thread, Duration::from_secs(2));
        }
    }
}

/// How long one wait for a critical error lasts before the watcher looks whether to stop.
const EVENT_WAIT_MS: u32 = 500;

/// Starts sampling `gpu_count` GPUs on a handle opened with `reopener`, and watching them for
/// critical errors on another.
pub(super) fn start(
    reopener: Reopener,
    gpu_count: u32,
    pace: Arc<Pace>,
    engine: Sender<Input>,
) -> SamplerHandle {
    let stop = Arc::new(AtomicBool::new(false));
    let events = watch_events(Arc::clone(&reopener), engine.clone(), Arc::clone(&stop));
    let sampler_pace = Arc::clone(&pace);
    let thread = std::thread::Builder::new()
        .name("gputune-sampler".to_string())
        .spawn(move || {
            let mut backend = match reopener() {
                Ok(backend) => backend,
                Err(error) => {
                    tracing::error!("the sampler could not open the GPUs: {error}");
                    return;
                }
            };
            run(backend.as_mut(), gpu_count, &sampler_pace, &engine);
        });
    match thread {
        Ok(thread) => SamplerHandle {
            stop,
            pace,
            thread: Some(thread),
            events,
        },
        Err(error) => {
            tracing::error!("the sampler thread could not start: {error}");
            SamplerHandle {
                stop,
                pace,
                thread: None,
                events,
            }
        }
    }
}

/// A thread that hands every critical error the driver reports to the engine.
fn watch_events(
    reopener: Reopener,
    engine: Sender<Input>,
    stop: Arc<AtomicBool>,
) -> Option<JoinHandle<()>> {
    let spawned = std::thread::Builder::new()
        .name("gputune-events".to_string())
        .spawn(move || {
            let mut backend = match reopener() {
                Ok(backend) => backend,
                Err(error) => {
                    tracing::warn!("GPU errors are not watched: {error}");
                    return;
                }
            };
            if let Err(error) = backend.watch_critical_events() {
                tracing::warn!("GPU errors are not watched: {error}");
                return;
            }
            while !stop.load(Ordering::SeqCst) {
                match backend.next_critical_event(EVENT_WAIT_MS) {
                    Ok(Some(event)) => {
                        if engine.send(Input::CriticalEvent(event)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!("GPU errors are no longer watched: {error}");
                        return;
                    }
                }
            }
        });
    spawned
        .map_err(|error| tracing::error!("the GPU error watcher could not start: {error}"))
        .ok()
}

fn run(backend: &mut dyn Backend, gpu_count: u32, pace: &Pace, engine: &Sender<Input>) {
    let mut next_settings = Instant::now();
    let mut next_sample = Instant::now();
    let mut processes = ProcessLists::default();
    while !pace.stopped() {
        let sampled_at = Instant::now();
        let refresh_processes = processes.due();
        let readings = (0..gpu_count)
            .map(|index| {
                let reading = backend.telemetry(index);
                processes.attach(backend, index, reading, refresh_processes)
            })
            .collect();
        if engine.send(Input::Samples(readings)).is_err() {
            return;
        }
        if Instant::now() >= next_settings {
            for gpu_index in 0..gpu_count {
                let read_started = Instant::now();
                if let Ok(current) = backend.current_settings(gpu_index) {
                    let sent = engine.send(Input::Settings {
                        gpu_index,
                        current,
                        read_started,
                    });
                    if sent.is_err() {
                        return;
                    }
                }
            }
            next_settings = Instant::now() + SETTINGS_EVERY;
        }
        // A fixed schedule, so a slow read does not shift every later sample; a new interval
        // counts from this sample.
        let interval = pace.interval();
        next_sample += interval;
        let now = Instant::now();
        if next_sample < now {
            next_sample = now;
        }
        while !pace.stopped() && Instant::now() < next_sample {
            pace.sleep_until(next_sample);
            let asked = sampled_at + pace.interval();
            if pace.interval() != interval && asked < next_sample {
                next_sample = asked.max(Instant::now());
            }
        }
    }
}

/// The last process list of each GPU, listed again every `PROCESSES_EVERY`.
#[derive(Default)]
struct ProcessLists {
    lists: Vec<Option<Vec<GpuProcess>>>,
    next_read: Option<Instant>,
}

impl ProcessLists {
    /// Whether this round of samples lists the processes again.
    fn due(&mut self) -> bool {
        let now = Instant::now();
        let due = self.next_read.is_none_or(|next| now >= next);
        if due {
            self.next_read = Some(now + PROCESSES_EVERY);
        }
        due
    }

    /// GPU `index`'s reading with its process list (read again when `refresh`). A GPU that
    /// failed to read is not asked for its processes.
    fn attach(
        &mut self,
        backend: &mut dyn Backend,
        index: u32,
        reading: Result<Telemetry, DeviceError>,
        refresh: bool,
    ) -> Result<Telemetry, DeviceError> {
        let mut reading = reading?;
        let slot = index as usize;
        if self.lists.len() <= slot {
            self.lists.resize(slot + 1, None);
        }
        if refresh {
            self.lists[slot] = backend.processes(index).unwrap_or_else(|error| {
                tracing::debug!("GPU {index}: processes not listed: {error}");
                None
            });
        }
        reading.processes = self.lists[slot].clone();
        Ok(reading)
    }
}
