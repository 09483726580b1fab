//! What runs the copies: the [`CopyBench`] trait, the real one (CUDA, `cuda.rs`) or the
//! simulated one (`simulated.rs`), and the pattern every copy carries and is checked against.

use super::cuda::CudaBench;
use super::simulated::SimulatedBench;
use crate::device::sim::known_card;
use crate::stability::compute::{ComputeError, VramPattern};
use gputune_formats::card::GpuIdentity;
use gputune_formats::reports::links::{CopyPath, PcieLink};

/// One copy: which way, between which cards (NVML indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    HostToDevice {
        gpu: u32,
    },
    DeviceToHost {
        gpu: u32,
    },
    /// Card to card: peer to peer when `peer` (the driver allows it), else through the host.
    DeviceToDevice {
        from: u32,
        to: u32,
        peer: bool,
    },
}

impl Route {
    /// "host→device", "device→host", "card to card".
    pub fn direction(self) -> &'static str {
        match self {
            Route::HostToDevice { .. } => "host→device",
            Route::DeviceToHost { .. } => "device→host",
            Route::DeviceToDevice { .. } => "card to card",
        }
    }

    /// The pattern's seed for this route's copy number `pass`: every card, pair, direction and
    /// pass writes other words, so data left from another copy never passes for this one.
    pub fn seed(self, pass: u32) -> u32 {
        let (kind, a, b) = match self {
            Route::HostToDevice { gpu } => (1u64, gpu, 0),
            Route::DeviceToHost { gpu } => (2, gpu, 0),
            Route::DeviceToDevice { from, to, .. } => (3, from, to),
        };
        let mixed = crate::device::sim::seed::splitmix64(
            kind << 56 | u64::from(a) << 40 | u64::from(b) << 24 | u64::from(pass),
        );
        (mixed >> 32) as u32
    }
}

/// One copy done and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyChecked {
    pub path: CopyPath,
    pub bytes: u64,
    /// The copy's own time (a through-host copy's two steps together), seconds.
    pub elapsed_s: f64,
    /// 32-bit words that arrived wrong.
    pub wrong_words: u64,
    /// Where the first wrong word lies, bytes from the buffer's start.
    pub first_wrong_offset_bytes: Option<u64>,
}

/// The copies of the test: every card's buffers, and each copy checked bit for bit.
pub trait CopyBench: Send {
    /// What runs them: "CUDA 12.6 driver, sm_89", "simulated".
    fn runtime(&self) -> String;
    /// Sets up a buffer of `bytes` on every card and pinned host memory beside it.
    fn prepare(&mut self, bytes: u64) -> Result<(), ComputeError>;
    /// Copy `pass` of `route` (its pattern's seed is `route.seed(pass)`), checked.
    fn copy(&mut self, route: Route, pass: u32) -> Result<CopyChecked, ComputeError>;
    /// The link a card reached under load, as read: the simulated copies run at its speed.
    fn observe_link(&mut self, gpu: u32, link: PcieLink) {
        let _ = (gpu, link);
    }
}

/// The bench for these cards: the simulated one when every card is one of the simulator's (or
/// the fake library's, known by UUID), else CUDA's.
pub fn open_bench(cards: &[GpuIdentity]) -> Result<Box<dyn CopyBench>, ComputeError> {
    if !cards.is_empty() && cards.iter().all(|card| known_card(&card.uuid).is_some()) {
        return Ok(Box::new(SimulatedBench::new(cards)));
    }
    Ok(Box::new(CudaBench::open(cards)?))
}

/// The 32-bit words of `words` that differ from `seed`'s pattern, and the first one's byte
/// offset.
pub fn check_words(words: &[u32], seed: u32) -> (u64, Option<u64>) {
    let pattern = VramPattern::OwnAddress { seed };
    let mut wrong = 0u64;
    let mut first = None;
    for (index, word) in words.iter().enumerate() {
        if *word != pattern.word(index as u64) {
            wrong += 1;
            first.get_or_insert(index as u64 * 4);
        }
    }
    (wrong, first)
}

/// Fills `words` with `seed`'s pattern.
pub fn fill_words(words: &mut [u32], seed: u32) {
    let pattern = VramPattern::OwnAddress { seed };
    for (index, word) in words.iter_mut().enumerate() {
        *word = pattern.word(index as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(seed: u32) -> Vec<u32> {
        let mut words = vec![0u32; 4096];
        fill_words(&mut words, seed);
        words
    }

    #[test]
    fn the_pattern_catches_a_stuck_bit_a_shifted_and_a_repeated_block() {
        let seed = Route::HostToDevice { gpu: 3 }.seed(1);
        assert_eq!(check_words(&filled(seed), seed), (0, None));

        let mut stuck = filled(seed);
        for word in &mut stuck {
            *word &= !(1 << 7);
        }
        let (wrong, first) = check_words(&stuck, seed);
        assert!(
            wrong > 1000,
            "a bit stuck at 0 shows in about half the words: {wrong}"
        );
        assert!(first.is_some());

        let mut shifted = filled(seed);
        shifted.copy_within(0..4000, 16);
        assert_eq!(check_words(&shifted, seed).1, Some(16 * 4));

        let mut repeated = filled(seed);
        repeated.copy_within(0..256, 256);
        assert_eq!(check_words(&repeated, seed), (256, Some(256 * 4)));
    }

    #[test]
    fn every_route_and_pass_writes_its_own_words() {
        let routes = [
            Route::HostToDevice { gpu: 0 },
            Route::DeviceToHost { gpu: 0 },
            Route::HostToDevice { gpu: 1 },
            Route::DeviceToDevice {
                from: 0,
                to: 1,
                peer: false,
            },
            Route::DeviceToDevice {
                from: 1,
                to: 0,
                peer: false,
            },
        ];
        let mut seeds: Vec<u32> = routes
            .iter()
            .flat_map(|route| (0..3).map(|pass| route.seed(pass)))
            .collect();
        let count = seeds.len();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), count);
        // A copy left from another pass is wrong data for this one.
        let old = filled(Route::HostToDevice { gpu: 0 }.seed(0));
        assert_eq!(
            check_words(&old, Route::HostToDevice { gpu: 0 }.seed(1)).0,
            4096
        );
    }
}
