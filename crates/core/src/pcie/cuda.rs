//! The real copies: CUDA's driver API through the stability check's device
//! (`stability::cuda::CudaDevice` and its copy operations, `stability/cuda/copy.rs`): libcuda
//! loaded at run time, each card found by its NVML UUID, every call guarded. One buffer on
//! every card; two pinned host buffers shared by all of them (with unified addressing, which
//! every 64-bit Linux driver has, pinned memory is reachable from every card's context).

use std::time::Instant;

use super::bench::{CopyBench, CopyChecked, Route, check_words, fill_words};
use crate::stability::compute::ComputeError;
use crate::stability::cuda::{CopyBuffer, CudaDevice, PinnedBuffer};
use gputune_formats::card::GpuIdentity;
use gputune_formats::reports::links::CopyPath;

/// The host's side: what is sent, and what comes back.
struct HostBuffers {
    send: PinnedBuffer,
    receive: PinnedBuffer,
}

/// One card's side: its buffer and the 8-byte counter of wrong words.
#[derive(Clone, Copy)]
struct CardBuffers {
    data: CopyBuffer,
    counter: CopyBuffer,
}

struct CudaCard {
    gpu: u32,
    buffers: Option<CardBuffers>,
    device: CudaDevice,
}

/// The cards' copies through CUDA. See the module's documentation.
pub struct CudaBench {
    // Dropped first: the pinned memory belongs to the first card's context.
    host: Option<HostBuffers>,
    cards: Vec<CudaCard>,
}

impl CudaBench {
    /// Opens every card in CUDA (by UUID).
    pub fn open(cards: &[GpuIdentity]) -> Result<CudaBench, ComputeError> {
        let cards = cards
            .iter()
            .map(|card| {
                Ok(CudaCard {
                    gpu: card.index,
                    buffers: None,
                    device: CudaDevice::open(&card.uuid)?,
                })
            })
            .collect::<Result<Vec<_>, ComputeError>>()?;
        Ok(CudaBench { host: None, cards })
    }

    fn position(&self, gpu: u32) -> Result<usize, ComputeError> {
        self.cards
            .iter()
            .position(|card| card.gpu == gpu)
            .ok_or_else(|| {
                ComputeError::Unavailable(format!("GPU {gpu} was not opened for the copy test."))
            })
    }

    fn parts(&mut self, gpu: u32) -> Result<(&mut CudaCard, &mut HostBuffers), ComputeError> {
        let position = self.position(gpu)?;
        let host = self.host.as_mut().ok_or_else(not_prepared)?;
        Ok((&mut self.cards[position], host))
    }

    fn host_to_device(&mut self, gpu: u32, seed: u32) -> Result<CopyChecked, ComputeError> {
        let (card, host) = self.parts(gpu)?;
        let buffers = card.buffers.ok_or_else(not_prepared)?;
        fill_words(host.send.words_mut(), seed);
        let started = Instant::now();
        card.device.copy_to_device(buffers.data, &host.send)?;
        let elapsed_s = started.elapsed().as_secs_f64();
        let wrong_words = card
            .device
            .count_wrong(buffers.data, seed, buffers.counter)?;
        let first_wrong_offset_bytes = if wrong_words > 0 {
            card.device.copy_to_host(&mut host.receive, buffers.data)?;
            check_words(host.receive.words(), seed).1
        } else {
            None
        };
        Ok(CopyChecked {
            path: CopyPath::Direct,
            bytes: buffers.data.bytes(),
            elapsed_s,
            wrong_words,
            first_wrong_offset_bytes,
        })
    }

    fn device_to_host(&mut self, gpu: u32, seed: u32) -> Result<CopyChecked, ComputeError> {
        let (card, host) = self.parts(gpu)?;
        let buffers = card.buffers.ok_or_else(not_prepared)?;
        card.device.fill_pattern(buffers.data, seed)?;
        let started = Instant::now();
        card.device.copy_to_host(&mut host.receive, buffers.data)?;
        let elapsed_s = started.elapsed().as_secs_f64();
        let (wrong_words, first_wrong_offset_bytes) = check_words(host.receive.words(), seed);
        Ok(CopyChecked {
            path: CopyPath::Direct,
            bytes: buffers.data.bytes(),
            elapsed_s,
            wrong_words,
            first_wrong_offset_bytes,
        })
    }

    fn device_to_device(
        &mut self,
        (from, to): (u32, u32),
        peer: bool,
        seed: u32,
    ) -> Result<CopyChecked, ComputeError> {
        let (from_at, to_at) = (self.position(from)?, self.position(to)?);
        let host = self.host.as_mut().ok_or_else(not_prepared)?;
        let (source, target) = two(&mut self.cards, from_at, to_at)?;
        let (sent, landed) = (
            source.buffers.ok_or_else(not_prepared)?,
            target.buffers.ok_or_else(not_prepared)?,
        );
        source.device.fill_pattern(sent.data, seed)?;
        let peer = peer
            && target.device.enable_peer_access(&source.device)?
            && source.device.enable_peer_access(&target.device)?;
        let started = Instant::now();
        if peer {
            source
                .device
                .copy_to_peer(&mut target.device, landed.data, sent.data)?;
        } else {
            source.device.copy_to_host(&mut host.receive, sent.data)?;
            target.device.copy_to_device(landed.data, &host.receive)?;
        }
        let elapsed_s = started.elapsed().as_secs_f64();
        let wrong_words = target
            .device
            .count_wrong(landed.data, seed, landed.counter)?;
        let first_wrong_offset_bytes = if wrong_words > 0 {
            target.device.copy_to_host(&mut host.receive, landed.data)?;
            check_words(host.receive.words(), seed).1
        } else {
            None
        };
        Ok(CopyChecked {
            path: if peer {
                CopyPath::PeerToPeer
            } else {
                CopyPath::ThroughHost
            },
            bytes: landed.data.bytes(),
            elapsed_s,
            wrong_words,
            first_wrong_offset_bytes,
        })
    }
}

fn not_prepared() -> ComputeError {
    ComputeError::Unavailable("The copy test's buffers were not set up: prepare first.".into())
}

/// Two different cards of `cards`, both mutable.
fn two(
    cards: &mut [CudaCard],
    a: usize,
    b: usize,
) -> Result<(&mut CudaCard, &mut CudaCard), ComputeError> {
    if a == b {
        return Err(ComputeError::Unavailable(
            "A card-to-card copy needs two different cards.".to_string(),
        ));
    }
    if a < b {
        let (low, high) = cards.split_at_mut(b);
        Ok((&mut low[a], &mut high[0]))
    } else {
        let (low, high) = cards.split_at_mut(a);
        Ok((&mut high[0], &mut low[b]))
    }
}

impl CopyBench for CudaBench {
    fn runtime(&self) -> String {
        self.cards.first().map_or_else(
            || "CUDA".to_string(),
            |card| card.device.runtime().to_string(),
        )
    }

    fn prepare(&mut self, bytes: u64) -> Result<(), ComputeError> {
        // The kernels move 16-byte vectors.
        let bytes = bytes - bytes % 16;
        if bytes == 0 {
            return Err(ComputeError::Unavailable(
                "The copy test needs at least 16 bytes a copy.".to_string(),
            ));
        }
        self.host = None;
        for card in &mut self.cards {
            card.buffers = Some(CardBuffers {
                data: card.device.copy_buffer(bytes)?,
                counter: card.device.copy_buffer(8)?,
            });
        }
        let first = self.cards.first_mut().ok_or_else(|| {
            ComputeError::Unavailable("The copy test was given no card.".to_string())
        })?;
        self.host = Some(HostBuffers {
            send: first.device.pinned_buffer(bytes)?,
            receive: first.device.pinned_buffer(bytes)?,
        });
        Ok(())
    }

    fn copy(&mut self, route: Route, pass: u32) -> Result<CopyChecked, ComputeError> {
        let seed = route.seed(pass);
        match route {
            Route::HostToDevice { gpu } => self.host_to_device(gpu, seed),
            Route::DeviceToHost { gpu } => self.device_to_host(gpu, seed),
            Route::DeviceToDevice { from, to, peer } => {
                self.device_to_device((from, to), peer, seed)
            }
        }
    }
}
