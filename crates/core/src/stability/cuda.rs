//! The real device: CUDA's driver API through cudarc (loaded at run time: only the driver's
//! libcuda.so), running the kernels of kernels/stability.cu, embedded as PTX for sm_80 that
//! the driver compiles for the card when it loads them. docs/stability.md, "The kernels".
//!
//! All work goes to the context's default stream, in order, and each batch ends with one
//! synchronisation, where a fault on the card shows up. No panic leaves this module: cudarc
//! panics where libcuda (or one of its functions) is missing, so [`CudaDevice::open`] asks for
//! the library first and every call runs under `catch_unwind` as a last guard.

use std::ffi::{CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use cudarc::driver::result;
use cudarc::driver::sys::{self, CUdevice_attribute};
use errors::{NO_DRIVER, cuda_error, cuda_uuid_bytes, not_visible_message};

use super::compute::{ComputeDevice, ComputeError, ComputeSetup, VramPattern};
use gputune_formats::reports::stability::{Checked, Prepared};

pub use copy::{CopyBuffer, PinnedBuffer};
pub use errors::parse_gpu_uuid;

mod copy;
mod errors;
mod work;

/// The kernels, compiled from kernels/stability.cu by tools/kernels/build-ptx.sh.
pub const PTX: &str = include_str!("kernels/stability.ptx");

/// The kernels this device loads from [`PTX`], in the order of [`Kernel`].
pub const KERNEL_NAMES: [&str; 6] = [
    "gemm_fill",
    "gemm_bf16",
    "compare_f32",
    "fma_chain",
    "vram_fill",
    "vram_check",
];

#[derive(Clone, Copy)]
enum Kernel {
    GemmFill,
    GemmBf16,
    CompareF32,
    FmaChain,
    VramFill,
    VramCheck,
}

/// Threads in every block (THREADS in stability.cu: its block sums assume it).
const THREADS: u32 = 256;
/// The GEMM's tile (TILE in stability.cu): each block computes 128×128 of C.
const GEMM_TILE: u32 = 128;
/// The memory test allocates its region in pieces this big, so a fragmented card still gives
/// most of its free memory.
const VRAM_CHUNK_BYTES: u64 = 512 << 20;
/// Blocks per multiprocessor for the kernels that stride over their data.
const BLOCKS_PER_MULTIPROCESSOR: u32 = 8;
/// The largest GEMM: its element indices are 32-bit, as in reference.rs.
const MAX_GEMM_N: u32 = 32768;

/// A block of device memory.
#[derive(Debug, Clone, Copy)]
struct DeviceBuffer {
    pointer: sys::CUdeviceptr,
    bytes: u64,
}

/// The buffers [`ComputeDevice::prepare`] set up.
#[derive(Debug, Clone)]
struct Work {
    setup: ComputeSetup,
    a: DeviceBuffer,
    b: DeviceBuffer,
    c: DeviceBuffer,
    c_ref: DeviceBuffer,
    fma_reference: DeviceBuffer,
    /// One u64: the wrong results a batch counted.
    counter: DeviceBuffer,
    /// The memory test's region, in order.
    vram: Vec<DeviceBuffer>,
}

/// One CUDA GPU running the check. See the module's documentation.
pub struct CudaDevice {
    device: sys::CUdevice,
    /// The device's primary context, retained while this lives.
    context: sys::CUcontext,
    module: sys::CUmodule,
    functions: [sys::CUfunction; 6],
    name: String,
    runtime: String,
    multiprocessors: u32,
    /// Everything allocated, freed on the next prepare and on drop.
    allocations: Vec<DeviceBuffer>,
    work: Option<Work>,
}

// SAFETY: CUDA's handles may be used from any thread once the context is made current there
// (every method does so first), and `&mut self` keeps the use to one thread at a time.
unsafe impl Send for CudaDevice {}

/// Runs `work`, turning a panic inside cudarc into an error.
fn guarded<T>(
    doing: &str,
    work: impl FnOnce() -> Result<T, ComputeError>,
) -> Result<T, ComputeError> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| {
        Err(ComputeError::Unavailable(format!(
            "The CUDA driver library failed while {doing} (it may lack a function this check \
             needs): update the NVIDIA driver and run the check again."
        )))
    })
}

/// A kernel parameter: the address of its value, as cuLaunchKernel takes it.
fn param<T>(value: &mut T) -> *mut c_void {
    (value as *mut T).cast()
}

fn attribute(device: sys::CUdevice, which: CUdevice_attribute) -> Result<i32, ComputeError> {
    // SAFETY: `device` came from cuDeviceGet.
    unsafe { result::device::get_attribute(device, which) }
        .map_err(|error| cuda_error(error, "reading the GPU's properties"))
}

impl CudaDevice {
    /// Opens the CUDA device whose UUID is NVML's `gpu_uuid` ("GPU-…"), and loads the kernels.
    pub fn open(gpu_uuid: &str) -> Result<CudaDevice, ComputeError> {
        // SAFETY: only tries to load libcuda; cudarc panics on its first call without it.
        if !unsafe { sys::is_culib_present() } {
            return Err(ComputeError::Unavailable(NO_DRIVER.to_string()));
        }
        let wanted = parse_gpu_uuid(gpu_uuid).ok_or_else(|| {
            ComputeError::Unavailable(format!(
                "{gpu_uuid} is not a GPU's UUID (GPU-xxxxxxxx-…): the check runs on a whole GPU, \
                 not on a MIG instance."
            ))
        })?;
        guarded("opening the GPU", || Self::open_found(gpu_uuid, wanted))
    }

    fn open_found(gpu_uuid: &str, wanted: [u8; 16]) -> Result<CudaDevice, ComputeError> {
        result::init().map_err(|error| cuda_error(error, "starting CUDA"))?;
        let count =
            result::device::get_count().map_err(|error| cuda_error(error, "listing GPUs"))?;
        let mut found = None;
        for ordinal in 0..count {
            let device =
                result::device::get(ordinal).map_err(|error| cuda_error(error, "listing GPUs"))?;
            let uuid = result::device::get_uuid(device)
                .map_err(|error| cuda_error(error, "reading a GPU's UUID"))?;
            if cuda_uuid_bytes(&uuid.bytes) == wanted {
                found = Some(device);
                break;
            }
        }
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let device = found.ok_or_else(|| {
            ComputeError::Unavailable(not_visible_message(gpu_uuid, count, visible.as_deref()))
        })?;
        // Waiting for the card sleeps instead of spinning a CPU core. Best effort: another
        // process may already hold the primary context with other flags.
        let blocking = sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32;
        // SAFETY: `device` came from cuDeviceGet.
        let _ = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(device, blocking) };
        // SAFETY: as above; released in Drop.
        let context = unsafe { result::primary_ctx::retain(device) }
            .map_err(|error| cuda_error(error, "opening the GPU"))?;
        let mut cuda = CudaDevice {
            device,
            context,
            module: std::ptr::null_mut(),
            functions: [std::ptr::null_mut(); 6],
            name: String::new(),
            runtime: String::new(),
            multiprocessors: 1,
            allocations: Vec::new(),
            work: None,
        };
        cuda.make_current()?;
        cuda.name = result::device::get_name(device)
            .map_err(|error| cuda_error(error, "reading the GPU's name"))?;
        let major = attribute(
            device,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        )?;
        let minor = attribute(
            device,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        )?;
        if major < 8 {
            return Err(ComputeError::Unavailable(format!(
                "{} is sm_{major}{minor}: the check's GEMM needs bf16 tensor cores (compute \
                 capability 8.0, Ampere, or newer).",
                cuda.name
            )));
        }
        let mut version = 0;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut version) }
            .result()
            .map_err(|error| cuda_error(error, "reading the driver's version"))?;
        cuda.runtime = format!(
            "CUDA {}.{} driver, sm_{major}{minor}",
            version / 1000,
            version % 1000 / 10
        );
        let multiprocessors = attribute(
            device,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )?;
        cuda.multiprocessors = u32::try_from(multiprocessors).unwrap_or(1).max(1);
        cuda.load_kernels()?;
        Ok(cuda)
    }

    fn load_kernels(&mut self) -> Result<(), ComputeError> {
        let damaged = || {
            ComputeError::Unavailable(
                "The embedded kernels are damaged (a NUL byte in their text): rebuild gputune."
                    .to_string(),
            )
        };
        let ptx = CString::new(PTX).map_err(|_| damaged())?;
        // SAFETY: a NUL-terminated PTX text; the driver compiles it for this card.
        self.module = unsafe { result::module::load_data(ptx.as_ptr().cast()) }
            .map_err(|error| cuda_error(error, "loading the check's kernels"))?;
        for (slot, name) in self.functions.iter_mut().zip(KERNEL_NAMES) {
            let name_c = CString::new(name).map_err(|_| damaged())?;
            // SAFETY: the module was just loaded.
            *slot = unsafe { result::module::get_function(self.module, name_c) }
                .map_err(|error| cuda_error(error, &format!("finding the kernel {name}")))?;
        }
        Ok(())
    }

    fn make_current(&self) -> Result<(), ComputeError> {
        // SAFETY: the context is retained while self lives.
        unsafe { result::ctx::set_current(self.context) }
            .map_err(|error| cuda_error(error, "making the GPU's context current"))
    }

    fn allocate(&mut self, bytes: u64, what: &str) -> Result<DeviceBuffer, ComputeError> {
        let size = usize::try_from(bytes).map_err(|_| {
            ComputeError::OutOfMemory(format!(
                "{what} ({bytes} bytes) is too big for this machine."
            ))
        })?;
        // SAFETY: plain device memory, freed in free_all.
        let pointer = unsafe { result::malloc_sync(size) }
            .map_err(|error| cuda_error(error, &format!("allocating {what}")))?;
        let buffer = DeviceBuffer { pointer, bytes };
        self.allocations.push(buffer);
        Ok(buffer)
    }

    fn free_all(&mut self) {
        self.work = None;
        for buffer in self.allocations.drain(..) {
            // SAFETY: allocated by cuMemAlloc and freed once. An error here (after a fault)
            // leaves nothing to do.
            let _ = unsafe { result::free_sync(buffer.pointer) };
        }
    }

    fn launch(
        &self,
        kernel: Kernel,
        grid: (u32, u32),
        params: &mut [*mut c_void],
    ) -> Result<(), ComputeError> {
        let function = self.functions[kernel as usize];
        // SAFETY: each parameter points at a value of the type the kernel declares (see
        // stability.cu), and the buffers live until free_all, after the work is done.
        unsafe {
            result::launch_kernel(
                function,
                (grid.0, grid.1, 1),
                (THREADS, 1, 1),
                0,
                std::ptr::null_mut(),
                params,
            )
        }
        .map_err(|error| {
            cuda_error(
                error,
                &format!("starting {}", KERNEL_NAMES[kernel as usize]),
            )
        })
    }

    /// Blocks for a kernel that strides over `items`: enough for every multiprocessor.
    fn stride_blocks(&self, items: u64) -> u32 {
        let needed = items.div_ceil(u64::from(THREADS)).max(1);
        let most = u64::from(self.multiprocessors * BLOCKS_PER_MULTIPROCESSOR);
        needed.min(most) as u32
    }

    fn synchronize(&self, doing: &str) -> Result<(), ComputeError> {
        result::ctx::synchronize().map_err(|error| cuda_error(error, doing))
    }

    fn zero_counter(&self, counter: DeviceBuffer) -> Result<(), ComputeError> {
        // SAFETY: the counter holds 8 bytes.
        unsafe { result::memset_d8_sync(counter.pointer, 0, 8) }
            .map_err(|error| cuda_error(error, "clearing the wrong-result counter"))
    }

    fn read_counter(&self, counter: DeviceBuffer) -> Result<u64, ComputeError> {
        let mut count = [0u64; 1];
        // SAFETY: the counter holds one u64.
        unsafe { result::memcpy_dtoh_sync(&mut count, counter.pointer) }
            .map_err(|error| cuda_error(error, "reading the wrong-result counter"))?;
        Ok(count[0])
    }

    fn work(&self) -> Result<Work, ComputeError> {
        self.work.clone().ok_or_else(|| {
            ComputeError::Unavailable("The GPU was asked for work before it was prepared.".into())
        })
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            if self.make_current().is_ok() {
                self.free_all();
                if !self.module.is_null() {
                    // SAFETY: loaded once, unloaded once.
                    let _ = unsafe { result::module::unload(self.module) };
                }
            }
            // SAFETY: retained once in open_found.
            let _ = unsafe { result::primary_ctx::release(self.device) };
        }));
    }
}

impl ComputeDevice for CudaDevice {
    fn prepare(
        &mut self,
        setup: &ComputeSetup,
        fma_reference: &[u32],
    ) -> Result<Prepared, ComputeError> {
        guarded("preparing the check", || {
            self.prepare_work(setup, fma_reference)
        })
    }

    fn gemm(&mut self, passes: u32) -> Result<Checked, ComputeError> {
        guarded("running the GEMM", || self.run_gemm(passes))
    }

    fn fma(&mut self) -> Result<Checked, ComputeError> {
        guarded("running the FMA chain", || self.run_fma())
    }

    fn vram(&mut self, pattern: VramPattern) -> Result<Checked, ComputeError> {
        guarded("testing VRAM", || self.run_vram(pattern))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_libcuda_opening_says_the_driver_is_missing() {
        // This machine (and CI) has no NVIDIA driver: the sentence, not a panic.
        // SAFETY: only tries to load the library.
        if unsafe { sys::is_culib_present() } {
            eprintln!("SKIPPED: libcuda is installed here; this test is for machines without it");
            return;
        }
        let opened = CudaDevice::open("GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
        assert_eq!(
            opened.err(),
            Some(ComputeError::Unavailable(NO_DRIVER.to_string()))
        );
    }

    #[test]
    fn the_loaded_kernels_are_the_embedded_ptxs_entries() {
        for name in KERNEL_NAMES {
            assert!(PTX.contains(&format!(".entry {name}(")), "{name}");
        }
        assert!(!PTX.contains('\0'));
    }
}
