//! The frame every export runs in: no panic crosses the C boundary, nothing runs before
//! `nvmlInit`, pointers are checked for null, handles are checked against the machine, and
//! every device call is counted.

use std::ffi::{c_char, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use nvml_wrapper_sys::bindings::nvmlDevice_t;

use crate::codes::{
    Code, DRIVER_NOT_LOADED, GPU_IS_LOST, INSUFFICIENT_SIZE, INVALID_ARGUMENT, NO_PERMISSION,
    NOT_SUPPORTED, SUCCESS, UNINITIALIZED, UNKNOWN, code_of, sim_error_code,
};
use crate::faults::Faults;
use crate::state::{FakeState, WriteRecord};
use crate::store::with_state;
use gputune_core::clock::wall_clock_ms;
use gputune_core::device::sim::{SimGpu, apply_to_sim};
use gputune_formats::card::Setting;

/// How many `nvmlInit` calls have not yet been matched by `nvmlShutdown`.
static INIT_COUNT: AtomicU32 = AtomicU32::new(0);

/// Runs `body`, turning a panic into `UNKNOWN`: unwinding into C is undefined behaviour.
pub(crate) fn guarded(body: impl FnOnce() -> Code) -> Code {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(UNKNOWN)
}

/// The faults in force, or `UNKNOWN` (said on stderr) when the list does not parse.
fn current_faults() -> Result<Faults, Code> {
    Faults::from_env().map_err(|message| {
        eprintln!("fake-nvml: {message}");
        UNKNOWN
    })
}

/// `nvmlInit_v2`: checks the faults, creates the state if needed, counts one more user.
pub(crate) fn init() -> Code {
    guarded(|| {
        let faults = match current_faults() {
            Ok(faults) => faults,
            Err(code) => return code,
        };
        faults.delay();
        if faults.driver_not_loaded {
            return DRIVER_NOT_LOADED;
        }
        // Touching the state now fixes the scenario at the first init and shows a corrupt
        // state file at once, as a broken driver install would.
        if let Err(code) = with_state(|_| ()) {
            return code;
        }
        INIT_COUNT.fetch_add(1, Ordering::SeqCst);
        SUCCESS
    })
}

/// `nvmlShutdown`: one user fewer; `UNINITIALIZED` when there was none.
pub(crate) fn shutdown() -> Code {
    guarded(|| {
        if let Ok(faults) = Faults::from_env() {
            faults.delay();
        }
        match INIT_COUNT.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |count| {
            count.checked_sub(1)
        }) {
            Ok(_) => SUCCESS,
            Err(_) => UNINITIALIZED,
        }
    })
}

/// Runs an API call that needs NVML initialized, with the faults in force.
pub(crate) fn api_call(body: impl FnOnce(&Faults) -> Result<(), Code>) -> Code {
    guarded(|| {
        if INIT_COUNT.load(Ordering::SeqCst) == 0 {
            return UNINITIALIZED;
        }
        let faults = match current_faults() {
            Ok(faults) => faults,
            Err(code) => return code,
        };
        faults.delay();
        code_of(&body(&faults))
    })
}

/// The handle for GPU `index`: `index + 1` as a pointer. NVML handles are opaque and callers
/// never dereference them, so no memory is behind it.
pub(crate) fn handle_for(index: u32) -> nvmlDevice_t {
    std::ptr::without_provenance_mut(index as usize + 1)
}

/// The GPU index a handle names, if it names one in this machine.
pub(crate) fn index_of(
    state: &FakeState,
    faults: &Faults,
    handle: nvmlDevice_t,
) -> Result<u32, Code> {
    let index = handle.addr().checked_sub(1).ok_or(INVALID_ARGUMENT)?;
    if faults.no_gpus || index >= state.machine.gpus.len() {
        return Err(INVALID_ARGUMENT);
    }
    // The machine went down (a tripped supply): every card is lost until a fresh state.
    if state.machine.down.is_some() {
        return Err(GPU_IS_LOST);
    }
    u32::try_from(index).map_err(|_| INVALID_ARGUMENT)
}

/// Runs `body` on the GPU `handle` names, as one counted device call.
pub(crate) fn on_gpu<T>(
    faults: &Faults,
    handle: nvmlDevice_t,
    body: impl FnOnce(&mut SimGpu) -> Result<T, Code>,
) -> Result<T, Code> {
    on_state(faults, handle, |state, index| {
        let gpu = state
            .machine
            .gpus
            .get_mut(index as usize)
            .ok_or(INVALID_ARGUMENT)?;
        body(gpu)
    })
}

/// Runs `body` on the whole state and the index of the GPU `handle` names, as one counted
/// device call (for what the state keeps beside the cards, such as their processes).
pub(crate) fn on_state<T>(
    faults: &Faults,
    handle: nvmlDevice_t,
    body: impl FnOnce(&mut FakeState, u32) -> Result<T, Code>,
) -> Result<T, Code> {
    with_state(|state| {
        let calls_before = count_device_call(state);
        let index = index_of(state, faults, handle)?;
        if faults.gpu_lost(calls_before) {
            return Err(GPU_IS_LOST);
        }
        body(state, index)
    })?
}

/// Applies `setting` to the GPU `handle` names, as the driver would, and logs the attempt.
pub(crate) fn write_setting(
    faults: &Faults,
    handle: nvmlDevice_t,
    function: &str,
    setting: Setting,
) -> Result<(), Code> {
    with_state(|state| {
        let calls_before = count_device_call(state);
        let index = index_of(state, faults, handle)?;
        let result = if faults.gpu_lost(calls_before) {
            Err(GPU_IS_LOST)
        } else if faults.no_permission {
            Err(NO_PERMISSION)
        } else if faults.refuses(&setting) {
            Err(NOT_SUPPORTED)
        } else {
            match state.machine.gpus.get_mut(index as usize) {
                Some(gpu) => apply_to_sim(gpu, &setting).map_err(|error| sim_error_code(&error)),
                None => Err(INVALID_ARGUMENT),
            }
        };
        state.write_log.push(WriteRecord {
            time_ms: wall_clock_ms(),
            gpu_index: index,
            function: function.to_owned(),
            setting,
            result_code: code_of(&result),
        });
        result
    })?
}

/// Counts one device call and returns how many came before it.
fn count_device_call(state: &mut FakeState) -> u64 {
    let before = state.device_calls;
    state.device_calls = before.saturating_add(1);
    before
}

/// A caller's pointer, checked for null before any work is done.
pub(crate) struct Ptr<T>(NonNull<T>);

impl<T> Ptr<T> {
    /// `INVALID_ARGUMENT` for a null pointer, as NVML answers.
    pub(crate) fn new(pointer: *mut T) -> Result<Ptr<T>, Code> {
        NonNull::new(pointer).map(Ptr).ok_or(INVALID_ARGUMENT)
    }

    /// Stores `value` through the pointer.
    ///
    /// # Safety
    /// The pointer must be valid for a write of `T` (the caller's side of NVML's contract).
    pub(crate) unsafe fn write(&self, value: T) {
        // SAFETY: non-null by construction, valid for writes by this function's contract.
        unsafe { self.0.as_ptr().write(value) }
    }

    /// Reads the value behind the pointer (for in/out structs).
    ///
    /// # Safety
    /// The pointer must be valid for a read of an initialized `T`.
    pub(crate) unsafe fn read(&self) -> T
    where
        T: Copy,
    {
        // SAFETY: non-null by construction, valid for reads by this function's contract.
        unsafe { self.0.as_ptr().read() }
    }
}

/// Copies `text` and a closing NUL into a caller's buffer of `length` bytes.
///
/// # Safety
/// `buffer` must be null or valid for writes of `length` bytes.
pub(crate) unsafe fn write_c_string(
    buffer: *mut c_char,
    length: c_uint,
    text: &str,
) -> Result<(), Code> {
    let buffer = Ptr::new(buffer)?;
    let bytes = text.as_bytes();
    if bytes.len() >= length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: the buffer holds `length` bytes, more than `bytes.len() + 1`.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr().cast::<c_char>(),
            buffer.0.as_ptr(),
            bytes.len(),
        );
        buffer.0.as_ptr().add(bytes.len()).write(0);
    }
    Ok(())
}

/// Copies a list into a caller's array NVML-style: `count` says how many entries the array
/// holds on the way in and how many were written (or are needed) on the way out. An empty list
/// is a success whatever the array.
///
/// # Safety
/// `count` must be null or valid for reads and writes; `array` must be null or valid for
/// writes of `*count` entries.
pub(crate) unsafe fn write_list<T: Copy>(
    count: *mut c_uint,
    array: *mut T,
    values: &[T],
) -> Result<(), Code> {
    let count = Ptr::new(count)?;
    let needed = c_uint::try_from(values.len()).map_err(|_| UNKNOWN)?;
    // SAFETY: `count` is valid for reads and writes by this function's contract.
    let room = unsafe { count.read() };
    if room < needed {
        // SAFETY: as above.
        unsafe { count.write(needed) };
        return Err(INSUFFICIENT_SIZE);
    }
    if values.is_empty() {
        // SAFETY: as above.
        unsafe { count.write(0) };
        return Ok(());
    }
    let array = Ptr::new(array)?;
    // SAFETY: the array holds `room >= values.len()` entries.
    unsafe {
        std::ptr::copy_nonoverlapping(values.as_ptr(), array.0.as_ptr(), values.len());
        count.write(needed);
    }
    Ok(())
}

/// The common shape of a getter: one value out, read from one GPU.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn get_from_gpu<T>(
    handle: nvmlDevice_t,
    out: *mut T,
    read: impl FnOnce(&Faults, &mut SimGpu) -> Result<T, Code>,
) -> Code {
    api_call(|faults| {
        let out = Ptr::new(out)?;
        let value = on_gpu(faults, handle, |gpu| read(faults, gpu))?;
        // SAFETY: valid for writes by this function's contract.
        unsafe { out.write(value) };
        Ok(())
    })
}
