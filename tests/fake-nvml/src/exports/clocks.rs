//! Clocks: what the card supports, what it runs at, and its clock offsets (all MHz).

use std::ffi::c_uint;

use gputune_core::device::sim::{OffsetClock, SimGpu};
use nvml_wrapper_sys::bindings::{
    nvmlClockId_t, nvmlClockOffset_t, nvmlClockType_t, nvmlDevice_t, nvmlPstates_t, nvmlReturn_t,
};

use crate::call::{Ptr, api_call, get_from_gpu, on_gpu, write_list};
use crate::codes::{
    ARGUMENT_VERSION_MISMATCH, Code, INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED,
    struct_version,
};
use crate::enums::{CLOCK_GRAPHICS, CLOCK_MEMORY, CLOCK_SM, CLOCK_VIDEO};

/// Highest P-state number NVML knows (P15).
const LAST_PSTATE: u32 = 15;

/// NVML: the memory clocks the card can run at, descending.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedMemoryClocks(
    device: nvmlDevice_t,
    count: *mut c_uint,
    clocks_mhz: *mut c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let clocks = on_gpu(faults, device, |gpu| {
            Ok(gpu.spec.memory_clocks_supported_mhz.clone())
        })?;
        // SAFETY: NVML's contract: `count` is valid, `clocks_mhz` holds `*count` entries.
        unsafe { write_list(count, clocks_mhz, &clocks) }
    })
}

/// NVML: the graphics clocks the card can run at with memory at `memory_clock_mhz`, descending.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedGraphicsClocks(
    device: nvmlDevice_t,
    memory_clock_mhz: c_uint,
    count: *mut c_uint,
    clocks_mhz: *mut c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let clocks = on_gpu(faults, device, |gpu| {
            if !gpu
                .spec
                .memory_clocks_supported_mhz
                .contains(&memory_clock_mhz)
            {
                return Err(NOT_FOUND);
            }
            Ok(supported_graphics_clocks_mhz(gpu))
        })?;
        // SAFETY: NVML's contract: `count` is valid, `clocks_mhz` holds `*count` entries.
        unsafe { write_list(count, clocks_mhz, &clocks) }
    })
}

/// NVML: the highest clock of a kind the card can reach.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    clock_mhz: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, clock_mhz, |_, gpu| match clock_type {
            CLOCK_GRAPHICS | CLOCK_SM => Ok(gpu.spec.gpu_clock_supported.max_mhz),
            CLOCK_MEMORY => gpu
                .spec
                .memory_clocks_supported_mhz
                .iter()
                .copied()
                .max()
                .ok_or(NOT_SUPPORTED),
            other => unmodelled_clock(other),
        })
    }
}

/// NVML: a clock of a kind by its id: the current one, or the rated boost clock (customer
/// boost maximum); the application clocks are not modelled.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClock(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    clock_id: nvmlClockId_t,
    clock_mhz: *mut c_uint,
) -> nvmlReturn_t {
    const CLOCK_ID_CURRENT: nvmlClockId_t = 0;
    const CLOCK_ID_CUSTOMER_BOOST_MAX: nvmlClockId_t = 3;
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, clock_mhz, |_, gpu| match (clock_type, clock_id) {
            (CLOCK_GRAPHICS | CLOCK_SM, CLOCK_ID_CURRENT) => Ok(gpu.reading.gpu_clock_mhz),
            (CLOCK_MEMORY, CLOCK_ID_CURRENT) => Ok(gpu.reading.memory_clock_mhz),
            (CLOCK_GRAPHICS | CLOCK_SM, CLOCK_ID_CUSTOMER_BOOST_MAX) => {
                Ok(gpu.spec.boost_clock_mhz)
            }
            (CLOCK_GRAPHICS | CLOCK_SM | CLOCK_MEMORY, _) => Err(NOT_SUPPORTED),
            (other, _) => unmodelled_clock(other),
        })
    }
}

/// NVML: the clock of a kind now. The SM clock is the graphics clock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    clock_mhz: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, clock_mhz, |_, gpu| match clock_type {
            CLOCK_GRAPHICS | CLOCK_SM => Ok(gpu.reading.gpu_clock_mhz),
            CLOCK_MEMORY => Ok(gpu.reading.memory_clock_mhz),
            other => unmodelled_clock(other),
        })
    }
}

/// NVML: the offset of the graphics or memory clock in one P-state, with the range it may be
/// set in (NOT_SUPPORTED for a P-state the card reports no offset for).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockOffsets(
    device: nvmlDevice_t,
    info: *mut nvmlClockOffset_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let info = Ptr::new(info)?;
        // SAFETY: NVML's contract: `info` is valid for reads and writes.
        let request = unsafe { info.read() };
        check_offset_request(&request)?;
        if faults.offsets_not_supported {
            // Still a device call, so it counts towards `gpu_lost_after`.
            return on_gpu(faults, device, |_| Err(NOT_SUPPORTED));
        }
        let (offset_mhz, range) = on_gpu(faults, device, |gpu| {
            let clock = match request.type_ {
                CLOCK_GRAPHICS => OffsetClock::Gpu,
                _ => OffsetClock::Memory,
            };
            let range = gpu
                .spec
                .offset_range_at(clock, request.pstate)
                .ok_or(NOT_SUPPORTED)?;
            let offset_mhz = gpu.offset_at(clock, request.pstate).ok_or(NOT_SUPPORTED)?;
            Ok((offset_mhz, range))
        })?;
        // SAFETY: as above.
        unsafe {
            info.write(nvmlClockOffset_t {
                clockOffsetMHz: offset_mhz,
                minClockOffsetMHz: range.min_mhz,
                maxClockOffsetMHz: range.max_mhz,
                ..request
            });
        }
        Ok(())
    })
}

/// NVML: the P-states the card can be in, fastest first; the rest of the array (its size is
/// in bytes, as nvml-wrapper passes it) is filled with NVML_PSTATE_UNKNOWN (32).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedPerformanceStates(
    device: nvmlDevice_t,
    pstates: *mut nvmlPstates_t,
    size: c_uint,
) -> nvmlReturn_t {
    const PSTATE_UNKNOWN: nvmlPstates_t = 32;
    api_call(|faults| {
        if pstates.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        if faults.pstates_not_listed {
            return on_gpu(faults, device, |_| Err(NOT_SUPPORTED));
        }
        let listed = on_gpu(faults, device, |gpu| Ok(card_pstates(gpu)))?;
        let room = size as usize / std::mem::size_of::<nvmlPstates_t>();
        if room < listed.len() {
            return Err(INSUFFICIENT_SIZE);
        }
        for slot in 0..room {
            let value = listed.get(slot).copied().unwrap_or(PSTATE_UNKNOWN);
            // SAFETY: NVML's contract: `pstates` holds `size` bytes, so `room` entries.
            unsafe { pstates.add(slot).write(value) };
        }
        Ok(())
    })
}

/// The P-states a simulated card runs in or reports offsets for, ascending.
fn card_pstates(gpu: &SimGpu) -> Vec<u32> {
    let mut pstates: Vec<u32> = gpu
        .spec
        .offset_pstates()
        .into_iter()
        .map(|(pstate, _)| pstate)
        .chain([
            gpu.spec.performance_state_load,
            gpu.spec.performance_state_idle,
        ])
        .collect();
    pstates.sort_unstable();
    pstates.dedup();
    pstates
}

/// Checks a clock-offset struct's version, clock (graphics or memory) and P-state.
pub(super) fn check_offset_request(request: &nvmlClockOffset_t) -> Result<(), Code> {
    if request.version != struct_version::<nvmlClockOffset_t>(1) {
        return Err(ARGUMENT_VERSION_MISMATCH);
    }
    let known_clock = matches!(request.type_, CLOCK_GRAPHICS | CLOCK_MEMORY);
    if !known_clock || request.pstate > LAST_PSTATE {
        return Err(INVALID_ARGUMENT);
    }
    Ok(())
}

/// The video clock is not simulated; anything past it is not a clock.
fn unmodelled_clock(clock_type: nvmlClockType_t) -> Result<u32, Code> {
    if clock_type == CLOCK_VIDEO {
        Err(NOT_SUPPORTED)
    } else {
        Err(INVALID_ARGUMENT)
    }
}

/// Every boost bin from the top supported graphics clock down to the lowest, as NVML lists them.
fn supported_graphics_clocks_mhz(gpu: &SimGpu) -> Vec<u32> {
    let range = gpu.spec.gpu_clock_supported;
    let bin_mhz = gpu.spec.clock_bin_mhz.max(1);
    let mut clocks: Vec<u32> = (range.min_mhz..=range.max_mhz)
        .rev()
        .step_by(bin_mhz as usize)
        .collect();
    if clocks.last() != Some(&range.min_mhz) {
        clocks.push(range.min_mhz);
    }
    clocks
}
