//! The simulated copies, for the simulator's and the fake library's cards: each copy is a
//! real one on the CPU of the first 256 KiB (written with the route's pattern, copied, and
//! checked word by word, as the real bench checks the whole buffer), timed as the card's
//! simulated link would carry the whole size, with the wrong bytes a test asks for
//! ([`CopyFaults`]), which the check then has to find. docs/simulator.md, "Links".

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::bench::{CopyBench, CopyChecked, Route, check_words, fill_words};
use crate::device::sim::known_card;
use crate::stability::compute::ComputeError;
use gputune_formats::card::GpuIdentity;
use gputune_formats::reports::links::{CopyPath, PcieLink};

/// The part of each copy really copied and checked.
pub const SAMPLE_BYTES: u64 = 256 << 10;
/// What every copy costs besides its bytes (a DMA's setup, the synchronisation), seconds.
const COPY_LATENCY_S: f64 = 10e-6;
/// Shares of the link's raw rate the copies reach: an RTX 4090 on Gen 4 x16 copies about 26
/// GB/s each way from pinned memory (of 31.5 raw), a little more device→host; card to card
/// over one switch about as much.
const HOST_TO_DEVICE_SHARE: f64 = 0.83;
const DEVICE_TO_HOST_SHARE: f64 = 0.84;
const PEER_SHARE: f64 = 0.82;

/// Where a test wants a copy's data wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAt {
    HostToDevice {
        gpu: u32,
    },
    DeviceToHost {
        gpu: u32,
    },
    /// Card to card, `from` → `to` (whichever path).
    Pair {
        from: u32,
        to: u32,
    },
}

impl FaultAt {
    fn hits(self, route: Route) -> bool {
        match (self, route) {
            (FaultAt::HostToDevice { gpu }, Route::HostToDevice { gpu: on }) => gpu == on,
            (FaultAt::DeviceToHost { gpu }, Route::DeviceToHost { gpu: on }) => gpu == on,
            (FaultAt::Pair { from, to }, Route::DeviceToDevice { from: a, to: b, .. }) => {
                from == a && to == b
            }
            _ => false,
        }
    }
}

/// Wrong bytes a test injects: every copy they hit from then on arrives with that byte's
/// lowest bit flipped (a driver that corrupts a transfer does it on every one). Clones share.
#[derive(Debug, Clone, Default)]
pub struct CopyFaults {
    shared: Arc<Mutex<Vec<(FaultAt, u64)>>>,
}

impl CopyFaults {
    /// The byte at `offset_bytes` of every copy `at` arrives wrong (within the checked
    /// sample: the offset is taken modulo [`SAMPLE_BYTES`]).
    pub fn wrong_byte(&self, at: FaultAt, offset_bytes: u64) {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((at, offset_bytes % SAMPLE_BYTES));
    }

    fn offsets_for(&self, route: Route) -> Vec<u64> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(at, _)| at.hits(route))
            .map(|(_, offset)| *offset)
            .collect()
    }
}

/// The simulated cards' copies. See the module's documentation.
pub struct SimulatedBench {
    /// Each card's link: as observed under load, else the most its model trains to.
    links: BTreeMap<u32, PcieLink>,
    bytes: Option<u64>,
    faults: CopyFaults,
}

impl SimulatedBench {
    pub fn new(cards: &[GpuIdentity]) -> SimulatedBench {
        let links = cards
            .iter()
            .map(|card| {
                let spec = known_card(&card.uuid);
                let link = PcieLink {
                    generation: spec.as_ref().map_or(4, |spec| spec.pcie_link_gen_max),
                    width: spec.as_ref().map_or(16, |spec| spec.pcie_link_width_max),
                };
                (card.index, link)
            })
            .collect();
        SimulatedBench {
            links,
            bytes: None,
            faults: CopyFaults::default(),
        }
    }

    /// A handle to inject wrong bytes with.
    pub fn faults(&self) -> CopyFaults {
        self.faults.clone()
    }

    fn rate_gb_per_s(&self, gpu: u32, share: f64) -> Result<f64, ComputeError> {
        let link = self.links.get(&gpu).ok_or_else(|| {
            ComputeError::Unavailable(format!("GPU {gpu} is not one of the simulated cards."))
        })?;
        Ok((link.raw_gb_per_s() * share).max(0.01))
    }

    /// The whole copy's modeled time, seconds.
    fn modeled_s(&self, route: Route, bytes: u64) -> Result<f64, ComputeError> {
        let gb = bytes as f64 / 1e9;
        let transfer_s = match route {
            Route::HostToDevice { gpu } => gb / self.rate_gb_per_s(gpu, HOST_TO_DEVICE_SHARE)?,
            Route::DeviceToHost { gpu } => gb / self.rate_gb_per_s(gpu, DEVICE_TO_HOST_SHARE)?,
            Route::DeviceToDevice { from, to, peer } if peer => {
                let slower = self
                    .rate_gb_per_s(from, PEER_SHARE)?
                    .min(self.rate_gb_per_s(to, PEER_SHARE)?);
                gb / slower
            }
            // Through the host: down from one card, then up to the other.
            Route::DeviceToDevice { from, to, .. } => {
                gb / self.rate_gb_per_s(from, DEVICE_TO_HOST_SHARE)?
                    + gb / self.rate_gb_per_s(to, HOST_TO_DEVICE_SHARE)?
            }
        };
        Ok(COPY_LATENCY_S + transfer_s)
    }
}

impl CopyBench for SimulatedBench {
    fn runtime(&self) -> String {
        "simulated".to_string()
    }

    fn prepare(&mut self, bytes: u64) -> Result<(), ComputeError> {
        let bytes = bytes - bytes % 16;
        if bytes == 0 {
            return Err(ComputeError::Unavailable(
                "The copy test needs at least 16 bytes a copy.".to_string(),
            ));
        }
        self.bytes = Some(bytes);
        Ok(())
    }

    fn copy(&mut self, route: Route, pass: u32) -> Result<CopyChecked, ComputeError> {
        let started = Instant::now();
        let bytes = self.bytes.ok_or_else(|| {
            ComputeError::Unavailable("The simulated copies were not prepared.".to_string())
        })?;
        let seed = route.seed(pass);
        let mut sent = vec![0u32; (bytes.min(SAMPLE_BYTES) / 4) as usize];
        fill_words(&mut sent, seed);
        let mut landed = sent.clone();
        for offset in self.faults.offsets_for(route) {
            if let Some(word) = landed.get_mut((offset / 4) as usize) {
                *word ^= 1 << ((offset % 4) * 8);
            }
        }
        let (wrong_words, first_wrong_offset_bytes) = check_words(&landed, seed);
        let modeled_s = self.modeled_s(route, bytes)?;
        if let Some(left) =
            Duration::from_secs_f64(modeled_s.min(60.0)).checked_sub(started.elapsed())
        {
            std::thread::sleep(left);
        }
        Ok(CopyChecked {
            path: match route {
                Route::DeviceToDevice { peer: true, .. } => CopyPath::PeerToPeer,
                Route::DeviceToDevice { .. } => CopyPath::ThroughHost,
                _ => CopyPath::Direct,
            },
            bytes,
            elapsed_s: modeled_s,
            wrong_words,
            first_wrong_offset_bytes,
        })
    }

    fn observe_link(&mut self, gpu: u32, link: PcieLink) {
        self.links.insert(gpu, link);
    }
}
