//! Ending a thread without hanging on it: a thread stuck in a driver call or on a slow disk is
//! waited for until a deadline, then left behind (it ends on its own when the call returns).

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Joins `thread` if it ends within `patience`; true when it did.
pub fn join_within<T>(thread: JoinHandle<T>, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while !thread.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if thread.is_finished() {
        let _ = thread.join();
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_ends_is_joined_and_a_stuck_one_is_left_behind() {
        let quick = std::thread::spawn(|| 7);
        assert!(join_within(quick, Duration::from_secs(5)));
        let (_keep_open, wait) = std::sync::mpsc::channel::<()>();
        let stuck = std::thread::spawn(move || {
            let _ = wait.recv();
        });
        let started = Instant::now();
        assert!(!join_within(stuck, Duration::from_millis(50)));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
