//! gputune's Slurm SPANK plugin, `gputune_spank.so`: a job's GPUs tuned through the node's
//! gputune daemon for the job's life, and put back when it ends (docs/cluster.md).
//!
//! - `srun`/`sbatch`/`salloc` get `--gputune-profile=NAME`, `--gputune-power-limit=PCT%|W`
//!   and `--gputune-off`; what the site's policy (`policy`) refuses fails the command at
//!   submission with one sentence.
//! - The job prolog (root, in slurmd) records which cards Slurm gave the job on this node
//!   (`allocation`): a step's environment is the user's and cannot be believed alone.
//! - In slurmstepd (`init_post_opt`, as root, before the tasks start) the step's cards
//!   (`gpus`: Slurm's device numbers → UUIDs, each one the job's) get a job session from the daemon (`plan`,
//!   `daemon`); the connection stays open for the step's life. A refusal on the node fails
//!   the step; the job never runs untuned when it asked for (or the node defaults to) a
//!   setting.
//! - A refusal on the node is told by each task, on the job's own stderr (slurmstepd's log is
//!   the admin's, not the user's), and fails the task (`task_init`).
//! - When the step's last local task has exited (`task_exit`; the job still runs then, so
//!   Slurm still takes its AdminComment) the session is ended and the job's energy written
//!   into its Slurm record (`comment`); `exit` ends what is left. If slurmstepd is killed, the
//!   connection drops and the daemon puts the cards back on its own.
//!
//! Every hook runs under `catch_unwind`: a panic never crosses into Slurm.

pub mod allocation;
pub mod ask;
pub mod comment;
pub mod daemon;
mod ffi;
pub mod gpus;
mod hooks;
pub mod plan;
pub mod policy;
mod step;

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::{Mutex, PoisonError};

use gputune_formats::tuning::SessionId;

use ask::Ask;
use daemon::DaemonLink;
use policy::Policy;

include!(concat!(env!("OUT_DIR"), "/slurm_version.rs"));

/// SPANK_PLUGIN(gputune, 1): what Slurm reads from the loaded file.
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 8] = *b"gputune\0";

#[unsafe(no_mangle)]
pub static plugin_type: [u8; 6] = *b"spank\0";

#[unsafe(no_mangle)]
pub static plugin_version: u32 = SLURM_VERSION_NUMBER;

#[unsafe(no_mangle)]
pub static spank_plugin_version: u32 = 1;

pub(crate) const OPTION_PROFILE: c_int = 1;

pub(crate) const OPTION_POWER: c_int = 2;

pub(crate) const OPTION_OFF: c_int = 3;

/// What one process (srun, sbatch, one slurmstepd) knows between hooks.
pub(crate) struct PluginState {
    pub(crate) policy: Option<Policy>,
    pub(crate) ask: Ask,
    /// A problem with an option's value, said when the options are checked.
    pub(crate) bad_option: Option<String>,
    /// The node refused the step: said by each task on its stderr, which then fails.
    pub(crate) refusal: Option<String>,
    pub(crate) held: Option<HeldStep>,
    /// Tasks of this step on this node that have exited.
    pub(crate) tasks_exited: u32,
}

/// A step's session, held from its start to its end.
pub(crate) struct HeldStep {
    pub(crate) link: DaemonLink,
    pub(crate) session: SessionId,
    pub(crate) job_id: String,
}

static STATE: Mutex<PluginState> = Mutex::new(PluginState {
    policy: None,
    ask: Ask {
        profile: None,
        power_limit: None,
        off: false,
    },
    bad_option: None,
    refusal: None,
    held: None,
    tasks_exited: 0,
});

pub(crate) fn with_state<T>(body: impl FnOnce(&mut PluginState) -> T) -> T {
    let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    body(&mut state)
}

/// Runs a hook's body, never letting a panic reach Slurm.
pub(crate) fn guarded(body: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or_else(|_| {
        say_error("gputune: the plugin failed unexpectedly; see slurmd's log.");
        -1
    })
}

pub(crate) fn say_error(text: &str) {
    if let Ok(text) = CString::new(text.replace('\0', " ")) {
        // SAFETY: a format of "%s" and one NUL-terminated string, as slurm_error expects.
        unsafe { ffi::slurm_error(c"%s".as_ptr(), text.as_ptr()) };
    }
}

pub(crate) fn say_info(text: &str) {
    if let Ok(text) = CString::new(text.replace('\0', " ")) {
        // SAFETY: as in say_error.
        unsafe { ffi::slurm_info(c"%s".as_ptr(), text.as_ptr()) };
    }
}

/// The plugin's arguments from plugstack.conf.
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings (Slurm's contract).
pub(crate) unsafe fn arguments(argc: c_int, argv: *mut *mut c_char) -> Vec<String> {
    if argv.is_null() {
        return Vec::new();
    }
    (0..usize::try_from(argc).unwrap_or(0))
        .filter_map(|at| {
            // SAFETY: at < argc, per the contract.
            let arg = unsafe { *argv.add(at) };
            (!arg.is_null())
                // SAFETY: NUL-terminated per the contract.
                .then(|| {
                    unsafe { CStr::from_ptr(arg) }
                        .to_string_lossy()
                        .into_owned()
                })
        })
        .collect()
}
