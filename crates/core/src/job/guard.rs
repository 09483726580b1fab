//! The guard between gputune and a user's job (see [`super::tree`]): forked in the spawned
//! child before it executes, it forks the job, stays its parent and the subreaper of every
//! process the job starts, and ends them all when the job ends or gputune goes away.
//!
//! Everything here runs in a child forked from a multi-threaded process: only
//! async-signal-safe system calls, no allocation, no lock, no panic.

use std::os::fd::RawFd;

use nix::libc;

/// Between two sweeps of the descendants still being killed.
const SWEEP_PAUSE_NS: libc::c_long = 5_000_000;

/// Run in the spawned child (a `pre_exec` closure): forks the job, which returns `Ok` and goes
/// on to execute the command; this process becomes the guard and never returns.
/// `guard_end` is the guard's end of the socket pair, `gputune_end` gputune's.
///
/// # Safety
/// Only between fork and exec, as a `pre_exec` closure.
pub(super) unsafe fn fork_job_under_guard(
    guard_end: RawFd,
    gputune_end: RawFd,
) -> std::io::Result<()> {
    // SAFETY: plain system calls on this process; the sets are initialised by sigfillset and
    // sigprocmask before use.
    unsafe {
        // No signal between the fork and the guard's own dispositions: the job restores the
        // mask before it executes.
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, &mut before);
        // Before the fork: a job that orphans a child at once still has it reparented here.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        let guard_pid = libc::getpid();
        let job = libc::fork();
        if job < 0 {
            let error = std::io::Error::last_os_error();
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            return Err(error);
        }
        if job == 0 {
            // A guard that is killed itself takes the job with it (its own children are then
            // orphans of init: nothing is left to follow them).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != guard_pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Its own process group: a stop signals whatever it started there too (the guard
            // sets it as well, before it names the job to gputune).
            libc::setpgid(0, 0);
            libc::close(guard_end);
            libc::close(gputune_end);
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            return Ok(());
        }
        guard(job, guard_end, &before)
    }
}

/// The guard's life: tell gputune the job's pid, wait for the job or for gputune's end to
/// close, then kill every descendant and end as the job ended.
unsafe fn guard(job: libc::pid_t, lifeline: RawFd, mask: &libc::sigset_t) -> ! {
    // SAFETY: system calls on this process's own descriptors, signals and children.
    unsafe {
        // The job's own process group from here, before gputune learns its pid: the job sets
        // it too (whichever runs first), so a stop at once does not find no group to signal.
        // EACCES (it has executed already) and ESRCH (it is gone) leave nothing to do.
        libc::setpgid(job, job);
        let pid_bytes = job.to_le_bytes();
        libc::write(lifeline, pid_bytes.as_ptr().cast(), pid_bytes.len());
        // Its copies of the job's pipes (and of the spawn's error pipe) would keep them open.
        close_all_but(lifeline);
        // A Ctrl-C or SIGTERM is for the job (gputune forwards it); the guard ends with it.
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
        // Mirroring a crash's signal must not write a core of the guard.
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        // Its name in ps and top: not a second gputune.
        libc::prctl(libc::PR_SET_NAME, c"gputune-guard".as_ptr(), 0, 0, 0);
        // It sleeps until a child ends (SIGCHLD, let through only while it waits, so none is
        // missed between a look and the wait) or gputune's end is closed.
        let mut on_child: libc::sigaction = std::mem::zeroed();
        on_child.sa_sigaction = wake as extern "C" fn(libc::c_int) as libc::sighandler_t;
        on_child.sa_flags = libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut on_child.sa_mask);
        libc::sigaction(libc::SIGCHLD, &on_child, std::ptr::null_mut());
        let mut outside_wait = *mask;
        libc::sigaddset(&mut outside_wait, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_SETMASK, &outside_wait, std::ptr::null_mut());
        let mut job_status: Option<libc::c_int> = None;
        loop {
            reap(job, &mut job_status);
            if job_status.is_some() {
                break;
            }
            let mut watched = libc::pollfd {
                fd: lifeline,
                events: libc::POLLIN,
                revents: 0,
            };
            // Anything on gputune's end (a byte, its close, gputune's death) ends the job.
            if libc::ppoll(&mut watched, 1, std::ptr::null(), mask) > 0 && watched.revents != 0 {
                break;
            }
        }
        libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
        end_every_descendant(job, &mut job_status);
        exit_as(job_status)
    }
}

/// SIGCHLD's handler: it only interrupts the guard's wait.
extern "C" fn wake(_signal: libc::c_int) {}

/// Reaps every child that has ended (noting the job's status); whether any child is left.
unsafe fn reap(job: libc::pid_t, job_status: &mut Option<libc::c_int>) -> bool {
    // SAFETY: waitpid on this process's own children.
    unsafe {
        loop {
            let mut status: libc::c_int = 0;
            let pid = libc::waitpid(-1, &mut status, libc::WNOHANG);
            if pid > 0 {
                if pid == job {
                    *job_status = Some(status);
                }
                continue;
            }
            if pid < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            return pid == 0;
        }
    }
}

/// SIGKILL to every child until none is left: as the subreaper, the guard inherits every
/// descendant whose parent dies (one that called setsid() too), so when it has no child left
/// the job has no process left.
unsafe fn end_every_descendant(job: libc::pid_t, job_status: &mut Option<libc::c_int>) {
    // SAFETY: signals to this process's own children, waitpid, nanosleep.
    unsafe {
        let me = libc::getpid();
        loop {
            for_each_child_of(me, |child| {
                libc::kill(child, libc::SIGKILL);
            });
            if !reap(job, job_status) {
                return;
            }
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: SWEEP_PAUSE_NS,
            };
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
    }
}

/// Calls `found` with the pid of every process whose parent is `parent`, read from /proc
/// without allocating (each /proc/PID/stat: the parent is the second field after the command,
/// which may hold ") ").
unsafe fn for_each_child_of(parent: libc::pid_t, mut found: impl FnMut(libc::pid_t)) {
    // SAFETY: reads into stack buffers of the given lengths; every descriptor opened is closed.
    unsafe {
        let proc = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if proc < 0 {
            return;
        }
        let mut entries = [0u8; 4096];
        loop {
            let read = libc::syscall(
                libc::SYS_getdents64,
                proc,
                entries.as_mut_ptr(),
                entries.len(),
            );
            if read <= 0 {
                break;
            }
            let filled = &entries[..(read as usize).min(entries.len())];
            let mut offset = 0usize;
            // linux_dirent64: inode (8), offset (8), record length (2), type (1), name.
            while let Some(record) = filled.get(offset..) {
                let Some(&[low, high]) = record.get(16..18) else {
                    break;
                };
                let length = usize::from(u16::from_ne_bytes([low, high]));
                let Some(name) = record.get(19..length) else {
                    break;
                };
                if let Some(pid) = parse_pid(name)
                    && parent_of(pid) == Some(parent)
                {
                    found(pid);
                }
                offset += length;
            }
        }
        libc::close(proc);
    }
}

/// The parent of `pid` from /proc/PID/stat.
unsafe fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    // "/proc/" (6), at most 20 digits, "/stat" and its NUL (6).
    let mut path = [0u8; 32];
    let prefix = b"/proc/";
    path[..prefix.len()].copy_from_slice(prefix);
    let at = prefix.len() + write_decimal(&mut path[prefix.len()..], pid as u64);
    let suffix = b"/stat\0";
    path.get_mut(at..at + suffix.len())?.copy_from_slice(suffix);
    // SAFETY: `path` is NUL-terminated; the read is bounded by the buffer.
    let (stat, length) = unsafe {
        let file = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if file < 0 {
            return None;
        }
        let mut stat = [0u8; 1024];
        let length = libc::read(file, stat.as_mut_ptr().cast(), stat.len());
        libc::close(file);
        (stat, length)
    };
    if length <= 0 {
        return None;
    }
    let stat = &stat[..length as usize];
    let close = stat.iter().rposition(|&byte| byte == b')')?;
    // ") S PPID ...": the state, then the parent.
    let mut fields = stat[close + 1..]
        .split(|&byte| byte == b' ')
        .filter(|field| !field.is_empty());
    fields.next()?;
    parse_pid(fields.next()?)
}

/// A pid from its decimal digits (a NUL ends it); `None` for anything else.
fn parse_pid(digits: &[u8]) -> Option<libc::pid_t> {
    let mut value: libc::pid_t = 0;
    let mut any = false;
    for &byte in digits {
        if byte == 0 {
            break;
        }
        if !byte.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_add(libc::pid_t::from(byte - b'0'))?;
        any = true;
    }
    any.then_some(value)
}

/// Writes `value` in decimal at the start of `into`; the digits written.
fn write_decimal(into: &mut [u8], mut value: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut count = 0;
    loop {
        digits[count] = b'0' + (value % 10) as u8;
        count += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for (slot, digit) in into.iter_mut().zip(digits[..count].iter().rev()) {
        *slot = *digit;
    }
    count.min(into.len())
}

/// Closes every descriptor but `keep`.
unsafe fn close_all_but(keep: RawFd) {
    // SAFETY: closing descriptors of this process only.
    unsafe {
        let below = if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32)
        } else {
            0
        };
        let above = libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
        if below != 0 || above != 0 {
            // A kernel before 5.9: every descriptor the limit allows.
            let limit = libc::sysconf(libc::_SC_OPEN_MAX).clamp(1024, 65_536) as RawFd;
            for descriptor in 0..limit {
                if descriptor != keep {
                    libc::close(descriptor);
                }
            }
        }
    }
}

/// Ends the guard as the job ended: its exit code, or the same signal.
unsafe fn exit_as(job_status: Option<libc::c_int>) -> ! {
    // SAFETY: signals to this process, then _exit.
    unsafe {
        match job_status {
            Some(status) if libc::WIFEXITED(status) => libc::_exit(libc::WEXITSTATUS(status)),
            Some(status) if libc::WIFSIGNALED(status) => {
                let signal = libc::WTERMSIG(status);
                libc::signal(signal, libc::SIG_DFL);
                libc::kill(libc::getpid(), signal);
                libc::_exit(128 + signal)
            }
            _ => libc::_exit(128 + libc::SIGKILL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_and_decimals_read_and_write_without_allocating() {
        assert_eq!(parse_pid(b"4242\0\0"), Some(4242));
        assert_eq!(parse_pid(b"self"), None);
        assert_eq!(parse_pid(b"\0"), None);
        assert_eq!(parse_pid(b"99999999999"), None);
        let mut buffer = [0u8; 20];
        let written = write_decimal(&mut buffer, 4_194_304);
        assert_eq!(&buffer[..written], b"4194304");
        assert_eq!(write_decimal(&mut buffer, 0), 1);
    }

    #[test]
    fn the_parent_is_read_from_proc() {
        let me = std::process::id() as libc::pid_t;
        // SAFETY: a read of /proc.
        let parent = unsafe { parent_of(me) };
        assert_eq!(
            parent,
            Some(std::os::unix::process::parent_id() as libc::pid_t)
        );
    }
}
