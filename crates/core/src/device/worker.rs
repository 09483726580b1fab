//! A backend on its own thread, so that nobody waits on the driver longer than they chose to.
//! Every call has a deadline; a call past it is reported as `DeviceError::Timeout` and the
//! worker moves to a fresh thread with a fresh handle (the stuck thread ends by itself when
//! the driver finally answers). So a hung driver call never holds a trial's setting past its
//! time: the revert runs on the new thread, or the timeout is reported loudly.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::Duration;

use super::{Backend, Reopener};
use gputune_formats::card::{BackendKind, DeviceError};

/// How many threads may be stuck in the driver at once before the worker stops making new
/// ones: past that the driver has stopped answering, and more threads would only pile up.
const MAX_STUCK_THREADS: usize = 4;

/// Environment variable: the deadline of one write or settings read, milliseconds.
pub const DRIVER_TIMEOUT_ENV: &str = "GPUTUNE_DRIVER_TIMEOUT_MS";
/// The deadline of one driver call when `GPUTUNE_DRIVER_TIMEOUT_MS` is not set. NVML answers
/// in milliseconds; ten seconds is a driver in trouble.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The call deadline: `GPUTUNE_DRIVER_TIMEOUT_MS` (100 ms to 10 minutes), else the default.
pub fn call_timeout_from_env() -> Duration {
    std::env::var(DRIVER_TIMEOUT_ENV)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(|milliseconds| Duration::from_millis(milliseconds.clamp(100, 600_000)))
        .unwrap_or(DEFAULT_CALL_TIMEOUT)
}

/// The backend a worker thread holds: opened again from the reopener when the thread is new.
struct BackendSlot {
    backend: Option<Box<dyn Backend>>,
    reopener: Reopener,
}

impl BackendSlot {
    fn backend(&mut self) -> Result<&mut dyn Backend, DeviceError> {
        if self.backend.is_none() {
            self.backend = Some((self.reopener)()?);
        }
        match self.backend.as_deref_mut() {
            Some(backend) => Ok(backend),
            None => Err(DeviceError::Other {
                what: "Opening the GPUs again".to_string(),
                detail: "no handle".to_string(),
            }),
        }
    }
}

type Job = Box<dyn FnOnce(&mut BackendSlot) + Send>;

/// One thread that talks to the driver; see the module documentation.
pub struct DeviceWorker {
    kind: BackendKind,
    reopener: Reopener,
    jobs: Option<Sender<Job>>,
    /// Threads still inside a driver call that timed out.
    stuck_threads: Arc<AtomicUsize>,
    name: String,
}

impl DeviceWorker {
    /// Moves `backend` onto a new thread named `name`.
    pub fn start(backend: Box<dyn Backend>, name: &str) -> DeviceWorker {
        let mut worker = DeviceWorker {
            kind: backend.kind(),
            reopener: backend.reopener(),
            jobs: None,
            stuck_threads: Arc::new(AtomicUsize::new(0)),
            name: name.to_string(),
        };
        worker.jobs = worker.spawn(Some(backend)).ok();
        worker
    }

    /// Which backend the worker talks to.
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// How to open another handle to the same GPUs.
    pub fn reopener(&self) -> Reopener {
        Arc::clone(&self.reopener)
    }

    /// Runs `job` on the worker's thread and waits at most `timeout` for it. `what` names the
    /// work in the timeout's message ("setting the power limit on GPU 0").
    pub fn call<R: Send + 'static>(
        &mut self,
        what: &str,
        timeout: Duration,
        job: impl FnOnce(&mut dyn Backend) -> Result<R, DeviceError> + Send + 'static,
    ) -> Result<R, DeviceError> {
        self.call_noticing(what, timeout, timeout, &mut || {}, job)
    }

    /// Like [`DeviceWorker::call`], and calls `slow` once if the answer takes longer than
    /// `slow_after` (so a command can say it is waiting instead of sitting silent).
    pub fn call_noticing<R: Send + 'static>(
        &mut self,
        what: &str,
        timeout: Duration,
        slow_after: Duration,
        slow: &mut dyn FnMut(),
        job: impl FnOnce(&mut dyn Backend) -> Result<R, DeviceError> + Send + 'static,
    ) -> Result<R, DeviceError> {
        let jobs = match &self.jobs {
            Some(jobs) => jobs.clone(),
            None => {
                let jobs = self.spawn(None)?;
                self.jobs = Some(jobs.clone());
                jobs
            }
        };
        let (reply, answer) = mpsc::channel();
        let sent = jobs.send(Box::new(move |slot: &mut BackendSlot| {
            let result = slot.backend().and_then(job);
            // Nobody listens any more when the caller timed out.
            let _ = reply.send(result);
        }));
        if sent.is_err() {
            self.jobs = None;
            return Err(stopped(what));
        }
        let first_wait = slow_after.min(timeout);
        let answered = match answer.recv_timeout(first_wait) {
            Err(RecvTimeoutError::Timeout) if first_wait < timeout => {
                slow();
                answer.recv_timeout(timeout - first_wait)
            }
            other => other,
        };
        match answered {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                // Leave the stuck thread behind: the next call gets a fresh one.
                self.jobs = None;
                tracing::error!(
                    "the driver did not answer within {} ms while {what}; using a fresh handle",
                    timeout.as_millis()
                );
                Err(DeviceError::Timeout {
                    what: what.to_string(),
                    waited_s: timeout.as_secs().max(1),
                })
            }
            Err(RecvTimeoutError::Disconnected) => {
                // The job panicked; the thread goes on, but start afresh to be safe.
                self.jobs = None;
                Err(stopped(what))
            }
        }
    }

    fn spawn(&self, backend: Option<Box<dyn Backend>>) -> Result<Sender<Job>, DeviceError> {
        let stuck = self.stuck_threads.load(Ordering::SeqCst);
        if stuck >= MAX_STUCK_THREADS {
            return Err(DeviceError::Timeout {
                what: format!("{stuck} earlier calls are still waiting on it"),
                waited_s: 0,
            });
        }
        let (sender, receiver) = mpsc::channel::<Job>();
        let mut slot = BackendSlot {
            backend,
            reopener: Arc::clone(&self.reopener),
        };
        let stuck_threads = Arc::clone(&self.stuck_threads);
        // Counted as stuck until it is seen to be idle: a thread is only ever abandoned mid-call.
        stuck_threads.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name(self.name.clone())
            .spawn(move || {
                stuck_threads.fetch_sub(1, Ordering::SeqCst);
                while let Ok(job) = receiver.recv() {
                    stuck_threads.fetch_add(1, Ordering::SeqCst);
                    let _ = catch_unwind(AssertUnwindSafe(|| job(&mut slot)));
                    stuck_threads.fetch_sub(1, Ordering::SeqCst);
                }
            });
        match spawned {
            Ok(_) => Ok(sender),
            Err(error) => {
                self.stuck_threads.fetch_sub(1, Ordering::SeqCst);
                Err(DeviceError::Other {
                    what: "Starting a device thread".to_string(),
                    detail: error.to_string(),
                })
            }
        }
    }
}

fn stopped(what: &str) -> DeviceError {
    DeviceError::Other {
        what: what.to_string(),
        detail: "the device thread stopped on an internal error".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::device::sim::{SimBackend, SimOptions};

    #[test]
    fn calls_run_on_the_worker_and_return_their_result() {
        let mut worker = DeviceWorker::start(
            Box::new(SimBackend::new(&SimOptions::default())),
            "test-worker",
        );
        let count = worker.call("counting", Duration::from_secs(5), |backend| {
            backend.gpu_count()
        });
        assert_eq!(count, Ok(1));
    }

    #[test]
    fn a_stuck_call_times_out_and_the_next_call_gets_a_fresh_thread() {
        let mut worker = DeviceWorker::start(
            Box::new(SimBackend::new(&SimOptions::default())),
            "test-worker",
        );
        let started = Instant::now();
        let stuck = worker.call("sleeping", Duration::from_millis(100), |_| {
            std::thread::sleep(Duration::from_secs(2));
            Ok(())
        });
        assert!(
            matches!(stuck, Err(DeviceError::Timeout { .. })),
            "{stuck:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // The same simulated machine answers on the new thread at once.
        let count = worker.call("counting", Duration::from_secs(5), |backend| {
            backend.gpu_count()
        });
        assert_eq!(count, Ok(1));
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_panicking_job_is_an_error_not_a_crash() {
        let mut worker = DeviceWorker::start(
            Box::new(SimBackend::new(&SimOptions::default())),
            "test-worker",
        );
        let result: Result<(), DeviceError> =
            worker.call("panicking", Duration::from_secs(5), |_| panic!("boom"));
        assert!(result.is_err());
        let count = worker.call("counting", Duration::from_secs(5), |backend| {
            backend.gpu_count()
        });
        assert_eq!(count, Ok(1));
    }
}
