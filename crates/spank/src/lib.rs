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
pub mod plan;
pub mod policy;

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use gputune_core::formats::tuning::{JobInfo, SessionId, SessionReport};

use ask::Ask;
use daemon::DaemonLink;
use ffi::SpankHandle;
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

const OPTION_PROFILE: c_int = 1;
const OPTION_POWER: c_int = 2;
const OPTION_OFF: c_int = 3;

/// What one process (srun, sbatch, one slurmstepd) knows between hooks.
struct PluginState {
    policy: Option<Policy>,
    ask: Ask,
    /// A problem with an option's value, said when the options are checked.
    bad_option: Option<String>,
    /// The node refused the step: said by each task on its stderr, which then fails.
    refusal: Option<String>,
    held: Option<HeldStep>,
    /// Tasks of this step on this node that have exited.
    tasks_exited: u32,
}

/// A step's session, held from its start to its end.
struct HeldStep {
    link: DaemonLink,
    session: SessionId,
    job_id: String,
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

fn with_state<T>(body: impl FnOnce(&mut PluginState) -> T) -> T {
    let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    body(&mut state)
}

/// Runs a hook's body, never letting a panic reach Slurm.
fn guarded(body: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or_else(|_| {
        say_error("gputune: the plugin failed unexpectedly; see slurmd's log.");
        -1
    })
}

fn say_error(text: &str) {
    if let Ok(text) = CString::new(text.replace('\0', " ")) {
        // SAFETY: a format of "%s" and one NUL-terminated string, as slurm_error expects.
        unsafe { ffi::slurm_error(c"%s".as_ptr(), text.as_ptr()) };
    }
}

fn say_info(text: &str) {
    if let Ok(text) = CString::new(text.replace('\0', " ")) {
        // SAFETY: as in say_error.
        unsafe { ffi::slurm_info(c"%s".as_ptr(), text.as_ptr()) };
    }
}

/// The plugin's arguments from plugstack.conf.
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings (Slurm's contract).
unsafe fn arguments(argc: c_int, argv: *mut *mut c_char) -> Vec<String> {
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

/// SPANK: the plugin is loaded (srun, sbatch, salloc, slurmstepd, slurmd).
///
/// # Safety
/// Called by Slurm with its handle and the plugin's arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_init(
    spank: SpankHandle,
    argc: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    // SAFETY: Slurm's arguments, passed on.
    let args = unsafe { arguments(argc, argv) };
    guarded(|| {
        let policy = match Policy::from_args(&args) {
            Ok(policy) => policy,
            Err(error) => {
                say_error(&error);
                return -1;
            }
        };
        with_state(|state| state.policy = Some(policy));
        // SAFETY: no arguments.
        let context = unsafe { ffi::spank_context() };
        if matches!(
            context,
            ffi::CTX_LOCAL | ffi::CTX_REMOTE | ffi::CTX_ALLOCATOR
        ) {
            register_options(spank)
        } else {
            0
        }
    })
}

fn register_options(spank: SpankHandle) -> c_int {
    let options = [
        (
            c"gputune-profile",
            c"NAME",
            c"Run the job's GPUs with the site's gputune profile NAME (put back when the job ends).",
            1,
            OPTION_PROFILE,
        ),
        (
            c"gputune-power-limit",
            c"PCT%|W",
            c"Run the job's GPUs at this power limit: a share of each card's default (80%) or watts (300W).",
            1,
            OPTION_POWER,
        ),
        (
            c"gputune-off",
            c"",
            c"Leave the job's GPUs as they are (where the site allows opting out of its default).",
            0,
            OPTION_OFF,
        ),
    ];
    for (name, arginfo, usage, has_arg, val) in options {
        // Slurm keeps the pointer for the process's life.
        let option: &'static ffi::SpankOption = Box::leak(Box::new(ffi::SpankOption {
            name: name.as_ptr(),
            arginfo: if has_arg == 1 {
                arginfo.as_ptr()
            } else {
                std::ptr::null()
            },
            usage: usage.as_ptr(),
            has_arg,
            val,
            cb: Some(on_option),
        }));
        // SAFETY: a valid handle from Slurm and an option that lives forever.
        if unsafe { ffi::spank_option_register(spank, option) } != ffi::SUCCESS {
            say_error("gputune: the options --gputune-* could not be registered with Slurm.");
            return -1;
        }
    }
    0
}

/// SPANK: an option was given (at submission, and again in slurmstepd).
extern "C" fn on_option(val: c_int, optarg: *const c_char, _remote: c_int) -> c_int {
    let text = if optarg.is_null() {
        String::new()
    } else {
        // SAFETY: Slurm passes a NUL-terminated string or null.
        unsafe { CStr::from_ptr(optarg) }
            .to_string_lossy()
            .into_owned()
    };
    guarded(|| {
        let parsed = match val {
            OPTION_PROFILE => ask::parse_profile(&text).map(|name| {
                with_state(|state| state.ask.profile = Some(name));
            }),
            OPTION_POWER => ask::parse_power(&text).map(|power| {
                with_state(|state| state.ask.power_limit = Some(power));
            }),
            OPTION_OFF => {
                with_state(|state| state.ask.off = true);
                Ok(())
            }
            _ => Ok(()),
        };
        match parsed {
            Ok(()) => 0,
            Err(error) => {
                say_error(&error);
                with_state(|state| state.bad_option = Some(error));
                -1
            }
        }
    })
}

/// SPANK: the options are known. At submission: checked against the policy. In slurmstepd:
/// the step's cards are tuned.
///
/// # Safety
/// Called by Slurm with its handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_init_post_opt(
    spank: SpankHandle,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    guarded(|| {
        // SAFETY: no arguments.
        let context = unsafe { ffi::spank_context() };
        let (policy, ask, bad_option) = with_state(|state| {
            (
                state.policy.clone(),
                state.ask.clone(),
                state.bad_option.clone(),
            )
        });
        let Some(policy) = policy else {
            return 0;
        };
        if let Some(error) = bad_option {
            say_error(&error);
            return -1;
        }
        let wanted = match ask.resolve(&policy) {
            Ok(wanted) => wanted,
            Err(error) => {
                say_error(&error);
                return -1;
            }
        };
        if context != ffi::CTX_REMOTE {
            return 0;
        }
        let started = std::time::Instant::now();
        match start_step(spank, &policy, &wanted) {
            Ok(()) => {
                say_info(&format!(
                    "gputune: the step's start took {:.1} ms",
                    started.elapsed().as_secs_f64() * 1000.0
                ));
                0
            }
            Err(error) if wanted.is_nothing() => {
                // Nothing was asked: the job runs as it is, only not recorded.
                say_info(&format!("{error} (the job runs untuned and unrecorded)"));
                0
            }
            Err(error) => {
                // slurmstepd's own error reaches only its log ("Plugin initialization failed"
                // for the user, and srun exits 0): each task says it and fails instead.
                say_error(&error);
                with_state(|state| state.refusal = Some(error));
                0
            }
        }
    })
}

/// Holds the step's cards: its job, its cards by device number, the plan, the session.
fn start_step(spank: SpankHandle, policy: &Policy, wanted: &ask::Wanted) -> Result<(), String> {
    let minors =
        match getenv(spank, c"SLURM_STEP_GPUS").or_else(|| getenv(spank, c"SLURM_JOB_GPUS")) {
            Some(list) => gpus::parse_slurm_gpus(&list)?,
            None => Vec::new(),
        };
    if minors.is_empty() {
        return Ok(());
    }
    let job = job_info(spank)?;
    let label = format!(
        "gputune_spank.so (Slurm job {} step {})",
        job.job_id, job.step
    );
    let (mut link, welcome) = DaemonLink::connect(
        &policy.socket,
        &label,
        Duration::from_secs(policy.timeout_s),
    )?;
    let cards = gpus::cards_of(&minors, &welcome.gpus)?;
    let job_id = job.job_id.clone();
    let plan = plan::plan(policy, wanted, job, &cards)?;
    let started = link.start(plan.request)?;
    let mut lines = plan.lines;
    if started.joined {
        lines = vec![format!(
            "the job's settings, held since its first step on this node ({})",
            wanted.origin
        )];
    } else {
        lines.insert(0, format!("from {}", wanted.origin));
    }
    let summary = format!("gputune: {}", lines.join("; "));
    say_info(&summary);
    setenv(spank, c"GPUTUNE_SETTINGS", &summary);
    with_state(|state| {
        state.held = Some(HeldStep {
            link,
            session: started.session,
            job_id,
        });
    });
    Ok(())
}

/// SPANK: the job's prolog on this node (root, in slurmd; its environment is slurmd's, with
/// the job's cards on this node in `SLURM_JOB_GPUS`): records them for the job's steps. A
/// failure is logged and the prolog succeeds (a failing required plugin drains the node); the
/// job's steps then find no record and hold no card.
///
/// # Safety
/// Called by Slurm with its handle and the plugin's arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_job_prolog(
    spank: SpankHandle,
    argc: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    // SAFETY: Slurm's arguments, passed on.
    let args = unsafe { arguments(argc, argv) };
    guarded(|| {
        let recorded = Policy::from_args(&args).and_then(|policy| {
            let job_id = job_id(spank)?;
            let minors = match std::env::var("SLURM_JOB_GPUS") {
                Ok(list) => gpus::parse_slurm_gpus(&list)?,
                Err(_) => Vec::new(),
            };
            allocation::record(&policy.records_dir, &job_id, &minors)
        });
        if let Err(error) = recorded {
            say_error(&error);
        }
        0
    })
}

/// SPANK: the job's epilog on this node: its record of cards goes.
///
/// # Safety
/// Called by Slurm with its handle and the plugin's arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_job_epilog(
    spank: SpankHandle,
    argc: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    // SAFETY: Slurm's arguments, passed on.
    let args = unsafe { arguments(argc, argv) };
    guarded(|| {
        if let (Ok(policy), Ok(job_id)) = (Policy::from_args(&args), job_id(spank)) {
            allocation::forget(&policy.records_dir, &job_id);
        }
        0
    })
}

fn job_id(spank: SpankHandle) -> Result<String, String> {
    let mut job_id: u32 = 0;
    // SAFETY: S_JOB_ID's out type is uint32_t.
    let read = unsafe { ffi::spank_get_item(spank, ffi::S_JOB_ID, &mut job_id as *mut u32) };
    if read != ffi::SUCCESS || job_id == 0 {
        return Err("gputune: Slurm did not say which job this is.".to_string());
    }
    Ok(job_id.to_string())
}

/// SPANK: in each task, as the job's user, just before it runs the job's program: a step the
/// node refused says why on the job's stderr and fails.
///
/// # Safety
/// Called by Slurm with its handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_task_init(
    _spank: SpankHandle,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    guarded(|| match with_state(|state| state.refusal.clone()) {
        Some(refusal) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{refusal}");
            -1
        }
        None => 0,
    })
}

/// SPANK: a task of the step exited (in slurmstepd). After the last local one the job's work
/// on these cards is done: the session ends and the job's record is written while Slurm still
/// takes it.
///
/// # Safety
/// Called by Slurm with its handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_task_exit(
    spank: SpankHandle,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    guarded(|| {
        let mut local_tasks: u32 = 1;
        // SAFETY: S_JOB_LOCAL_TASK_COUNT's out type is uint32_t.
        let read = unsafe {
            ffi::spank_get_item(
                spank,
                ffi::S_JOB_LOCAL_TASK_COUNT,
                &mut local_tasks as *mut u32,
            )
        };
        let exited = with_state(|state| {
            state.tasks_exited += 1;
            state.tasks_exited
        });
        if read != ffi::SUCCESS || exited >= local_tasks {
            end_step();
        }
        0
    })
}

/// SPANK: the step (or srun, sbatch) ends.
///
/// # Safety
/// Called by Slurm with its handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_exit(
    _spank: SpankHandle,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    guarded(|| {
        end_step();
        0
    })
}

/// Ends the step's session (once), then writes the job's record into Slurm's.
fn end_step() {
    let (held, policy) = with_state(|state| (state.held.take(), state.policy.clone()));
    let Some(mut held) = held else {
        return;
    };
    {
        match held.link.end(held.session) {
            Ok(report) => {
                say_info(&format!("gputune: job {}: {}", held.job_id, report.message));
                if let Some(line) = report_line(&report) {
                    say_info(&format!("job {}: {line}", held.job_id));
                    if let Some(policy) = policy
                        && policy.admin_comment
                        && let Err(error) =
                            comment::set_admin_comment(&policy.scontrol, &held.job_id, &line)
                    {
                        say_info(&format!("gputune: job {}: {error}", held.job_id));
                    }
                }
            }
            // The connection closes as this returns, and the daemon puts the cards back then.
            Err(error) => say_error(&error),
        }
    }
}

/// The line for the job's Slurm record, from the daemon's record of it: "gputune: 2 GPUs on
/// node1, 0.412 kWh, €0.14, 0.16 kg CO₂ (peak 448 W, 71 °C)"; `None` when the session went
/// on for another step (no record yet).
fn report_line(report: &SessionReport) -> Option<String> {
    let record = report.job_record.as_ref()?;
    let peak_w = record
        .gpus
        .iter()
        .filter_map(|gpu| gpu.peak_power_w)
        .fold(None, |peak: Option<f64>, watts| {
            Some(peak.map_or(watts, |p| p.max(watts)))
        });
    let peak_c = record
        .gpus
        .iter()
        .filter_map(|gpu| gpu.peak_temperature_c)
        .max();
    let mut peaks = Vec::new();
    if let Some(watts) = peak_w {
        peaks.push(format!("{watts:.0} W"));
    }
    if let Some(celsius) = peak_c {
        peaks.push(format!("{celsius} °C"));
    }
    let estimated = if record.energy_estimated {
        " (estimated)"
    } else {
        ""
    };
    Some(format!(
        "gputune: {} GPU{} on {}, {}{estimated}{}",
        record.gpus.len(),
        if record.gpus.len() == 1 { "" } else { "s" },
        record.node,
        gputune_core::jobs::cost::cost_line(record.energy_j, record.cost.as_ref()),
        if peaks.is_empty() {
            String::new()
        } else {
            format!(" (peak {})", peaks.join(", "))
        }
    ))
}

fn job_info(spank: SpankHandle) -> Result<JobInfo, String> {
    let mut job_id: u32 = 0;
    let mut step_id: u32 = 0;
    let mut uid: u32 = u32::MAX;
    // SAFETY: each item's documented out type (uint32_t, uint32_t, uid_t).
    let read = unsafe {
        [
            ffi::spank_get_item(spank, ffi::S_JOB_ID, &mut job_id as *mut u32),
            ffi::spank_get_item(spank, ffi::S_JOB_STEPID, &mut step_id as *mut u32),
            ffi::spank_get_item(spank, ffi::S_JOB_UID, &mut uid as *mut u32),
        ]
    };
    if read.iter().any(|&code| code != ffi::SUCCESS) || job_id == 0 {
        return Err("gputune: Slurm did not say which job this step belongs to.".to_string());
    }
    let step = match step_id {
        ffi::SLURM_BATCH_SCRIPT => "batch".to_string(),
        ffi::SLURM_EXTERN_CONT => "extern".to_string(),
        ffi::SLURM_INTERACTIVE_STEP => "interactive".to_string(),
        ffi::SLURM_PENDING_STEP => "pending".to_string(),
        number => number.to_string(),
    };
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |user| user.name);
    Ok(JobInfo {
        scheduler: "slurm".to_string(),
        job_id: job_id.to_string(),
        step,
        user,
        uid,
    })
}

/// A variable of the job's environment.
fn getenv(spank: SpankHandle, name: &CStr) -> Option<String> {
    let mut buffer = vec![0u8; 8192];
    // SAFETY: a valid handle, a NUL-terminated name and a buffer of the length given.
    let code = unsafe {
        ffi::spank_getenv(
            spank,
            name.as_ptr(),
            buffer.as_mut_ptr().cast::<c_char>(),
            buffer.len() as c_int,
        )
    };
    if code != ffi::SUCCESS {
        return None;
    }
    let end = buffer.iter().position(|&byte| byte == 0)?;
    Some(String::from_utf8_lossy(&buffer[..end]).into_owned())
}

/// Sets a variable in the job's environment (what the job is told).
fn setenv(spank: SpankHandle, name: &CStr, value: &str) {
    if let Ok(value) = CString::new(value.replace('\0', " ")) {
        // SAFETY: a valid handle and two NUL-terminated strings.
        unsafe { ffi::spank_setenv(spank, name.as_ptr(), value.as_ptr(), 1) };
    }
}
