//! Clock offsets per P-state. NVML's `nvmlDevice{Get,Set}ClockOffsets` name one P-state each:
//! gputune reads every P-state the card lists, and writes an offset for compute to each
//! P-state compute runs in (P0 and P2, each the card offers offsets in). Some cards link P0
//! and P2 (a write to one moves the other: LACT found it on Maxwell) and later ones do not, so
//! the second state is read back after the first write and written only if it did not follow.

use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::device::{Clock, PerformanceState};
use nvml_wrapper::error::NvmlError;

use crate::device::adjustable_compute_pstates;
use gputune_formats::card::{PstateOffset, PstateOffsetRange};

/// One P-state's offset as NVML reports it, with its range.
#[derive(Debug, Clone, Copy)]
pub(super) struct PstateReading {
    pub pstate: u32,
    pub offset_mhz: i32,
    pub min_mhz: i32,
    pub max_mhz: i32,
}

impl PstateReading {
    pub fn range(&self) -> PstateOffsetRange {
        PstateOffsetRange {
            pstate: self.pstate,
            min_mhz: self.min_mhz,
            max_mhz: self.max_mhz,
        }
    }

    pub fn offset(&self) -> PstateOffset {
        PstateOffset {
            pstate: self.pstate,
            offset_mhz: self.offset_mhz,
        }
    }
}

/// Whether an error only says "not here" (this P-state, this driver), not that the card or the
/// driver failed.
fn absent(error: &NvmlError) -> bool {
    matches!(
        error,
        NvmlError::NotSupported
            | NvmlError::InvalidArg
            | NvmlError::FunctionNotFound
            | NvmlError::FailedToLoadSymbol(_)
    )
}

/// The P-states to read offsets of: the ones the card lists, or P0 alone when the driver
/// cannot list them (what gputune read before it knew P-states).
pub(super) fn listed_pstates(device: &Device<'_>) -> Result<Vec<PerformanceState>, NvmlError> {
    match device.supported_performance_states() {
        Ok(states) if !states.is_empty() => Ok(states),
        Ok(_) => Ok(vec![PerformanceState::Zero]),
        Err(error) if absent(&error) => Ok(vec![PerformanceState::Zero]),
        Err(error) => Err(error),
    }
}

/// Each P-state's offset of `clock`, for the P-states that report one. A card that reports
/// none answers with the first P-state's error (NOT_SUPPORTED: no offsets at all).
pub(super) fn read(
    device: &Device<'_>,
    clock: Clock,
    pstates: &[PerformanceState],
) -> Result<Vec<PstateReading>, NvmlError> {
    let mut readings = Vec::new();
    let mut first_error = None;
    for &pstate in pstates {
        match device.clock_offset(clock, pstate) {
            Ok(offset) => readings.push(PstateReading {
                pstate: pstate.as_c(),
                offset_mhz: offset.clock_offset_mhz,
                min_mhz: offset.min_clock_offset_mhz,
                max_mhz: offset.max_clock_offset_mhz,
            }),
            Err(error) if absent(&error) => {
                first_error.get_or_insert(error);
            }
            Err(error) => return Err(error),
        }
    }
    match first_error {
        Some(error) if readings.is_empty() => Err(error),
        _ => Ok(readings),
    }
}

/// Sets `offset_mhz` on every P-state compute runs in that takes an offset (P0's alone when
/// the card offers none of them room, which the driver then refuses or takes as before). A
/// state that already has the value after the first write (linked to it) is not written again.
/// When a later write fails, the states written before get their values back, so a refused
/// setting leaves nothing behind.
pub(super) fn set_for_compute(
    device: &mut Device<'_>,
    clock: Clock,
    pstates: &[PerformanceState],
    offset_mhz: i32,
) -> Result<(), NvmlError> {
    // A driver that reports no offset here still gets P0's write, to take or refuse as before.
    let before = match read(device, clock, pstates) {
        Ok(readings) => readings,
        Err(error) if absent(&error) => Vec::new(),
        Err(error) => return Err(error),
    };
    let ranges: Vec<PstateOffsetRange> = before.iter().map(PstateReading::range).collect();
    let targets = adjustable_compute_pstates(&ranges);
    if targets.is_empty() {
        return device.set_clock_offset(clock, PerformanceState::Zero, offset_mhz);
    }
    let mut written: Vec<(PerformanceState, i32)> = Vec::new();
    for (position, pstate_number) in targets.iter().enumerate() {
        let pstate = PerformanceState::try_from(*pstate_number)?;
        let now = device.clock_offset(clock, pstate)?;
        if position > 0 && now.clock_offset_mhz == offset_mhz {
            continue;
        }
        if let Err(error) = device.set_clock_offset(clock, pstate, offset_mhz) {
            for (earlier, previous_mhz) in written.into_iter().rev() {
                if let Err(undo) = device.set_clock_offset(clock, earlier, previous_mhz) {
                    tracing::error!(
                        "P{}'s clock offset could not be put back to {previous_mhz:+} MHz after a refused write: {undo}",
                        earlier.as_c()
                    );
                }
            }
            return Err(error);
        }
        written.push((pstate, now.clock_offset_mhz));
    }
    Ok(())
}

/// Sets one P-state's offset.
pub(super) fn set_at(
    device: &mut Device<'_>,
    clock: Clock,
    pstate: u32,
    offset_mhz: i32,
) -> Result<(), NvmlError> {
    let pstate = PerformanceState::try_from(pstate)?;
    device.set_clock_offset(clock, pstate, offset_mhz)
}
