//! Readings that change slowly or never and that no setting of ours moves (the fan count, the
//! PCIe link, the ECC error counters), read at most once a second per GPU instead of at every sample: on the fake
//! library at 100 ms the sampler made about 19 calls a sample against nvtop's 10. The enforced
//! power limit is not one of them: the engine writes it through another handle, and the
//! readings must show the new limit at the next sample.

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};

use super::errors::optional;
use gputune_formats::card::{DeviceError, EccCounts};

/// How long slow readings are kept.
pub const SLOW_EVERY_MS: u64 = 1_000;

/// One GPU's slow readings and when they were taken (monotonic milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowReadings {
    pub read_at_ms: u64,
    pub fan_count: u32,
    pub pcie_link_gen: Option<u32>,
    pub pcie_link_width: Option<u32>,
    pub pcie_link_gen_max: Option<u32>,
    pub pcie_link_width_max: Option<u32>,
    /// `None`: the card has no ECC, has it off, or does not say.
    pub ecc: Option<EccCounts>,
}

impl SlowReadings {
    /// Whether these readings still stand at `now_ms`.
    pub fn fresh_at(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.read_at_ms) < SLOW_EVERY_MS
    }
}

/// The volatile ECC counters (since the driver loaded); `None` when the card has no ECC or has
/// it off (NOT_SUPPORTED, as on GeForce cards), or does not answer.
pub fn ecc_counts(
    device: &nvml_wrapper::Device<'_>,
    index: u32,
) -> Result<Option<EccCounts>, DeviceError> {
    let count = |error_type| device.total_ecc_errors(error_type, EccCounter::Volatile);
    let Some(corrected_volatile) = optional(count(MemoryError::Corrected), "ECC errors", index)?
    else {
        return Ok(None);
    };
    let uncorrected = optional(count(MemoryError::Uncorrected), "ECC errors", index)?;
    Ok(uncorrected.map(|uncorrected_volatile| EccCounts {
        corrected_volatile,
        uncorrected_volatile,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_readings_stand_for_a_second() {
        let readings = SlowReadings {
            read_at_ms: 5_000,
            fan_count: 2,
            pcie_link_gen: Some(4),
            pcie_link_width: Some(16),
            pcie_link_gen_max: Some(4),
            pcie_link_width_max: Some(16),
            ecc: None,
        };
        assert!(readings.fresh_at(5_000));
        assert!(readings.fresh_at(5_999));
        assert!(!readings.fresh_at(6_000));
    }
}
