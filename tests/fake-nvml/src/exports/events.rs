//! Event sets: the critical errors (Xids) a GPU reports. Each Xid 13 a simulated card raises
//! (when it goes busy past its silicon's hard limit, gputune's `device::sim::silicon`) is
//! reported once to every set its GPU was registered to before it happened. And the fake
//! reports one more, Xid 13 on the first GPU registered, when the fault `xid_after_ms=N` is in
//! force and the set is N ms old; once per set. Sets live in this process.

use std::ffi::{c_uint, c_ulonglong};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlEventData_t, nvmlEventSet_t, nvmlReturn_t};

use crate::call::{Ptr, api_call};
use crate::codes::{Code, INVALID_ARGUMENT, NOT_SUPPORTED, TIMEOUT};
use crate::store::with_state;

/// NVML's event type for critical errors (`nvmlEventTypeXidCriticalError`).
const XID_CRITICAL_ERROR: c_ulonglong = 8;
/// The Xid the fake reports: a graphics engine exception, what an unstable clock gives.
const FAKE_XID: c_ulonglong = 13;

struct FakeEventSet {
    created: Instant,
    /// Devices registered for critical errors, in order.
    devices: Vec<usize>,
    /// Per registered device, the Xids its card had raised that this set has reported (or
    /// that came before it was registered).
    seen_xids: Vec<u64>,
    fired: bool,
    freed: bool,
}

/// How often a wait looks at the cards' Xids (the simulation steps 100 ms at a time).
const XID_POLL: Duration = Duration::from_millis(100);

/// Every set this process made; a set's handle is its position + 1.
static SETS: Mutex<Vec<FakeEventSet>> = Mutex::new(Vec::new());

fn set_index(set: nvmlEventSet_t) -> Result<usize, u32> {
    set.addr().checked_sub(1).ok_or(INVALID_ARGUMENT)
}

/// NVML: a new, empty event set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    api_call(|_| {
        let out = Ptr::new(set)?;
        let mut sets = SETS.lock().unwrap_or_else(PoisonError::into_inner);
        sets.push(FakeEventSet {
            created: Instant::now(),
            devices: Vec::new(),
            seen_xids: Vec::new(),
            fired: false,
            freed: false,
        });
        // SAFETY: NVML's contract: the pointer is valid for a write.
        unsafe { out.write(std::ptr::without_provenance_mut(sets.len())) };
        Ok(())
    })
}

/// NVML: reports `event_types` of `device` to `set` (critical errors only, here).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    event_types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    api_call(|_| {
        if event_types & !XID_CRITICAL_ERROR != 0 {
            return Err(NOT_SUPPORTED);
        }
        let device_index = device.addr().checked_sub(1).ok_or(INVALID_ARGUMENT)?;
        let index = set_index(set)?;
        let seen = *xid_counts()?.get(device_index).ok_or(INVALID_ARGUMENT)?;
        let mut sets = SETS.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = sets
            .get_mut(index)
            .filter(|entry| !entry.freed)
            .ok_or(INVALID_ARGUMENT)?;
        entry.devices.push(device_index);
        entry.seen_xids.push(seen);
        Ok(())
    })
}

/// NVML: waits up to `timeout_ms` for an event on `set`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let out = Ptr::new(data)?;
        let index = set_index(set)?;
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        let mut next_poll = Instant::now();
        loop {
            let fault_due = {
                let mut sets = SETS.lock().unwrap_or_else(PoisonError::into_inner);
                let entry = sets
                    .get_mut(index)
                    .filter(|entry| !entry.freed)
                    .ok_or(INVALID_ARGUMENT)?;
                match (faults.xid_after_ms, entry.devices.first()) {
                    (Some(after_ms), Some(&device))
                        if !entry.fired
                            && entry.created.elapsed() >= Duration::from_millis(after_ms) =>
                    {
                        entry.fired = true;
                        Some(device)
                    }
                    _ => None,
                }
            };
            let due = match fault_due {
                Some(device) => Some(device),
                None if Instant::now() >= next_poll => {
                    next_poll = Instant::now() + XID_POLL;
                    unseen_xid(index, &xid_counts()?)?
                }
                None => None,
            };
            if let Some(device) = due {
                let event = nvmlEventData_t {
                    device: std::ptr::without_provenance_mut(device + 1),
                    eventType: XID_CRITICAL_ERROR,
                    eventData: FAKE_XID,
                    gpuInstanceId: 0,
                    computeInstanceId: 0,
                };
                // SAFETY: NVML's contract: the pointer is valid for a write.
                unsafe { out.write(event) };
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(TIMEOUT);
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
        }
    })
}

/// Every card's Xid count (not a device call: it is not counted for `gpu_lost_after`).
fn xid_counts() -> Result<Vec<u64>, Code> {
    with_state(|state| state.machine.gpus.iter().map(|gpu| gpu.xid_count).collect())
}

/// The first device of set `index` whose card raised an Xid the set has not reported, now
/// marked as reported.
fn unseen_xid(index: usize, counts: &[u64]) -> Result<Option<usize>, Code> {
    let mut sets = SETS.lock().unwrap_or_else(PoisonError::into_inner);
    let entry = sets
        .get_mut(index)
        .filter(|entry| !entry.freed)
        .ok_or(INVALID_ARGUMENT)?;
    let FakeEventSet {
        devices, seen_xids, ..
    } = entry;
    for (device, seen) in devices.iter().zip(seen_xids.iter_mut()) {
        if counts.get(*device).is_some_and(|count| count > seen) {
            *seen += 1;
            return Ok(Some(*device));
        }
    }
    Ok(None)
}

/// NVML: frees an event set.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    api_call(|_| {
        let index = set_index(set)?;
        let mut sets = SETS.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = sets
            .get_mut(index)
            .filter(|entry| !entry.freed)
            .ok_or(INVALID_ARGUMENT)?;
        entry.freed = true;
        Ok(())
    })
}
