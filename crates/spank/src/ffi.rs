//! The few SPANK calls the plugin makes (slurm/spank.h), declared by hand: they are resolved
//! when slurmstepd, srun, sbatch or salloc load the plugin, so building it needs only the
//! release number (build.rs), not Slurm's libraries or a running Slurm.

use std::ffi::{c_char, c_int, c_void};

/// `spank_t`: Slurm's handle, opaque.
pub type SpankHandle = *mut c_void;

/// `spank_opt_cb_f`.
pub type OptionCallback = extern "C" fn(val: c_int, optarg: *const c_char, remote: c_int) -> c_int;

/// `struct spank_option`.
#[repr(C)]
pub struct SpankOption {
    pub name: *const c_char,
    pub arginfo: *const c_char,
    pub usage: *const c_char,
    pub has_arg: c_int,
    pub val: c_int,
    pub cb: Option<OptionCallback>,
}

/// `ESPANK_SUCCESS`.
pub const SUCCESS: c_int = 0;

/// `enum spank_context`.
pub const CTX_LOCAL: c_int = 1;
pub const CTX_REMOTE: c_int = 2;
pub const CTX_ALLOCATOR: c_int = 3;

/// `enum spank_item` (the first four).
pub const S_JOB_UID: c_int = 0;
pub const S_JOB_ID: c_int = 2;
pub const S_JOB_STEPID: c_int = 3;
pub const S_JOB_LOCAL_TASK_COUNT: c_int = 6;

/// Slurm's special step ids (slurm.h).
pub const SLURM_PENDING_STEP: u32 = 0xffff_fffd;
pub const SLURM_EXTERN_CONT: u32 = 0xffff_fffc;
pub const SLURM_BATCH_SCRIPT: u32 = 0xffff_fffb;
pub const SLURM_INTERACTIVE_STEP: u32 = 0xffff_fffa;

unsafe extern "C" {
    pub fn spank_context() -> c_int;
    pub fn spank_option_register(spank: SpankHandle, option: *const SpankOption) -> c_int;
    pub fn spank_get_item(spank: SpankHandle, item: c_int, ...) -> c_int;
    pub fn spank_getenv(
        spank: SpankHandle,
        var: *const c_char,
        buf: *mut c_char,
        len: c_int,
    ) -> c_int;
    pub fn spank_setenv(
        spank: SpankHandle,
        var: *const c_char,
        val: *const c_char,
        overwrite: c_int,
    ) -> c_int;
    pub fn slurm_info(format: *const c_char, ...);
    pub fn slurm_error(format: *const c_char, ...);
}
