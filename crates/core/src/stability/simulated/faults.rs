//! What a test injects into a [`super::SimulatedDevice`]: wrong values in the next batch, a
//! CUDA error on the next call, a call that hangs until released.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::stability::ComputeError;

/// What the simulated device says for an injected fault, as CUDA would.
pub const INJECTED_FAULT: &str =
    "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered (simulated)";

/// A handle on a simulated device's injected faults; clones share them.
#[derive(Debug, Clone, Default)]
pub struct SimFaults {
    shared: Arc<(Mutex<Pending>, Condvar)>,
}

#[derive(Debug, Default)]
struct Pending {
    gemm_wrong: u64,
    fma_wrong: u64,
    vram_wrong: u64,
    fault: bool,
    hang_next: bool,
    hanging: bool,
}

/// Which part of the work a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Gemm,
    Fma,
    Vram,
}

impl SimFaults {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.shared.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `count` more wrong GEMM elements in the next GEMM batch.
    pub fn wrong_gemm_values(&self, count: u64) {
        self.pending().gemm_wrong += count;
    }

    /// `count` more wrong FMA-chain results in the next FMA batch.
    pub fn wrong_fma_values(&self, count: u64) {
        self.pending().fma_wrong += count;
    }

    /// `count` more VRAM words read back wrong in the next memory batch.
    pub fn wrong_vram_words(&self, count: u64) {
        self.pending().vram_wrong += count;
    }

    /// The next call fails with a CUDA error ([`INJECTED_FAULT`]).
    pub fn fail_next_call(&self) {
        self.pending().fault = true;
    }

    /// The next call blocks until [`SimFaults::release`], as a hung kernel does.
    pub fn hang_next_call(&self) {
        self.pending().hang_next = true;
    }

    /// Ends a hang (the call then returns as usual), or cancels one not begun.
    pub fn release(&self) {
        let mut pending = self.pending();
        pending.hang_next = false;
        pending.hanging = false;
        self.shared.1.notify_all();
    }

    /// Whether a call is blocked in a hang now.
    pub fn is_hanging(&self) -> bool {
        self.pending().hanging
    }

    /// At the start of a call: hangs if asked, then fails if asked.
    pub(super) fn on_call(&self) -> Result<(), ComputeError> {
        let mut pending = self.pending();
        if pending.hang_next {
            pending.hang_next = false;
            pending.hanging = true;
            while pending.hanging {
                pending = self
                    .shared
                    .1
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
        if std::mem::take(&mut pending.fault) {
            return Err(ComputeError::Fault(INJECTED_FAULT.to_string()));
        }
        Ok(())
    }

    /// The wrong values injected for `part`, taken (each is counted once).
    pub(super) fn take_wrong(&self, part: Part) -> u64 {
        let mut pending = self.pending();
        match part {
            Part::Gemm => std::mem::take(&mut pending.gemm_wrong),
            Part::Fma => std::mem::take(&mut pending.fma_wrong),
            Part::Vram => std::mem::take(&mut pending.vram_wrong),
        }
    }
}
