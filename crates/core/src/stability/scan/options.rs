//! The scanner's options, checked against the card before anything runs.

use crate::stability::rounds::{LONGEST_CHECK_S, SHORTEST_CHECK_S};
use gputune_formats::reports::scan::ScanOptions;
use gputune_formats::tuning::GpuInfo;

/// Checks what the user asked for against `gpu` (`lock_mhz` None: the rated boost clock).
pub fn scan_options(
    gpu: &GpuInfo,
    lock_mhz: Option<u32>,
    step_mhz: i32,
    step_s: f64,
    margin_steps: u32,
    confirm_s: f64,
) -> Result<ScanOptions, String> {
    let index = gpu.identity.index;
    let Some(offsets) = gpu.constraints.adjustable_gpu_clock_offset_range() else {
        return Err(format!(
            "GPU {index} ({}) takes no graphics clock offset, so there is no undervolt to find (datacenter cards and drivers before 555 have none).",
            gpu.identity.name
        ));
    };
    let Some(range) = gpu.constraints.gpu_clock_range else {
        return Err(format!(
            "GPU {index} does not say which clocks it can lock, so the scanner cannot lock one."
        ));
    };
    let lock_mhz = match lock_mhz.or(gpu.constraints.boost_clock_mhz) {
        Some(lock) => lock,
        None => {
            return Err(format!(
                "GPU {index} does not report its boost clock: give the clock to lock with --lock-mhz ({}-{} MHz).",
                range.min_mhz, range.max_mhz
            ));
        }
    };
    if !(range.min_mhz..=range.max_mhz).contains(&lock_mhz) {
        return Err(format!(
            "--lock-mhz {lock_mhz}: GPU {index} locks clocks from {} to {} MHz.",
            range.min_mhz, range.max_mhz
        ));
    }
    if !(1..=200).contains(&step_mhz) {
        return Err(format!(
            "--step-mhz {step_mhz}: give 1 to 200 MHz (15 is one boost bin)."
        ));
    }
    for (name, seconds) in [("--step-s", step_s), ("--confirm-s", confirm_s)] {
        if !seconds.is_finite() || !(SHORTEST_CHECK_S..=LONGEST_CHECK_S).contains(&seconds) {
            return Err(format!(
                "{name} {seconds}: give {SHORTEST_CHECK_S} to {LONGEST_CHECK_S} seconds."
            ));
        }
    }
    if margin_steps > 10 {
        return Err(format!(
            "--margin-steps {margin_steps}: give 0 to 10 steps."
        ));
    }
    Ok(ScanOptions {
        lock_mhz,
        step_mhz,
        step_s,
        margin_steps,
        confirm_s,
        max_offset_mhz: offsets.max_mhz.max(0),
    })
}
