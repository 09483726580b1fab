//! The copy test's operations on the real device (`gputune links`, crates/core/src/pcie/): its
//! buffers (device memory, pinned host memory), the copies host→device, device→host and card
//! to card, and the pattern written and checked on the card by the check's own `vram_fill` and
//! `vram_check` kernels (`VramPattern::OwnAddress`: each 32-bit word its own index mixed with
//! a seed, so a stuck bit, a shifted and a repeated block all show). Every call synchronises
//! before it returns, so a copy's time is the copy's, and every CUDA error goes through
//! `cuda_error` under the module's `guarded`.

use std::ffi::c_void;

use cudarc::driver::result;
use cudarc::driver::sys::{self, CUresult};

use super::{CudaDevice, DeviceBuffer, Kernel, cuda_error, guarded, param};
use crate::stability::compute::{ComputeError, VramPattern};

/// Pinned (page-locked) host memory, freed when dropped. Drop it before the device whose
/// context allocated it.
pub struct PinnedBuffer {
    pointer: *mut c_void,
    bytes: usize,
}

// SAFETY: plain host memory, used by one thread at a time through `&mut`.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    /// The buffer as 32-bit words (the pattern's unit).
    pub fn words(&self) -> &[u32] {
        // SAFETY: cuMemAllocHost gave `bytes` bytes, page-aligned, live until drop.
        unsafe { std::slice::from_raw_parts(self.pointer.cast::<u32>(), self.bytes / 4) }
    }

    pub fn words_mut(&mut self) -> &mut [u32] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pointer.cast::<u32>(), self.bytes / 4) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            // SAFETY: allocated by cuMemAllocHost, freed once.
            let _ = unsafe { sys::cuMemFreeHost(self.pointer) };
        });
    }
}

/// A buffer on the card, for the copy test.
#[derive(Debug, Clone, Copy)]
pub struct CopyBuffer(DeviceBuffer);

impl CopyBuffer {
    pub fn bytes(self) -> u64 {
        self.0.bytes
    }
}

impl CudaDevice {
    /// The runtime, for the report ("CUDA 12.6 driver, sm_89").
    pub fn runtime(&self) -> &str {
        &self.runtime
    }

    /// `bytes` of device memory for copies (freed with the device).
    pub fn copy_buffer(&mut self, bytes: u64) -> Result<CopyBuffer, ComputeError> {
        guarded("allocating the copy test's memory", || {
            self.make_current()?;
            self.allocate(bytes, "the copy test's buffer")
                .map(CopyBuffer)
        })
    }

    /// `bytes` of pinned host memory, in this card's context.
    pub fn pinned_buffer(&mut self, bytes: u64) -> Result<PinnedBuffer, ComputeError> {
        guarded("allocating pinned host memory", || {
            self.make_current()?;
            let size = usize::try_from(bytes).map_err(|_| {
                ComputeError::OutOfMemory(format!("{bytes} bytes do not fit this machine."))
            })?;
            let mut pointer = std::ptr::null_mut();
            // SAFETY: writes one pointer; freed by PinnedBuffer's drop.
            unsafe { sys::cuMemAllocHost_v2(&mut pointer, size) }
                .result()
                .map_err(|error| cuda_error(error, "allocating pinned host memory"))?;
            Ok(PinnedBuffer {
                pointer,
                bytes: size,
            })
        })
    }

    /// Writes the pattern of `seed` over the buffer, on the card.
    pub fn fill_pattern(&mut self, buffer: CopyBuffer, seed: u32) -> Result<(), ComputeError> {
        guarded("writing the copy test's pattern", || {
            self.make_current()?;
            self.launch_pattern(Kernel::VramFill, buffer.0, seed, None)?;
            self.synchronize("writing the copy test's pattern")
        })
    }

    /// Counts the 32-bit words of the buffer that differ from the pattern of `seed`, on the
    /// card; `counter` is an 8-byte buffer of this card's.
    pub fn count_wrong(
        &mut self,
        buffer: CopyBuffer,
        seed: u32,
        counter: CopyBuffer,
    ) -> Result<u64, ComputeError> {
        guarded("checking a copy on the card", || {
            self.make_current()?;
            self.zero_counter(counter.0)?;
            self.launch_pattern(Kernel::VramCheck, buffer.0, seed, Some(counter.0))?;
            self.synchronize("checking a copy on the card")?;
            self.read_counter(counter.0)
        })
    }

    fn launch_pattern(
        &self,
        kernel: Kernel,
        buffer: DeviceBuffer,
        seed: u32,
        counter: Option<DeviceBuffer>,
    ) -> Result<(), ComputeError> {
        let (kind, code_param) = VramPattern::OwnAddress { seed }.code();
        let (mut kind, mut code_param) = (kind, code_param);
        let mut pointer = buffer.pointer;
        let mut vectors = buffer.bytes / 16;
        let mut first = 0u64;
        let mut counter_pointer = counter.map_or(0, |counter| counter.pointer);
        let blocks = self.stride_blocks(vectors);
        let mut params = vec![
            param(&mut pointer),
            param(&mut vectors),
            param(&mut first),
            param(&mut kind),
            param(&mut code_param),
        ];
        if counter.is_some() {
            params.push(param(&mut counter_pointer));
        }
        self.launch(kernel, (blocks, 1), &mut params)
    }

    /// Host → this card, the whole buffer; returns when the copy is done.
    pub fn copy_to_device(
        &mut self,
        to: CopyBuffer,
        from: &PinnedBuffer,
    ) -> Result<(), ComputeError> {
        guarded("copying host to device", || {
            self.make_current()?;
            let bytes = (to.0.bytes as usize).min(from.bytes);
            // SAFETY: both buffers hold at least `bytes`; the host one is pinned.
            unsafe { sys::cuMemcpyHtoD_v2(to.0.pointer, from.pointer, bytes) }
                .result()
                .map_err(|error| cuda_error(error, "copying host to device"))?;
            self.synchronize("copying host to device")
        })
    }

    /// This card → host, the whole buffer; returns when the copy is done.
    pub fn copy_to_host(
        &mut self,
        to: &mut PinnedBuffer,
        from: CopyBuffer,
    ) -> Result<(), ComputeError> {
        guarded("copying device to host", || {
            self.make_current()?;
            let bytes = (from.0.bytes as usize).min(to.bytes);
            // SAFETY: both buffers hold at least `bytes`; the host one is pinned.
            unsafe { sys::cuMemcpyDtoH_v2(to.pointer, from.0.pointer, bytes) }
                .result()
                .map_err(|error| cuda_error(error, "copying device to host"))?;
            self.synchronize("copying device to host")
        })
    }

    /// Lets this card's context reach `peer`'s memory directly. `false` where the driver
    /// does not allow P2P between them.
    pub fn enable_peer_access(&mut self, peer: &CudaDevice) -> Result<bool, ComputeError> {
        guarded("enabling P2P", || {
            let mut can = 0;
            // SAFETY: writes one int; both devices came from cuDeviceGet.
            unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.device, peer.device) }
                .result()
                .map_err(|error| cuda_error(error, "asking whether P2P is allowed"))?;
            if can == 0 {
                return Ok(false);
            }
            self.make_current()?;
            // SAFETY: the peer's context is retained while it lives.
            match unsafe { sys::cuCtxEnablePeerAccess(peer.context, 0) } {
                CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                    Ok(true)
                }
                CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => Ok(false),
                other => Err(cuda_error(
                    result::DriverError(other),
                    "enabling P2P between the cards",
                )),
            }
        })
    }

    /// This card's buffer → `peer`'s, card to card (peer access enabled first); returns when
    /// the copy is done.
    pub fn copy_to_peer(
        &mut self,
        peer: &mut CudaDevice,
        to: CopyBuffer,
        from: CopyBuffer,
    ) -> Result<(), ComputeError> {
        guarded("copying card to card", || {
            self.make_current()?;
            let bytes = to.0.bytes.min(from.0.bytes) as usize;
            // SAFETY: both buffers hold at least `bytes`, each in its own retained context.
            unsafe {
                sys::cuMemcpyPeer(
                    to.0.pointer,
                    peer.context,
                    from.0.pointer,
                    self.context,
                    bytes,
                )
            }
            .result()
            .map_err(|error| cuda_error(error, "copying card to card"))?;
            self.synchronize("copying card to card")?;
            peer.make_current()?;
            peer.synchronize("copying card to card")
        })
    }
}
