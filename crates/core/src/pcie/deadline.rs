//! A [`CopyBench`] on its own thread, every call with a deadline, so a copy that never returns
//! (a DMA stuck on a failing link) cannot hang the test: past the deadline the call is a fault,
//! and so is every call after it (the thread cannot be stopped; the process ending frees the
//! cards' contexts).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use super::bench::{CopyBench, CopyChecked, Route};
use crate::stability::compute::ComputeError;
use gputune_formats::reports::links::PcieLink;

/// How long one copy (or the buffers' setup) may take: a 4 GiB copy at Gen 1 x1 speed is past
/// it, but no copy on a working link is.
pub const COPY_DEADLINE: Duration = Duration::from_secs(60);

enum Call {
    Prepare(u64),
    Copy(Route, u32),
    Observe(u32, PcieLink),
}

enum Answer {
    Prepared(Result<(), ComputeError>),
    Copied(Result<CopyChecked, ComputeError>),
}

/// The bench behind a thread. See the module's documentation.
pub struct DeadlineBench {
    calls: Sender<Call>,
    answers: Receiver<Answer>,
    runtime: String,
    deadline: Duration,
    /// Set once a call ran past its deadline: what every later call answers.
    hung: Option<String>,
}

fn panicked() -> ComputeError {
    ComputeError::Unavailable(
        "The copy test's device failed inside (a panic); nothing more was tested.".to_string(),
    )
}

impl DeadlineBench {
    pub fn start(mut bench: Box<dyn CopyBench>, deadline: Duration) -> DeadlineBench {
        let runtime = bench.runtime();
        let (calls, inbox) = mpsc::channel::<Call>();
        let (outbox, answers) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("gputune-copies".to_string())
            .spawn(move || {
                for call in inbox {
                    let answer = match call {
                        Call::Prepare(bytes) => Answer::Prepared(
                            catch_unwind(AssertUnwindSafe(|| bench.prepare(bytes)))
                                .unwrap_or_else(|_| Err(panicked())),
                        ),
                        Call::Copy(route, pass) => Answer::Copied(
                            catch_unwind(AssertUnwindSafe(|| bench.copy(route, pass)))
                                .unwrap_or_else(|_| Err(panicked())),
                        ),
                        Call::Observe(gpu, link) => {
                            bench.observe_link(gpu, link);
                            continue;
                        }
                    };
                    if outbox.send(answer).is_err() {
                        return;
                    }
                }
            });
        let hung = spawned.err().map(|error| {
            format!("The copy test could not start its thread ({error}); nothing was tested.")
        });
        DeadlineBench {
            calls,
            answers,
            runtime,
            deadline,
            hung,
        }
    }

    fn ask(&mut self, call: Call, doing: &str) -> Result<Answer, ComputeError> {
        if let Some(message) = &self.hung {
            return Err(ComputeError::Fault(message.clone()));
        }
        let gone = || ComputeError::Unavailable("The copy test's thread is gone.".to_string());
        self.calls.send(call).map_err(|_| gone())?;
        match self.answers.recv_timeout(self.deadline) {
            Ok(answer) => Ok(answer),
            Err(RecvTimeoutError::Disconnected) => Err(gone()),
            Err(RecvTimeoutError::Timeout) => {
                let waited = match self.deadline.as_secs() {
                    0 => format!("{} ms", self.deadline.as_millis()),
                    seconds => format!("{seconds} s"),
                };
                let message = format!(
                    "{doing} did not finish within {waited}: the card or its link hangs (look \
                     for an Xid in dmesg); nothing more was tested."
                );
                self.hung = Some(message.clone());
                Err(ComputeError::Fault(message))
            }
        }
    }
}

impl CopyBench for DeadlineBench {
    fn runtime(&self) -> String {
        self.runtime.clone()
    }

    fn prepare(&mut self, bytes: u64) -> Result<(), ComputeError> {
        match self.ask(Call::Prepare(bytes), "Setting up the copy test's buffers")? {
            Answer::Prepared(result) => result,
            Answer::Copied(_) => Err(ComputeError::Unavailable(
                "The copy test's thread answered out of turn.".to_string(),
            )),
        }
    }

    fn copy(&mut self, route: Route, pass: u32) -> Result<CopyChecked, ComputeError> {
        let doing = format!("A {} copy", route.direction());
        match self.ask(Call::Copy(route, pass), &doing)? {
            Answer::Copied(result) => result,
            Answer::Prepared(_) => Err(ComputeError::Unavailable(
                "The copy test's thread answered out of turn.".to_string(),
            )),
        }
    }

    fn observe_link(&mut self, gpu: u32, link: PcieLink) {
        if self.hung.is_none() {
            let _ = self.calls.send(Call::Observe(gpu, link));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::reports::links::CopyPath;

    /// A bench whose copies to GPU 1 hang (for a while: the test leaves its thread behind).
    struct Stuck;

    impl CopyBench for Stuck {
        fn runtime(&self) -> String {
            "stuck".to_string()
        }
        fn prepare(&mut self, _bytes: u64) -> Result<(), ComputeError> {
            Ok(())
        }
        fn copy(&mut self, route: Route, _pass: u32) -> Result<CopyChecked, ComputeError> {
            if route == (Route::HostToDevice { gpu: 1 }) {
                std::thread::sleep(Duration::from_millis(500));
            }
            Ok(CopyChecked {
                path: CopyPath::Direct,
                bytes: 16,
                elapsed_s: 0.001,
                wrong_words: 0,
                first_wrong_offset_bytes: None,
            })
        }
    }

    #[test]
    fn a_copy_past_its_deadline_is_a_fault_and_so_is_every_later_call() {
        let mut bench = DeadlineBench::start(Box::new(Stuck), Duration::from_millis(50));
        assert_eq!(bench.runtime(), "stuck");
        assert_eq!(bench.prepare(16), Ok(()));
        assert!(bench.copy(Route::HostToDevice { gpu: 0 }, 1).is_ok());
        let hung = bench.copy(Route::HostToDevice { gpu: 1 }, 1);
        assert!(
            matches!(&hung, Err(ComputeError::Fault(message))
                if message.starts_with("A host→device copy did not finish within 50 ms")),
            "{hung:?}"
        );
        assert_eq!(bench.copy(Route::HostToDevice { gpu: 0 }, 2), hung);
    }
}
