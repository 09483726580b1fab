//! The functions Slurm calls (slurm/spank.h's `slurm_spank_*`), each under `guarded`: options
//! registered and checked, the step's cards held at its start and let go at its end, the job's
//! cards recorded by its prolog.

use std::ffi::{CStr, c_char, c_int};

use crate::ffi::{self, SpankHandle};
use crate::policy::Policy;
use crate::step::{end_step, job_id, start_step};
use crate::{
    OPTION_OFF, OPTION_POWER, OPTION_PROFILE, allocation, arguments, ask, gpus, guarded, say_error,
    say_info, with_state,
};

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
