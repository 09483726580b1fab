//! The simulated cards' critical errors (Xid 13 when a busy card runs past its silicon's hard
//! limit, `silicon.rs`) as a watcher sees them, and what tests may inject: Xids and ECC errors.

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use super::SimBackend;
use super::physics::SimGpu;
use super::silicon::SiliconMargin;
use gputune_formats::card::{CriticalEvent, DeviceError, EccCounts};

/// How often a wait for a critical error looks at the cards: the sim steps 100 ms at a time,
/// and looking more often would only cut its steps shorter.
const XID_POLL_MS: u64 = 100;
/// The Xid an unstable clock gives: a graphics engine exception.
const UNSTABLE_XID: u64 = 13;
/// How far below its hard limit a card that raised an Xid must come before it may raise
/// another (one boost bin).
const XID_HYSTERESIS_MHZ: f64 = 15.0;
/// VRAM words a busy card reads or writes a second, for its ECC errors (about 400 GB/s).
const ECC_WORDS_PER_S: f64 = 1e11;

impl SimGpu {
    /// What the silicon margin says of this step: an Xid on going busy past the hard limit,
    /// and ECC errors while the memory runs past its margin (docs/simulator.md).
    pub(super) fn check_silicon(&mut self, busy: bool, gpu_clock_mhz: u32, step_s: f64) {
        let margin = SiliconMargin::for_card(&self.spec, &self.uuid);
        let offset_mhz = self.effective_gpu_offset_mhz();
        let hard_limit_mhz = margin.hard_limit_mhz(gpu_clock_mhz, self.temperature_c);
        // Entering the region raises one Xid; leaving it takes going idle or a whole bin
        // below the limit, so a clock or temperature wobbling across it raises no flood.
        let past = busy
            && if self.past_hard_limit {
                f64::from(offset_mhz) > hard_limit_mhz - XID_HYSTERESIS_MHZ
            } else {
                f64::from(offset_mhz) > hard_limit_mhz
            };
        if past && !self.past_hard_limit {
            self.xid_count += 1;
        }
        self.past_hard_limit = past;
        if busy && self.spec.ecc_reported {
            let rate = margin.memory_wrong_rate(self.effective_memory_offset_mhz());
            let corrected = rate * ECC_WORDS_PER_S * step_s;
            // ECC corrects single-bit errors; about one in a thousand flips two bits.
            self.ecc_errors.0 += corrected;
            self.ecc_errors.1 += corrected / 1000.0;
        }
    }

    /// The ECC counters NVML would report; `None` for a card without ECC.
    pub fn ecc_counts(&self) -> Option<EccCounts> {
        self.spec.ecc_reported.then(|| EccCounts {
            corrected_volatile: self.ecc_errors.0.max(0.0) as u64,
            uncorrected_volatile: self.ecc_errors.1.max(0.0) as u64,
        })
    }

    /// Adds ECC errors as if the memory had made them (tests).
    pub fn inject_ecc_errors(&mut self, corrected: u64, uncorrected: u64) {
        self.ecc_errors.0 += corrected as f64;
        self.ecc_errors.1 += uncorrected as f64;
    }
}

impl SimBackend {
    /// Adds ECC errors to GPU `index`'s counters, as its memory would (tests).
    pub fn inject_ecc_errors(
        &self,
        index: u32,
        corrected: u64,
        uncorrected: u64,
    ) -> Result<(), DeviceError> {
        self.with_gpu(index, |gpu| gpu.inject_ecc_errors(corrected, uncorrected))
    }

    /// Makes GPU `index` raise one critical error (Xid 13), as an unstable card would (tests).
    pub fn inject_xid(&self, index: u32) -> Result<(), DeviceError> {
        self.with_gpu(index, |gpu| gpu.xid_count += 1)
    }

    /// Every card's Xid count, advanced to the clock's time.
    fn xid_counts(&self) -> Vec<u64> {
        let now_ms = self.clock.now_ms();
        let mut machine = self.machine.lock().unwrap_or_else(PoisonError::into_inner);
        machine.advance_to(now_ms);
        machine.gpus.iter().map(|gpu| gpu.xid_count).collect()
    }

    /// The first Xid this handle has not reported yet, marked as reported.
    fn unseen_xid(&mut self) -> Option<CriticalEvent> {
        let counts = self.xid_counts();
        let seen = self.xids_seen.get_or_insert_with(|| counts.clone());
        seen.resize(counts.len(), 0);
        let index = counts
            .iter()
            .zip(seen.iter())
            .position(|(count, seen)| count > seen)?;
        seen[index] += 1;
        Some(CriticalEvent {
            gpu_index: index as u32,
            xid: UNSTABLE_XID,
        })
    }

    /// Begins watching: the Xids raised before now are not reported.
    pub(super) fn start_watching(&mut self) {
        if self.xids_seen.is_none() {
            self.xids_seen = Some(self.xid_counts());
        }
    }

    /// Waits at most `timeout_ms` for an Xid this handle has not reported.
    pub(super) fn wait_for_xid(&mut self, timeout_ms: u32) -> Option<CriticalEvent> {
        self.start_watching();
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        loop {
            if let Some(event) = self.unseen_xid() {
                return Some(event);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(XID_POLL_MS)));
        }
    }
}
